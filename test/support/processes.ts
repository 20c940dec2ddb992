/** Helpers for tests that drive runs from outside: processes, polling. */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import { inject } from 'vitest';

export interface Ran {
  code: number;
  out: string;
  err: string;
}

/** Runs a command without blocking this process, whose event loop also runs the worker. */
export function run(cmd: string, args: string[], extraEnv: Record<string, string> = {}, cwd?: string): Promise<Ran> {
  return new Promise((resolve) => {
    execFile(
      cmd,
      args,
      { encoding: 'utf8', env: { ...process.env, ...extraEnv }, timeout: 120_000, cwd },
      (error, stdout, stderr) => {
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, out: stdout, err: stderr });
      },
    );
  });
}

/** The command that runs our CLI from the sources (bin/flotilla runs the build), from any directory. */
export const CLI = [
  process.execPath,
  '--require',
  createRequire(__filename).resolve('tsx/cjs'),
  path.join(__dirname, '../../src/cli/index.ts'),
];

/** Our CLI, pointed at the suite's server and the given task queue. */
export function flotilla(
  taskQueue: string,
  args: string[],
  extraEnv: Record<string, string> = {},
  cwd?: string,
): Promise<Ran> {
  return run(
    CLI[0],
    [...CLI.slice(1), ...args],
    {
      TEMPORAL_ADDRESS: inject('temporalAddress'),
      FLOTILLA_TASK_QUEUE: taskQueue,
      ...extraEnv,
    },
    cwd,
  );
}

/** Our CLI on a pseudo-terminal (util-linux `script`), as a person runs it; `out` is all it drew. */
export function flotillaOnTerminal(
  taskQueue: string,
  args: string[],
  extraEnv: Record<string, string> = {},
): Promise<Ran> {
  const command = [...CLI, ...args].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
  return run('script', ['-qec', command, '/dev/null'], {
    TERM: 'xterm',
    TEMPORAL_ADDRESS: inject('temporalAddress'),
    FLOTILLA_TASK_QUEUE: taskQueue,
    ...extraEnv,
  });
}

/** Polls `probe` until it returns a value other than undefined, or fails after `ms`. */
export async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, ms = 30_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 150));
  }
}

/** PIDs of processes whose command line contains `marker`: the command and every wrapper (bwrap, sh -c) that names it. */
export async function processesMatching(marker: string): Promise<string[]> {
  return pgrep(escapeRegExp(marker));
}

/**
 * PIDs of processes that are `command` itself. Waiting for these, not for a wrapper whose
 * command line merely mentions it, proves the steps before `command` in a script have run.
 */
export async function processesRunning(command: string): Promise<string[]> {
  return pgrep(`^${escapeRegExp(command)}`);
}

async function pgrep(pattern: string): Promise<string[]> {
  const r = await run('pgrep', ['-f', pattern]);
  return r.out.split('\n').filter(Boolean);
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** A real `flotilla worker` process (from the sources) on the suite's server, once it polls; `output()` is all it printed. */
export async function startWorkerProcess(
  taskQueue: string,
  env: Record<string, string>,
): Promise<{ child: ChildProcess; output(): string; stop(): Promise<void> }> {
  const child = spawn(CLI[0], [...CLI.slice(1), 'worker'], {
    env: { ...process.env, TEMPORAL_ADDRESS: inject('temporalAddress'), FLOTILLA_TASK_QUEUE: taskQueue, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (b) => (out += b));
  child.stderr!.on('data', (b) => (out += b));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
  };
  await waitFor(
    'the worker to poll',
    async () => (out.includes('polling task queue') ? true : undefined),
    120_000,
  ).catch(async (err: Error) => {
    child.kill('SIGKILL');
    throw new Error(`${err.message}; it printed:\n${out}`);
  });
  return { child, output: () => out, stop };
}
