/**
 * E2B sandboxes: one cloud microVM per key, found again through its metadata, so a retried
 * provisioning reconnects instead of creating another. Only what exec is given enters a
 * sandbox: nothing from the worker's environment (FLOTILLA_GIT_TOKEN, E2B_API_KEY, ...) is sent,
 * neither as sandbox-wide variables at creation nor with commands.
 *
 * The template must provide, for the default user `user` (home /home/user): bash; git; the
 * agent CLIs the runs use, on the PATH below; coreutils 8.31 or later (`env --default-signal`)
 * and util-linux `setsid`, which exec's wrapper needs; and a login profile that prints nothing,
 * because the SDK starts every command as `bash -l -c` and what a profile prints lands in the
 * command's output.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ApplicationFailure } from '@temporalio/common';
import {
  ALL_TRAFFIC,
  AuthenticationError,
  CommandExitError,
  type CommandResult,
  type CommandStartOpts,
  InvalidArgumentError,
  NotEnoughSpaceError,
  NotFoundError,
  RateLimitError,
  Sandbox as SdkSandbox,
  type SandboxConnectOpts,
  SandboxError,
  type SandboxInfo,
  SandboxNotFoundError,
  type SandboxOpts,
  ServiceBusyError,
  TemplateError,
  TimeoutError,
} from 'e2b';
import { MODEL_APIS } from '../../agents';
import type { Isolation } from '../../contracts/reports';
import { cloudAllowList, modelApiRules, sandboxRules } from '../egress/rules';
import type { ExecOptions, ExecResult, Sandbox, SandboxOptions, SandboxProvider } from '../types';

/** The part of the `e2b` SDK this provider uses: `e2bSdk()` is the real one, tests pass a double. */
export interface E2BApi {
  create(template: string, opts: E2BCreateOpts): Promise<E2BHandle>;
  /** Resumes a paused sandbox; a running one's timeout is only ever extended, never shortened. */
  connect(sandboxId: string, opts: Required<Pick<SandboxConnectOpts, 'timeoutMs'>>): Promise<E2BHandle>;
  /** Running and paused sandboxes whose metadata has all of the given pairs. */
  list(opts: { query: { metadata: Record<string, string> } }): E2BPaginator;
  /** False when there was no such sandbox. */
  kill(sandboxId: string): Promise<boolean>;
  /** False when it was paused already. */
  pause(sandboxId: string): Promise<boolean>;
}

export type E2BCreateOpts = Required<Pick<SandboxOpts, 'metadata' | 'timeoutMs' | 'allowInternetAccess'>> &
  Pick<SandboxOpts, 'network'>;

/**
 * The same allowlist as a local sandbox's, as E2B's firewall takes it: all traffic denied but
 * the registries, the request's and operator's hosts, and every agent kind's model API (E2B
 * fixes the rules at creation, not per command).
 */
function e2bNetwork(options: SandboxOptions): NonNullable<SandboxOpts['network']> {
  const models = MODEL_APIS.map((api) => modelApiRules(api));
  const rules = sandboxRules(options.allowHosts, {
    hosts: models.flatMap((m) => m.hosts),
    trusted: models.flatMap((m) => m.trusted),
  });
  return { allowOut: cloudAllowList(rules), denyOut: [ALL_TRAFFIC] };
}

export interface E2BPaginator {
  readonly hasNext: boolean;
  nextItems(): Promise<E2BSandboxInfo[]>;
}

export type E2BSandboxInfo = Pick<SandboxInfo, 'sandboxId' | 'metadata' | 'startedAt' | 'state'>;

/**
 * Commands always start in the background, so they can be killed while running. `timeoutMs` is
 * required because leaving it out means the SDK's own 60 s limit, which kills long agent runs.
 */
export type E2BRunOpts = Pick<CommandStartOpts, 'cwd' | 'envs' | 'onStdout' | 'onStderr'> &
  Required<Pick<CommandStartOpts, 'timeoutMs'>> & { background: true };

export interface E2BCommand {
  /** The pid of the `bash -l -c` the SDK started. */
  readonly pid: number;
  /** Rejects with CommandExitError when the exit code is not 0. */
  wait(): Promise<CommandResult>;
  /** SIGKILL to that one process, not to its children. */
  kill(): Promise<boolean>;
}

export interface E2BHandle {
  readonly sandboxId: string;
  readonly commands: { run(cmd: string, opts: E2BRunOpts): Promise<E2BCommand> };
  readonly files: {
    read(path: string, opts: { format: 'bytes' }): Promise<Uint8Array>;
    read(path: string, opts: { format: 'stream' }): Promise<ReadableStream<Uint8Array>>;
    /** Creates missing parent directories and replaces an existing file; a stream is uploaded as it is read. */
    write(path: string, data: ArrayBuffer | ReadableStream<Uint8Array>): Promise<unknown>;
    /** False when the directory existed already. */
    makeDir(path: string): Promise<boolean>;
  };
}

/** The real SDK; it reads E2B_API_KEY (and E2B_DOMAIN) from the worker's environment. */
export function e2bSdk(): E2BApi {
  return {
    create: (template, opts) => SdkSandbox.create(template, opts),
    connect: (sandboxId, opts) => SdkSandbox.connect(sandboxId, opts),
    list: (opts) => SdkSandbox.list(opts),
    kill: (sandboxId) => SdkSandbox.kill(sandboxId),
    pause: (sandboxId) => SdkSandbox.pause(sandboxId),
  };
}

export interface E2BProviderOptions {
  api?: E2BApi;
  /** Template name or id; see the module comment for what it must contain. */
  template?: string;
  /** How long a sandbox outlives its last use; a command's own deadline is added on top while it runs. */
  idleTimeoutMs?: number;
}

const HOME = '/home/user';
const WORKSPACE = `${HOME}/workspace`;
const SCRATCH = `${HOME}/scratch`;
const COMMAND_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
/** Kept alive this long past a command's deadline, so killing it and collecting its work never races the sandbox's end. */
const BUSY_MARGIN_MS = 5 * 60_000;
/** How long a killed command may take to report its end before we stop waiting for it. */
const KILL_GRACE_MS = 2_000;
/** Output kept in ExecResult.output; more is only streamed through onOutput. */
const OUTPUT_CAP = 1024 * 1024;

const ENV_PREFIX = '__FLOTILLA_ENV_';
const CMD_VAR = '__FLOTILLA_CMD';
/**
 * What exec actually runs, as `bash -l -c WRAPPER`. That login shell has envd's environment
 * (its PATH, USER, E2B_* variables, whatever the profile sets), so the command's environment is
 * rebuilt from nothing out of the variables sent under a prefix no profile touches. The command
 * travels as a variable too: envd logs the command line of every process it starts. It runs in a
 * session of its own because envd's kill reaches only the process it started: TERM to
 * this wrapper kills the command's whole tree, and so does the command's own exit. Bash makes
 * `&` jobs ignore SIGINT and SIGQUIT; `env --default-signal` gives the command default handlers.
 */
const WRAPPER = `c= stop=
e=()
for n in \${!${ENV_PREFIX}@}; do e+=("\${n#${ENV_PREFIX}}=\${!n}"); done
trap 'stop=1; [ -z "$c" ] || kill -KILL -- -"$c" "$c" 2>/dev/null' TERM
setsid env -i --default-signal "\${e[@]}" /bin/bash -c "$${CMD_VAR}" &
c=$!
[ -z "$stop" ] || kill -KILL -- -"$c" "$c" 2>/dev/null
wait "$c"; s=$?
kill -KILL -- -"$c" 2>/dev/null
exit "$s"`;

/**
 * Whether retrying can help. Fatal: credentials, templates, arguments, a sandbox or file that
 * is not there, a full disk, and any other 4xx. Everything else (rate limits, a busy service,
 * timeouts, 5xx, 409 conflicts such as a sandbox still pausing, network failures) is worth a retry.
 */
export function classifyE2BError(err: unknown): 'retryable' | 'fatal' {
  if (err instanceof RateLimitError || err instanceof ServiceBusyError || err instanceof TimeoutError)
    return 'retryable';
  if (
    err instanceof AuthenticationError ||
    err instanceof TemplateError ||
    err instanceof InvalidArgumentError ||
    err instanceof NotFoundError ||
    err instanceof NotEnoughSpaceError
  ) {
    return 'fatal';
  }
  if (err instanceof SandboxError && err.statusCode !== undefined) {
    return err.statusCode >= 400 && err.statusCode < 500 && err.statusCode !== 408 && err.statusCode !== 409
      ? 'fatal'
      : 'retryable';
  }
  return 'retryable';
}

/** A Temporal-ready error: non-retryable when retrying cannot help, a plain Error otherwise. */
function failure(what: string, err: unknown): Error {
  const message = `${what}: ${err instanceof Error ? err.message : String(err)}`;
  if (classifyE2BError(err) === 'retryable') return new Error(message, { cause: err });
  return ApplicationFailure.nonRetryable(message, err instanceof Error && err.name !== 'Error' ? err.name : 'E2BError');
}

async function call<T>(what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw failure(what, err);
  }
}

/** Keys are `<run>/worker/<id>` or `<run>/integration`; the parts let an operator list a run's sandboxes. */
function metadataFor(key: string): Record<string, string> {
  const parts = /^(.+)\/(?:worker\/([^/]+)|integration)$/.exec(key);
  if (!parts) return { flotillaKey: key };
  return { flotillaKey: key, flotillaRun: parts[1], ...(parts[2] !== undefined && { flotillaWorker: parts[2] }) };
}

function commandEnv(command: string, env: Record<string, string>): Record<string, string> {
  const envs: Record<string, string> = { [CMD_VAR]: command };
  for (const [name, value] of Object.entries(env)) {
    // The wrapper finds the variables through bash, which only sees names that are identifiers.
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) {
      throw ApplicationFailure.nonRetryable(
        `environment variable ${JSON.stringify(name)} cannot be passed into an E2B sandbox`,
        'InvalidEnvName',
      );
    }
    envs[ENV_PREFIX + name] = value;
  }
  return envs;
}

/** The output kept for ExecResult: its last OUTPUT_CAP characters; onOutput sees all of it. */
class OutputTail {
  private text = '';

  constructor(private readonly onOutput?: (chunk: string) => void) {}

  readonly push = (chunk: string): void => {
    this.text += chunk;
    if (this.text.length > OUTPUT_CAP * 2) this.text = this.text.slice(-OUTPUT_CAP);
    this.onOutput?.(chunk);
  };

  get value(): string {
    return this.text.length > OUTPUT_CAP ? this.text.slice(-OUTPUT_CAP) : this.text;
  }
}

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

class E2BSandbox implements Sandbox {
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
   * agent run would otherwise cut the sandbox's life under the agent.
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
      const r = await this.exec(`chmod ${mode.toString(8)} '${file.replace(/'/g, `'\\''`)}'`, { timeoutMs: 30_000 });
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
    const r = await this.exec(`[ -f '${file.replace(/'/g, `'\\''`)}' ]`, { timeoutMs: 30_000 });
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

export class E2BSandboxProvider implements SandboxProvider {
  readonly name = 'e2b';
  private readonly api: E2BApi;
  private readonly template: string;
  private readonly idleTimeoutMs: number;

  constructor(options: E2BProviderOptions = {}) {
    this.api = options.api ?? e2bSdk();
    this.template = options.template ?? 'base';
    this.idleTimeoutMs = options.idleTimeoutMs ?? 60 * 60_000;
  }

  /**
   * The sandboxes under `key`, oldest first. Two provisions racing (a retry while the first
   * attempt still runs) can both create one; everyone then uses the oldest, and destroy kills all.
   */
  private lookup(key: string): Promise<E2BSandboxInfo[]> {
    return call(`looking up the E2B sandbox for ${key}`, async () => {
      const pages = this.api.list({ query: { metadata: { flotillaKey: key } } });
      const found: E2BSandboxInfo[] = [];
      while (pages.hasNext) found.push(...(await pages.nextItems()));
      // The server filters too, but destroy must never reach a sandbox that is not this key's.
      return found
        .filter((s) => s.metadata.flotillaKey === key)
        .sort((a, b) => a.startedAt.getTime() - b.startedAt.getTime() || a.sandboxId.localeCompare(b.sandboxId));
    });
  }

  private open(sandboxId: string): Sandbox {
    return new E2BSandbox(sandboxId, this.api, this.idleTimeoutMs);
  }

  private async existing(key: string): Promise<E2BSandboxInfo> {
    const [found] = await this.lookup(key);
    if (!found)
      throw ApplicationFailure.nonRetryable(`sandbox ${key} does not exist (was it destroyed?)`, 'SandboxMissing');
    return found;
  }

  /** The sandbox, resumed and with its timeout renewed; undefined when it vanished since it was listed. */
  private async reconnect(sandboxId: string): Promise<E2BHandle | undefined> {
    try {
      return await this.api.connect(sandboxId, { timeoutMs: this.idleTimeoutMs });
    } catch (err) {
      if (err instanceof SandboxNotFoundError) return undefined;
      throw failure(`connecting to E2B sandbox ${sandboxId}`, err);
    }
  }

  /** A microVM per sandbox, whatever this host has. */
  checkIsolation(): Isolation {
    return 'e2b';
  }

  async provision(key: string, options: SandboxOptions): Promise<Sandbox> {
    const [found] = await this.lookup(key);
    const sandbox =
      (found && (await this.reconnect(found.sandboxId))) ??
      (await call(`creating an E2B sandbox from template ${this.template}`, () =>
        this.api.create(this.template, {
          metadata: metadataFor(key),
          timeoutMs: this.idleTimeoutMs,
          allowInternetAccess: options.network,
          ...(options.network && { network: e2bNetwork(options) }),
        }),
      ));
    // Also for a sandbox that existed: the attempt that created it may have died before this.
    for (const dir of [WORKSPACE, SCRATCH]) {
      await call(`creating ${dir} in E2B sandbox ${sandbox.sandboxId}`, () => sandbox.files.makeDir(dir));
    }
    return this.open(sandbox.sandboxId);
  }

  /** Does not resume a paused sandbox: its first use does. */
  async find(key: string): Promise<Sandbox | undefined> {
    const [found] = await this.lookup(key);
    return found && this.open(found.sandboxId);
  }

  async destroy(key: string): Promise<void> {
    for (const { sandboxId } of await this.lookup(key)) {
      await call(`killing E2B sandbox ${sandboxId}`, () => this.api.kill(sandboxId));
    }
  }

  /** Freezes the sandbox (memory and files) and stops its clock, e.g. while a run is suspended. */
  async pause(key: string): Promise<void> {
    const { sandboxId } = await this.existing(key);
    await call(`pausing E2B sandbox ${sandboxId}`, () => this.api.pause(sandboxId));
  }

  /** Resumes a paused sandbox ahead of its use; using it would resume it too. */
  async resume(key: string): Promise<void> {
    const { sandboxId } = await this.existing(key);
    await call(`resuming E2B sandbox ${sandboxId}`, () =>
      this.api.connect(sandboxId, { timeoutMs: this.idleTimeoutMs }),
    );
  }
}
