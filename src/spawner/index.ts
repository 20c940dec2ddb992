/**
 * Where the worker's programs are started (host git, the sandboxes' commands): through the
 * spawner, a small process of its own, once the worker has started one; else by Node directly.
 *
 * Why: Node starts a program by forking the process that asks, and a fork costs with the size of
 * that process. A worker is 300-600 MB resident under load, and its one event-loop thread spent
 * 26-32 % of a 1,000-sub-task run inside `spawn` (bench/README.md); the same spawn from a 40 MB
 * spawner costs a fraction of that, off the worker's thread. Only the starting moves: the program's
 * stdio are sockets the worker holds (source.ts), so its output never passes through the spawner,
 * and the worker still kills process groups itself.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { PassThrough, type Readable, type Writable } from 'node:stream';
import { HEADER_BYTES, SPAWNER_SOURCE } from './source';

export interface ProgramOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** A process group of its own (killed as one with `process.kill(-pid)`). */
  detached?: boolean;
  stdio: ('pipe' | 'ignore')[];
  /** Killed with killSignal after this many milliseconds. */
  timeout?: number;
  killSignal?: NodeJS.Signals;
}

/** What callers use of a started program: Node's ChildProcess has it, and so does one the spawner started. */
export interface Program extends EventEmitter {
  /** Known once 'spawn' is emitted (at once when Node started it). */
  readonly pid: number | undefined;
  readonly stdio: readonly (Readable | Writable | null)[];
  kill(signal?: NodeJS.Signals): boolean;
}

/** The program's stdout, stderr or another piped entry, to read. */
export const readableOf = (p: Program, fd: number) => p.stdio[fd] as Readable;
/** Its stdin or another piped entry, to write. */
export const writableOf = (p: Program, fd: number) => p.stdio[fd] as Writable;

let spawner: Spawner | undefined;
let starting: Promise<string | undefined> | undefined;

/** Starts `file` with `args`: through the spawner when there is one. */
export function startProgram(file: string, args: readonly string[], options: ProgramOptions): Program {
  if (spawner?.alive) return spawner.start(file, args, { ...options, env: options.env ?? process.env });
  return spawn(file, args, options) as unknown as Program;
}

/**
 * Starts this process's spawner, once (later calls share the first's answer); programs started
 * before it is ready are started by Node. A spawner that cannot start leaves it so, with a reason
 * returned for the worker's log.
 */
export function startSpawner(): Promise<string | undefined> {
  starting ??= (async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'flotilla-spawner-'));
    try {
      spawner = await Spawner.start(path.join(dir, 's'));
      return undefined;
    } catch (err) {
      rmSync(dir, { recursive: true, force: true });
      return `programs are started by the worker itself: the spawner did not start (${(err as Error).message})`;
    }
  })();
  return starting;
}

class Spawner {
  alive = true;
  private next = 1;
  private readonly programs = new Map<number, SpawnedProgram>();

  private constructor(
    private readonly process: ChildProcess,
    private readonly sockPath: string,
  ) {
    process.on('message', (m: Reply) => this.programs.get(m.id)?.hear(m));
    // A spawner that dies (killed, out of memory) is seen by whichever of these comes first; an
    // 'error' without a listener would take the worker with it.
    for (const event of ['exit', 'disconnect', 'error']) process.on(event, () => this.died());
  }

  static start(sockPath: string): Promise<Spawner> {
    const child = spawn(process.execPath, ['-e', SPAWNER_SOURCE, sockPath], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      env: { PATH: process.env.PATH },
    });
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => fail(new Error('not listening after 10 s')), 10_000);
      const fail = (err: Error) => {
        clearTimeout(timer);
        child.kill('SIGKILL');
        reject(err);
      };
      child.once('error', fail);
      child.once('exit', (code) => fail(new Error(`exited ${code}`)));
      child.once('message', () => {
        clearTimeout(timer);
        child.removeAllListeners();
        // Neither keeps the worker alive: the spawner goes when the worker does.
        child.unref();
        child.channel?.unref();
        resolve(new Spawner(child, sockPath));
      });
    });
  }

  start(file: string, args: readonly string[], options: ProgramOptions): Program {
    const id = this.next++;
    const program = new SpawnedProgram(this, id, options.stdio, () => this.forget(id));
    // As a program Node started would, one the spawner runs keeps this process alive until it ends.
    if (this.programs.size === 0) this.process.channel?.ref();
    this.programs.set(id, program);
    const { stdio, ...rest } = options;
    this.send({ id, file, args, options: rest, stdio, piped: stdio.filter((s) => s === 'pipe').length });
    return program;
  }

  private forget(id: number): void {
    if (this.programs.delete(id) && this.programs.size === 0) this.process.channel?.unref();
  }

  /** A socket to the spawner, announced as entry `fd` of program `id`. */
  connect(id: number, fd: number): net.Socket {
    const sock = net.connect(this.sockPath);
    sock.write(`${id}:${fd}`.padEnd(HEADER_BYTES));
    return sock;
  }

  send(message: object): void {
    // A send to a spawner that just died fails through the callback, never as a throw.
    if (this.alive) this.process.send(message, (err: Error | null) => err && this.died());
  }

  /**
   * Whatever it started is left without a parent that reports it: killed, and reported so. Later
   * programs are started by Node (startProgram).
   */
  private died(): void {
    if (!this.alive) return;
    this.alive = false;
    for (const program of this.programs.values()) program.orphaned();
    this.programs.clear();
  }
}

type Reply = { id: number } & (
  { pid: number } | { exit: [number | null, NodeJS.Signals | null] } | { error: { message: string; code?: string } }
);

class SpawnedProgram extends EventEmitter implements Program {
  pid: number | undefined;
  readonly stdio: (Readable | Writable | null)[];
  private exit?: [number | null, NodeJS.Signals | null];
  private open: number;

  constructor(
    private readonly spawner: Spawner,
    private readonly id: number,
    stdio: ProgramOptions['stdio'],
    private readonly done: () => void,
  ) {
    super();
    const socks = stdio.map((s, fd) => (s === 'pipe' ? spawner.connect(id, fd) : null));
    // As Node's: 'close' once it exited and every entry it may write to (all but stdin) closed.
    this.open = socks.filter((s, fd) => s && fd > 0).length;
    socks.forEach((sock, fd) => {
      sock?.on('error', () => undefined);
      if (sock && fd > 0)
        sock.on('close', () => {
          this.open--;
          this.maybeClosed();
        });
    });
    // stdin is written only once the program runs: the spawner reads nothing past a header.
    const stdin = socks[0] && new PassThrough();
    if (stdin) this.once('spawn', () => stdin.pipe(socks[0]!));
    this.stdio = socks.map((s, fd) => (fd === 0 ? stdin : s));
  }

  hear(m: Reply): void {
    if ('pid' in m) {
      this.pid = m.pid;
      this.emit('spawn');
    } else if ('exit' in m) {
      this.exit = m.exit;
      this.emit('exit', ...m.exit);
      // As Node does: stdin goes, and what nobody reads is drained, so that 'close' comes.
      this.stdio[0]?.destroy();
      for (const s of this.stdio.slice(1)) if (s && 'resume' in s) s.resume();
      this.maybeClosed();
    } else {
      const err = Object.assign(new Error(m.error.message), m.error);
      this.done();
      for (const s of this.stdio) s?.destroy();
      this.emit('error', err);
    }
  }

  kill(signal: NodeJS.Signals = 'SIGTERM'): boolean {
    if (this.exit) return false;
    this.spawner.send({ id: this.id, kill: signal });
    return true;
  }

  orphaned(): void {
    if (this.pid !== undefined && !this.exit) {
      try {
        process.kill(this.pid, 'SIGKILL');
      } catch {
        // Gone already.
      }
      this.hear({ id: this.id, exit: [null, 'SIGKILL'] });
    } else if (!this.exit) this.hear({ id: this.id, error: { message: 'the spawner exited' } });
  }

  private maybeClosed(): void {
    if (!this.exit || this.open > 0) return;
    this.done();
    this.emit('close', ...this.exit);
  }
}
