/**
 * One E2B sandbox, reached through the SDK by its id. Every use reconnects, which resumes a
 * paused sandbox and renews its timeout; commands run through the wrapper of command.ts, so our
 * deadline and abort reach the command's whole process tree.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { CommandExitError } from 'e2b';
import type { Isolation } from '../../contracts/reports';
import { OutputTail } from '../output';
import { shellQuote } from '../shell';
import type { ExecOptions, ExecResult, Sandbox } from '../types';
import type { E2BApi, E2BHandle } from './api';
import { WRAPPER, commandEnv } from './command';
import { call, failure } from './errors';

const HOME = '/home/user';
export const WORKSPACE = `${HOME}/workspace`;
export const SCRATCH = `${HOME}/scratch`;
const COMMAND_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
/** Kept alive this long past a command's deadline, so killing it and collecting its work never races the sandbox's end. */
const BUSY_MARGIN_MS = 5 * 60_000;
/** How long a killed command may take to report its end before we stop waiting for it. */
const KILL_GRACE_MS = 2_000;

/** What `p` settles to within `ms`, or undefined when it rejects or takes longer. */
function within<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(undefined), ms);
    const done = (value: T | undefined) => {
      clearTimeout(timer);
      resolve(value);
    };
    p.then(done, () => done(undefined));
  });
}

export class E2BSandbox implements Sandbox {
  // Until spec's Isolation names 'e2b': a microVM per sandbox is neither bubblewrap nor none.
  readonly isolation: Isolation = 'e2b';
  readonly workspace = WORKSPACE;
  readonly scratch = SCRATCH;

  constructor(
    readonly id: string,
    private readonly api: E2BApi,
    private readonly idleTimeoutMs: number,
  ) {}

  /**
   * Every use resumes the sandbox if it is paused and keeps it alive for at least `busyMs` more.
   * Connect rather than setTimeout, because setTimeout also shortens: a file read during a long
   * agent invocation would otherwise cut the sandbox's life under the agent.
   */
  private use(busyMs = 0): Promise<E2BHandle> {
    return call(`connecting to E2B sandbox ${this.id}`, () =>
      this.api.connect(this.id, { timeoutMs: Math.max(this.idleTimeoutMs, busyMs) }),
    );
  }

  async exec(command: string, options: ExecOptions): Promise<ExecResult> {
    const { signal, timeoutMs } = options;
    if (signal?.aborted) return { exitCode: -1, output: '', timedOut: false, aborted: true };
    const envs = commandEnv(command, { PATH: COMMAND_PATH, HOME, LANG: 'C.UTF-8', TMPDIR: '/tmp', ...options.env });
    const output = new OutputTail(options.onOutput);
    let stopped: 'deadline' | 'abort' | undefined;
    let wake!: () => void;
    const stop = new Promise<undefined>((resolve) => (wake = () => resolve(undefined)));
    const timer = setTimeout(() => {
      stopped ??= 'deadline';
      wake();
    }, timeoutMs);
    const onAbort = () => {
      stopped ??= 'abort';
      wake();
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    const result = (exitCode: number): ExecResult => ({
      exitCode,
      output: output.value,
      timedOut: stopped === 'deadline',
      aborted: stopped === 'abort',
    });
    try {
      const sandbox = await this.use(timeoutMs + BUSY_MARGIN_MS);
      if (stopped) return result(-1);
      const handle = await call(`starting a command in E2B sandbox ${this.id}`, () =>
        sandbox.commands.run(WRAPPER, {
          background: true,
          cwd: options.cwd ?? this.workspace,
          envs,
          // Our deadline, not the SDK's: its timeout would kill only the wrapper and orphan the tree.
          timeoutMs: 0,
          onStdout: output.push,
          onStderr: output.push,
        }),
      );
      const exited = handle.wait().then(
        (r) => r.exitCode,
        (err: unknown) => {
          if (err instanceof CommandExitError) return err.exitCode;
          throw failure(`running a command in E2B sandbox ${this.id}`, err);
        },
      );
      const code = await Promise.race([exited, stop]);
      if (code !== undefined) return result(code);
      await this.stopWrapper(sandbox, handle.pid);
      let killed = await within(exited, KILL_GRACE_MS);
      if (killed === undefined) {
        await handle.kill().catch(() => false);
        killed = await within(exited, KILL_GRACE_MS);
      }
      return result(killed ?? -1);
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /** The wrapper's TERM trap kills the command's whole tree; the caller falls back to SIGKILL. */
  private async stopWrapper(sandbox: E2BHandle, pid: number): Promise<void> {
    try {
      const kill = await sandbox.commands.run(`kill -TERM ${pid}`, { background: true, timeoutMs: KILL_GRACE_MS });
      await kill.wait();
    } catch {
      // Exited already, or the sandbox is unreachable: the fallback handles both.
    }
  }

  /**
   * The normalized path when it lies in the workspace or scratch directory. Unlike the local
   * provider there is no need to refuse symlinks: envd resolves them inside the VM, and nothing
   * there is out of the command's own reach.
   */
  private inside(p: string): string {
    const normalized = path.posix.normalize(p);
    if ([this.workspace, this.scratch].some((d) => normalized === d || normalized.startsWith(`${d}/`)))
      return normalized;
    throw new Error(`path ${p} is outside the sandbox's workspace and scratch directories`);
  }

  async writeFile(
    p: string,
    data: Uint8Array | string,
    options: { readOnly?: boolean; executable?: boolean } = {},
  ): Promise<void> {
    const file = this.inside(p);
    const bytes = typeof data === 'string' ? new TextEncoder().encode(data) : data;
    const sandbox = await this.use();
    // A copy, so the SDK gets exactly these bytes even when `data` is a view into a larger buffer.
    await call(`writing ${file} in E2B sandbox ${this.id}`, () => sandbox.files.write(file, bytes.slice().buffer));
    // As good as E2B allows: the file is owned by the sandbox's user, which could chmod it back.
    if (options.readOnly || options.executable) {
      const mode = (options.readOnly ? 0o444 : 0o644) | (options.executable ? 0o111 : 0);
      const r = await this.exec(`chmod ${mode.toString(8)} ${shellQuote(file)}`, { timeoutMs: 30_000 });
      if (r.exitCode !== 0)
        throw new Error(`making ${file} read-only in E2B sandbox ${this.id} failed: ${r.output.trim()}`);
    }
  }

  async readFile(p: string): Promise<Uint8Array> {
    const file = this.inside(p);
    const sandbox = await this.use();
    return call(`reading ${file} in E2B sandbox ${this.id}`, () => sandbox.files.read(file, { format: 'bytes' }));
  }

  async copyIn(hostPath: string, p: string): Promise<void> {
    const file = this.inside(p);
    const sandbox = await this.use();
    await call(`uploading ${file} to E2B sandbox ${this.id}`, () =>
      sandbox.files.write(file, Readable.toWeb(createReadStream(hostPath)) as ReadableStream<Uint8Array>),
    );
  }

  async copyOut(p: string, hostPath: string): Promise<void> {
    const file = this.inside(p);
    const sandbox = await this.use();
    // The file's type is checked inside the VM: a FIFO would make envd wait for a writer.
    const r = await this.exec(`[ -f ${shellQuote(file)} ]`, { timeoutMs: 30_000 });
    if (r.exitCode !== 0) throw new Error(`path ${file} in E2B sandbox ${this.id} is not a regular file`);
    await call(`downloading ${file} from E2B sandbox ${this.id}`, async () => {
      const stream = await sandbox.files.read(file, { format: 'stream' });
      await pipeline(
        Readable.fromWeb(stream as import('node:stream/web').ReadableStream<Uint8Array>),
        createWriteStream(hostPath, { mode: 0o600 }),
      );
    });
  }
}
