/** Helpers for tests that drive runs from outside: processes (our CLI, worker processes, the Temporal CLI), polling. */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import { inject } from 'vitest';
import { temporalBinary } from '../../src/temporal/server';
import { releaseAtEnd } from './cleanup';

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

/**
 * Where our CLI finds the suite's server: its gRPC address, and its HTTP API when the suite
 * started the server (as the embedded one's is known), so `flotilla status` reads through it.
 * A test that gives an address of its own gets no HTTP API of the suite's with it.
 */
export function suiteTemporal(extraEnv: Record<string, string> = {}): Record<string, string> {
  const http = 'TEMPORAL_ADDRESS' in extraEnv ? '' : inject('temporalHttpUrl');
  return { TEMPORAL_ADDRESS: inject('temporalAddress'), ...(http ? { FLOTILLA_TEMPORAL_HTTP_URL: http } : {}) };
}

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
      ...suiteTemporal(extraEnv),
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
    ...suiteTemporal(extraEnv),
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

/**
 * A command an agent can wait in until the test lets it go (`letGo`): a sleep with a command
 * line of its own, so that a test awaits a condition and then ends the wait, never sleeps itself.
 */
export function holdCommand(): string {
  return `sleep 600.${Math.floor(Math.random() * 1e6)}`;
}

/** Ends every `command` started by holdCommand; the agent's script goes on with what follows it. */
export async function letGo(command: string): Promise<void> {
  for (const pid of await processesRunning(command)) {
    try {
      process.kill(Number(pid), 'SIGTERM');
    } catch {
      // Gone already.
    }
  }
}

async function pgrep(pattern: string): Promise<string[]> {
  const r = await run('pgrep', ['-f', pattern]);
  return r.out.split('\n').filter(Boolean);
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** A process a test started and watches, killed when the test (or file) ends. */
export interface Spawned {
  child: ChildProcess;
  /** All it printed so far, stdout and stderr. */
  output(): string;
  /** What it printed on stderr. */
  stderr(): string;
  /** Its exit code (null when a signal ended it), once it has exited. */
  exited: Promise<number | null>;
  /** Sends `signal` unless it has exited already, and waits for its exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Starts `command` with `env` as its whole environment. */
export function spawnTracked(command: string, args: string[], env: NodeJS.ProcessEnv): Spawned {
  const child = spawn(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.on('data', (b) => (out += b));
  child.stderr!.on('data', (b) => {
    out += b;
    err += b;
  });
  const exited = new Promise<number | null>((resolve) => {
    child.once('exit', (code) => resolve(code));
    child.once('error', () => resolve(null));
  });
  const stop = async (signal: NodeJS.Signals = 'SIGTERM') => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    return exited;
  };
  releaseAtEnd(() => stop('SIGKILL'));
  return { child, output: () => out, stderr: () => err, exited, stop };
}

/** Our CLI as a process that runs on (`watch`), pointed at the suite's server and `taskQueue`. */
export function spawnFlotilla(taskQueue: string, args: string[]): Spawned {
  return spawnTracked(CLI[0], [...CLI.slice(1), ...args], {
    ...process.env,
    ...suiteTemporal(),
    FLOTILLA_TASK_QUEUE: taskQueue,
  });
}

/** A `flotilla worker` process started by a test. */
export interface WorkerProcess extends Spawned {
  /** The line saying it polls, once it does; after `ms`, fails with all it printed. */
  polling(ms?: number): Promise<string>;
}

/**
 * `flotilla worker [args]` from the sources (or the CLI command `cli`), with `env` as its whole
 * environment, under `prefix` (a command such as nsenter that runs it) if given.
 */
export function spawnWorker(
  env: NodeJS.ProcessEnv,
  prefix: string[] = [],
  args: string[] = [],
  cli: string[] = CLI,
): WorkerProcess {
  const [command, ...rest] = [...prefix, ...cli, 'worker', ...args];
  const worker = spawnTracked(command, rest, env);
  const polling = async (ms = 120_000) => {
    const line = pollingLine(worker.output());
    if (line) return line;
    const polls = waitFor('the worker to poll', async () => pollingLine(worker.output()), ms);
    // A worker that refuses to start says why at once: no need to wait out `ms`.
    const died = worker.exited.then((code) => {
      throw new Error(`the worker exited (code ${code}) before it polled`);
    });
    return Promise.race([polls, died]).catch((e: Error) => {
      throw new Error(`${e.message}; it printed:\n${worker.output()}`);
    });
  };
  return { ...worker, polling };
}

const pollingLine = (output: string) => output.split('\n').find((l) => l.includes('polling task queue'));

/** A worker process on the suite's server and `taskQueue`, `env` added to this process's, once it polls. */
export async function startWorkerProcess(taskQueue: string, env: Record<string, string>): Promise<WorkerProcess> {
  const worker = spawnWorker({
    ...process.env,
    TEMPORAL_ADDRESS: inject('temporalAddress'),
    FLOTILLA_TASK_QUEUE: taskQueue,
    ...env,
  });
  await worker.polling();
  return worker;
}

/** The Temporal CLI (`temporal <args…>`) against the suite's server. */
export function temporalCli(...args: string[]): Promise<Ran> {
  return run(temporalBinary(), [...args, '--address', inject('temporalAddress')]);
}
