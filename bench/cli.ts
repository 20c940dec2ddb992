/**
 * How long `flotilla status <id>` takes against the raw `temporal workflow query --type status`
 * on the same run (issue 19's target: at most twice as long). An embedded dev server, the worker
 * as users run it, and one run whose agent sleeps; then the commands, interleaved, `runs` times
 * each, and their medians. `--other DIR` adds another build's `flotilla status` (a checkout with
 * its own `npm run build`), to say what a change bought.
 *
 *   npm run build && npx tsx bench/cli.ts [--runs N] [--other DIR]
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { newRunId, startRun } from '../src/client/index';
import { parseLeaderRequest } from '../src/contracts/request';
import { ensureTemporal } from '../src/temporal/server';
import { startWorkerProcess } from './worker-process';
import { runBench } from './main';

const arg = (name: string) => {
  const i = process.argv.indexOf(name);
  return i === -1 ? undefined : process.argv[i + 1];
};
const runs = Number(arg('--runs') ?? 20);
const other = arg('--other');
const root = mkdtempSync(path.join(os.tmpdir(), 'flotilla-bench-cli-'));
const CLI = path.join(__dirname, '..', 'bin', 'flotilla');

/** The Temporal CLI's own binary: a version manager's shim would add its start to the raw figure. */
function temporalCli(): string {
  const r = spawnSync('bash', ['-c', 'pyenv which temporal 2>/dev/null || command -v temporal'], { encoding: 'utf8' });
  const bin = r.stdout.trim();
  if (!bin) throw new Error('bench: no `temporal` CLI on PATH');
  return bin;
}

/** A bare remote of one commit, for a run whose single agent sleeps until the bench ends. */
function remote(): string {
  const src = path.join(root, 'src');
  const url = path.join(root, 'remote.git');
  const git = (cwd: string, ...args: string[]) =>
    spawnSync('git', ['-c', 'user.name=bench', '-c', 'user.email=bench@localhost', ...args], { cwd });
  spawnSync('mkdir', ['-p', src]);
  git(src, 'init', '-q', '-b', 'main');
  git(src, 'commit', '-q', '--allow-empty', '-m', 'initial');
  git(root, 'clone', '-q', '--bare', src, url);
  return url;
}

/** Milliseconds one run of the command took; throws with its stderr when it fails. */
function timed(argv: string[], env: NodeJS.ProcessEnv): number {
  const started = performance.now();
  const r = spawnSync(argv[0], argv.slice(1), { env, encoding: 'utf8' });
  const ms = performance.now() - started;
  if (r.status !== 0) throw new Error(`${argv.join(' ')} failed (${r.status}): ${r.stderr}`);
  return ms;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];

async function main(): Promise<void> {
  const dataDir = path.join(root, 'data');
  const temporal = await ensureTemporal({ dataDir, port: 18233 + (process.pid % 1000) });
  const client = new Client({
    connection: await Connection.connect({ address: temporal.address }),
    namespace: temporal.namespace,
  });
  // The CLI as a user of the embedded server runs it: by its port (its HTTP API is port + 10).
  const { TEMPORAL_ADDRESS: _configured, ...inherited } = process.env;
  const env = {
    ...inherited,
    FLOTILLA_HOME: dataDir,
    FLOTILLA_TEMPORAL_PORT: temporal.address.split(':')[1],
    TEMPORAL_NAMESPACE: temporal.namespace,
  };
  const worker = await startWorkerProcess({
    client,
    address: temporal.address,
    namespace: temporal.namespace,
    dataDir,
    taskQueue: `bench-cli-${process.pid}`,
    logFile: path.join(root, 'worker.log'),
  });
  try {
    const request = parseLeaderRequest({
      objective: 'bench',
      repo: { url: remote(), baseRef: 'main', targetRef: `bench-${newRunId()}` },
      testCmd: 'true',
      subTasks: [{ id: 't0', prompt: 'bench', ownedPaths: ['t0'], agent: { kind: 'shell', command: 'sleep 600' } }],
    });
    const handle = await startRun(client, request, { taskQueue: worker.taskQueue });
    const id = handle.workflowId;
    const raw = [temporalCli(), 'workflow', 'query', '--type', 'status', '-w', id, '--address', temporal.address];
    raw.push('--namespace', temporal.namespace);
    const commands: Record<string, string[]> = {
      '`flotilla status <id>`': [process.execPath, CLI, 'status', id],
      ...(other && {
        [`\`flotilla status <id>\`, ${other}`]: [process.execPath, path.join(other, 'bin', 'flotilla'), 'status', id],
      }),
      '`temporal workflow query --type status`': raw,
    };
    const names = Object.keys(commands);
    // All warm (the worker has the run cached, the page cache has the programs) before counting.
    for (let i = 0; i < 3; i++) names.forEach((k) => timed(commands[k], env));
    const times = Object.fromEntries(names.map((k) => [k, [] as number[]]));
    for (let i = 0; i < runs; i++) {
      // Rotate which goes first, so none always follows the same one.
      for (let j = 0; j < names.length; j++) {
        const k = names[(i + j) % names.length];
        times[k].push(timed(commands[k], env));
      }
    }
    console.log(
      `load average ${os
        .loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')}, ${runs} runs each, medians:`,
    );
    const rawMs = median(times[names[names.length - 1]]);
    for (const k of names) {
      const ms = median(times[k]);
      const ratio = k === names[names.length - 1] ? '-' : `${(ms / rawMs).toFixed(2)}x (target <= 2x)`;
      console.log(`| ${k} | ${ms.toFixed(0)} ms (min ${Math.min(...times[k]).toFixed(0)}) | ${ratio} |`);
    }
    await handle.terminate('bench over');
  } finally {
    await worker.stop();
    await client.connection.close();
    await temporal.stop();
    rmSync(root, { recursive: true, force: true });
  }
}

runBench('bench', root, main);
