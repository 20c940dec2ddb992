/**
 * The part of the `e2b` SDK the E2B provider uses: `e2bSdk()` is the real one, tests pass a
 * double (test/support/e2b-double.ts).
 */
import {
  type CommandResult,
  type CommandStartOpts,
  Sandbox as SdkSandbox,
  type SandboxConnectOpts,
  type SandboxInfo,
  type SandboxOpts,
} from 'e2b';

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

export interface E2BPaginator {
  readonly hasNext: boolean;
  nextItems(): Promise<E2BSandboxInfo[]>;
}

export type E2BSandboxInfo = Pick<SandboxInfo, 'sandboxId' | 'metadata' | 'startedAt' | 'state'>;

/**
 * Commands always start in the background, so they can be killed while running. `timeoutMs` is
 * required because leaving it out means the SDK's own 60 s limit, which kills long agent invocations.
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
