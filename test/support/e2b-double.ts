/**
 * An in-process stand-in for the slice of the `e2b` SDK that E2BSandboxProvider uses (E2BApi),
 * faithful to the SDK and to envd (E2B's in-sandbox daemon) wherever the provider depends on them:
 *
 * - Each sandbox has its own filesystem: a mount namespace, held open by a small init process,
 *   where a host temp directory is mounted on /home (the user's home is /home/user) and another on
 *   /tmp. Everything else is the host's. Killing a sandbox kills every process in its namespace.
 * - commands.run starts `/bin/bash -l -c cmd` in that namespace as a real process, with envd's
 *   environment (PATH, HOME, USER, LOGNAME, E2B_* plus the given envs; nothing else from the
 *   host). Like envd it does not get a process group of its own, kill() sends SIGKILL to that one
 *   process only, a signal death reports exit code -1, and the command ends when that process
 *   exits, whoever still holds its output pipes. A non-zero `timeoutMs` kills the process when it
 *   passes and wait() rejects with TimeoutError; 0 disables it. Output reaches onStdout/onStderr
 *   decoded per stream as the SDK does, and wait() rejects with CommandExitError for a non-zero exit.
 * - Sandboxes carry metadata, list() filters on it and pages; connect() resumes a paused sandbox
 *   and only extends a running one's timeout; a sandbox whose timeout passes is killed; a paused
 *   one refuses commands and file access until resumed. Errors are the SDK's own classes.
 *
 * Needs util-linux `unshare` and `nsenter`, and mount namespaces (root, or unprivileged user
 * namespaces). File paths must be absolute.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { type FileHandle, mkdir, mkdtemp, open, readdir, readlink, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import {
  CommandExitError,
  type CommandResult,
  FileNotFoundError,
  InvalidArgumentError,
  SandboxError,
  SandboxNotFoundError,
  TimeoutError,
} from 'e2b';
import type {
  E2BApi,
  E2BCommand,
  E2BCreateOpts,
  E2BHandle,
  E2BPaginator,
  E2BRunOpts,
  E2BSandboxInfo,
} from '../../src/sandbox/e2b/api';
import { releaseAtEnd } from './cleanup';

const HOME = '/home/user';
const ROOTLESS = process.getuid?.() !== 0;
/** How long a command's output pipes may stay open after it exited before they are closed under whoever holds them. */
const PIPE_GRACE_MS = 100;

interface DoubleSandbox {
  id: string;
  template: string;
  metadata: Record<string, string>;
  startedAt: Date;
  state: 'running' | 'paused' | 'killed';
  /** Host directory holding the sandbox's /home and /tmp. */
  root: string;
  init: ChildProcess;
  /** The `mnt:[inode]` link that identifies the sandbox's processes. */
  mountNs: string;
  /**
   * Holds the namespace open until the sandbox is destroyed: a namespace's inode number is reused
   * as soon as it is freed, and the next sandbox's processes would then match `mountNs`.
   */
  nsPin: FileHandle;
  endAt: number;
  expiry?: NodeJS.Timeout;
}

export interface DoubleCall {
  method:
    'create' | 'connect' | 'list' | 'kill' | 'pause' | 'commands.run' | 'files.read' | 'files.write' | 'files.makeDir';
  sandboxId?: string;
  /** The call's arguments; callbacks are left out. */
  args: unknown[];
}

export interface E2BDoubleOptions {
  /** Page size of list(); the API's is 100, a small one makes callers prove they page. */
  pageSize?: number;
  /** Templates create() accepts; another name fails as the API does, with a 400. */
  templates?: string[];
}

function nsenterArgs(sb: DoubleSandbox): string[] {
  return ['--target', String(sb.init.pid), '--mount', ...(ROOTLESS ? ['--user', '--preserve-credentials'] : []), '--'];
}

/** SIGKILLs every process in a mount namespace, until none is left (they may fork meanwhile). */
async function killNamespace(ns: string): Promise<void> {
  for (let round = 0; round < 10; round++) {
    let found = 0;
    for (const entry of await readdir('/proc')) {
      if (!/^\d+$/.test(entry) || (await readlink(`/proc/${entry}/ns/mnt`).catch(() => undefined)) !== ns) continue;
      found++;
      try {
        process.kill(Number(entry), 'SIGKILL');
      } catch {
        // Already gone.
      }
    }
    if (found === 0) return;
    await new Promise((r) => setTimeout(r, 20));
  }
}

class DoubleCommand implements E2BCommand {
  readonly pid: number;
  private exited = false;
  private readonly result: Promise<CommandResult>;

  constructor(child: ChildProcess, opts: E2BRunOpts) {
    this.pid = child.pid!;
    this.result = new Promise((resolve, reject) => {
      const out = { stdout: '', stderr: '' };
      const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
      const callbacks = { stdout: opts.onStdout, stderr: opts.onStderr };
      const emit = (stream: 'stdout' | 'stderr', text: string) => {
        if (!text) return;
        out[stream] += text;
        void callbacks[stream]?.(text);
      };
      child.stdout!.on('data', (b: Buffer) => emit('stdout', decoders.stdout.decode(b, { stream: true })));
      child.stderr!.on('data', (b: Buffer) => emit('stderr', decoders.stderr.decode(b, { stream: true })));
      let deadlineHit = false;
      const deadline =
        opts.timeoutMs > 0
          ? setTimeout(() => {
              deadlineHit = true;
              // envd runs the command under the request's context: cancelling it kills that one process.
              child.kill('SIGKILL');
            }, opts.timeoutMs)
          : undefined;
      let pipeGrace: NodeJS.Timeout | undefined;
      let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
      child.on('exit', (code, signal) => {
        this.exited = true;
        exit = { code, signal };
        pipeGrace = setTimeout(() => {
          child.stdout!.destroy();
          child.stderr!.destroy();
        }, PIPE_GRACE_MS);
      });
      child.on('close', () => {
        clearTimeout(deadline);
        clearTimeout(pipeGrace);
        emit('stdout', decoders.stdout.decode());
        emit('stderr', decoders.stderr.decode());
        if (deadlineHit) {
          reject(new TimeoutError('[deadline_exceeded] the command ran longer than its timeoutMs'));
          return;
        }
        const code = exit?.code ?? -1;
        const result: CommandResult = {
          exitCode: code,
          error: code === 0 ? undefined : exit?.signal ? `signal: ${exit.signal}` : `exit status ${code}`,
          ...out,
        };
        if (code === 0) resolve(result);
        else reject(new CommandExitError(result));
      });
    });
    this.result.catch(() => undefined); // wait() is optional.
  }

  wait(): Promise<CommandResult> {
    return this.result;
  }

  async kill(): Promise<boolean> {
    if (this.exited) return false;
    process.kill(this.pid, 'SIGKILL');
    return true;
  }
}

export class E2BDouble implements E2BApi {
  readonly calls: DoubleCall[] = [];
  private readonly sandboxes = new Map<string, DoubleSandbox>();
  private readonly failures = new Map<DoubleCall['method'], Error>();
  private counter = 0;
  private lastStart = 0;

  private constructor(
    private readonly root: string,
    private readonly options: E2BDoubleOptions,
  ) {}

  /** A double with no sandboxes; it kills what it holds when the test (or file) ends. */
  static async start(options: E2BDoubleOptions = {}): Promise<E2BDouble> {
    const double = new E2BDouble(await mkdtemp(path.join(os.tmpdir(), 'flotilla-e2b-double-')), options);
    releaseAtEnd(() => double.dispose());
    return double;
  }

  /** The next call of `method` throws `err` instead of doing anything. */
  failNext(method: DoubleCall['method'], err: Error): void {
    this.failures.set(method, err);
  }

  /** Sandboxes that are not killed, as the API would list them. */
  live(): (E2BSandboxInfo & { template: string; endAt: number })[] {
    return [...this.sandboxes.values()]
      .filter((sb) => sb.state !== 'killed')
      .map(({ id, metadata, startedAt, state, template, endAt }) => ({
        sandboxId: id,
        metadata,
        startedAt,
        state: state as 'running' | 'paused',
        template,
        endAt,
      }));
  }

  private async dispose(): Promise<void> {
    for (const sb of this.sandboxes.values()) await this.destroy(sb);
    await rm(this.root, { recursive: true, force: true });
  }

  private record(call: DoubleCall): void {
    this.calls.push(call);
    // list() only builds the paginator; its request, and so its failure, happens in nextItems().
    if (call.method !== 'list') this.failIfAsked(call.method);
  }

  private failIfAsked(method: DoubleCall['method']): void {
    const err = this.failures.get(method);
    if (err) {
      this.failures.delete(method);
      throw err;
    }
  }

  private arm(sb: DoubleSandbox, timeoutMs: number): void {
    clearTimeout(sb.expiry);
    sb.endAt = Date.now() + timeoutMs;
    sb.expiry = setTimeout(() => void this.destroy(sb), timeoutMs);
    sb.expiry.unref();
  }

  private async destroy(sb: DoubleSandbox): Promise<void> {
    if (sb.state === 'killed') return;
    sb.state = 'killed';
    clearTimeout(sb.expiry);
    await killNamespace(sb.mountNs);
    await sb.nsPin.close();
    await rm(sb.root, { recursive: true, force: true });
  }

  async create(template: string, opts: E2BCreateOpts): Promise<E2BHandle> {
    this.record({ method: 'create', args: [template, opts] });
    if (!(this.options.templates ?? ['base']).includes(template)) {
      const err = new SandboxError(`400: template '${template}' not found`);
      err.statusCode = 400;
      throw err;
    }
    const id = `double${++this.counter}-${Math.random().toString(36).slice(2, 10)}`;
    const root = path.join(this.root, id);
    await mkdir(path.join(root, 'home', 'user'), { recursive: true });
    await mkdir(path.join(root, 'tmp'), { recursive: true, mode: 0o1777 });
    // The init process holds the namespace; it exits when its stdin closes, so it dies with the test process.
    const init = spawn(
      'unshare',
      [
        '--mount',
        '--propagation',
        'private',
        ...(ROOTLESS ? ['--map-root-user'] : []),
        '--',
        '/bin/sh',
        '-c',
        'mount --bind "$1/home" /home && mount --bind "$1/tmp" /tmp && echo ready && exec cat >/dev/null',
        'sh',
        root,
      ],
      { env: { PATH: process.env.PATH ?? '/usr/bin:/bin' }, stdio: ['pipe', 'pipe', 'pipe'] },
    );
    const ready = await new Promise<boolean>((resolve) => {
      init.stdout!.once('data', () => resolve(true));
      init.once('exit', () => resolve(false));
      init.once('error', () => resolve(false));
    });
    const nsPin = ready ? await open(`/proc/${init.pid}/ns/mnt`, 'r').catch(() => undefined) : undefined;
    const mountNs = nsPin && (await readlink(`/proc/${init.pid}/ns/mnt`));
    if (!nsPin || !mountNs)
      throw new Error('the E2B double needs mount namespaces (unshare --mount) to give each sandbox its own /home');
    this.lastStart = Math.max(Date.now(), this.lastStart + 1);
    const sb: DoubleSandbox = {
      id,
      template,
      metadata: { ...opts.metadata },
      startedAt: new Date(this.lastStart),
      state: 'running',
      root,
      init,
      mountNs,
      nsPin,
      endAt: 0,
    };
    this.sandboxes.set(id, sb);
    this.arm(sb, opts.timeoutMs);
    return this.handle(sb);
  }

  async connect(sandboxId: string, opts: { timeoutMs: number }): Promise<E2BHandle> {
    this.record({ method: 'connect', sandboxId, args: [sandboxId, opts] });
    const sb = this.sandboxes.get(sandboxId);
    if (!sb || sb.state === 'killed') throw new SandboxNotFoundError(`Paused sandbox ${sandboxId} not found`);
    if (sb.state === 'paused' || Date.now() + opts.timeoutMs > sb.endAt) this.arm(sb, opts.timeoutMs);
    sb.state = 'running';
    return this.handle(sb);
  }

  list(opts: { query: { metadata: Record<string, string> } }): E2BPaginator {
    this.record({ method: 'list', args: [opts] });
    const wanted = Object.entries(opts.query.metadata);
    // Newest first, as the API orders them.
    const matching = this.live()
      .filter((sb) => wanted.every(([k, v]) => sb.metadata[k] === v))
      .sort((a, b) => b.startedAt.getTime() - a.startedAt.getTime())
      .map(({ sandboxId, metadata, startedAt, state }) => ({ sandboxId, metadata, startedAt, state }));
    const pageSize = this.options.pageSize ?? 100;
    let offset = 0;
    return {
      get hasNext() {
        return offset === 0 || offset < matching.length;
      },
      nextItems: async () => {
        this.failIfAsked('list');
        const page = matching.slice(offset, offset + pageSize);
        offset += pageSize;
        return page;
      },
    };
  }

  async kill(sandboxId: string): Promise<boolean> {
    this.record({ method: 'kill', sandboxId, args: [sandboxId] });
    const sb = this.sandboxes.get(sandboxId);
    if (!sb || sb.state === 'killed') return false;
    await this.destroy(sb);
    return true;
  }

  async pause(sandboxId: string): Promise<boolean> {
    this.record({ method: 'pause', sandboxId, args: [sandboxId] });
    const sb = this.sandboxes.get(sandboxId);
    if (!sb || sb.state === 'killed') throw new SandboxNotFoundError(`Sandbox ${sandboxId} not found`);
    if (sb.state === 'paused') return false;
    sb.state = 'paused';
    // A paused sandbox has no clock running.
    clearTimeout(sb.expiry);
    return true;
  }

  /** Runs a helper shell script in the sandbox's namespace, for the files API. */
  private helper(
    sb: DoubleSandbox,
    script: string,
    args: string[],
    input?: Uint8Array,
  ): Promise<{ code: number; stdout: Buffer; stderr: string }> {
    return new Promise((resolve, reject) => {
      const child = spawn('nsenter', [...nsenterArgs(sb), '/bin/sh', '-c', `cd ${HOME} && ${script}`, 'sh', ...args], {
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      const stdout: Buffer[] = [];
      let stderr = '';
      child.stdout!.on('data', (b: Buffer) => stdout.push(b));
      child.stderr!.on('data', (b: Buffer) => (stderr += b.toString()));
      child.on('error', reject);
      child.on('close', (code) => resolve({ code: code ?? -1, stdout: Buffer.concat(stdout), stderr }));
      child.stdin!.end(input);
    });
  }

  private handle(sb: DoubleSandbox): E2BHandle {
    // What a client sees of a sandbox whose envd does not answer (paused or gone).
    const reachable = (forCommands: boolean) => {
      if (sb.state === 'running') return;
      throw forCommands
        ? new SandboxNotFoundError('Sandbox is probably not running anymore')
        : new TimeoutError('502: sandbox is not running: This error is likely due to sandbox timeout.');
    };
    const fileError = (p: string, r: { code: number; stderr: string }) =>
      r.code === 44
        ? new FileNotFoundError(`path '${p}' does not exist`)
        : r.code === 45
          ? new InvalidArgumentError(`path '${p}' is a directory`)
          : new SandboxError(`500: ${r.stderr.trim()}`);
    return {
      sandboxId: sb.id,
      commands: {
        run: async (cmd, opts) => {
          const { onStdout: _o, onStderr: _e, ...recorded } = opts;
          this.record({ method: 'commands.run', sandboxId: sb.id, args: [cmd, recorded] });
          reachable(true);
          const cwd = opts.cwd ?? HOME;
          const hostCwd = cwd.startsWith('/home/') || cwd.startsWith('/tmp/') ? path.join(sb.root, cwd) : cwd;
          if (!existsSync(hostCwd)) throw new InvalidArgumentError(`cwd '${cwd}' does not exist`);
          const child = spawn(
            'nsenter',
            [...nsenterArgs(sb), '/bin/sh', '-c', 'cd "$1" && exec /bin/bash -l -c "$2"', 'sh', cwd, cmd],
            {
              env: {
                PATH: process.env.PATH ?? '/usr/bin:/bin',
                HOME,
                USER: 'user',
                LOGNAME: 'user',
                E2B_SANDBOX: 'true',
                E2B_SANDBOX_ID: sb.id,
                E2B_TEMPLATE_ID: sb.template,
                ...opts.envs,
              },
              stdio: ['ignore', 'pipe', 'pipe'],
            },
          );
          await new Promise<void>((resolve, reject) => {
            child.once('spawn', resolve);
            child.once('error', reject);
          });
          return new DoubleCommand(child, opts);
        },
      },
      files: {
        // A stream is read whole here too: the double checks what arrives, not how it travels.
        read: (async (p: string, opts: { format: 'bytes' | 'stream' }) => {
          this.record({ method: 'files.read', sandboxId: sb.id, args: [p, opts.format] });
          reachable(false);
          const r = await this.helper(sb, '[ -e "$1" ] || exit 44; [ -d "$1" ] && exit 45; exec cat -- "$1"', [p]);
          if (r.code !== 0) throw fileError(p, r);
          return opts.format === 'stream' ? new Blob([r.stdout]).stream() : new Uint8Array(r.stdout);
        }) as E2BHandle['files']['read'],
        write: async (p, data) => {
          const bytes =
            data instanceof ArrayBuffer ? new Uint8Array(data) : new Uint8Array(await new Response(data).arrayBuffer());
          this.record({
            method: 'files.write',
            sandboxId: sb.id,
            args: [p, data instanceof ArrayBuffer ? data.byteLength : 'stream'],
          });
          reachable(false);
          const r = await this.helper(sb, 'mkdir -p -- "$(dirname -- "$1")" && exec cat > "$1"', [p], bytes);
          if (r.code !== 0) throw fileError(p, r);
          return { name: path.posix.basename(p), path: p };
        },
        makeDir: async (p) => {
          this.record({ method: 'files.makeDir', sandboxId: sb.id, args: [p] });
          reachable(false);
          const r = await this.helper(sb, '[ -d "$1" ] && exit 45; exec mkdir -p -- "$1"', [p]);
          if (r.code !== 0 && r.code !== 45) throw fileError(p, r);
          return r.code === 0;
        },
      },
    };
  }
}
