/**
 * The one interface Flotilla uses to run anything an agent or a repository controls. Every
 * provider (local, E2B) passes the same contract suite, test/support/sandbox-contract.ts.
 */
import type { Isolation } from '../contracts/reports';
import type { SandboxLimitsRequest } from '../contracts/request';
import type { EgressRules } from './egress/rules';

export interface ExecOptions {
  /** Working directory inside the sandbox; defaults to the workspace. */
  cwd?: string;
  /** The complete environment of the command: nothing from the host leaks in implicitly. */
  env?: Record<string, string>;
  /** Our deadline: the whole process tree is killed when it passes. */
  timeoutMs: number;
  /** Aborting kills the whole process tree. */
  signal?: AbortSignal;
  /** Called with output chunks as they arrive (stdout and stderr interleaved). */
  onOutput?: (chunk: string) => void;
  /**
   * Mount the workspace read-only for this command, where the provider can (local with
   * bubblewrap); elsewhere it is a request the command is trusted to honour.
   */
  readOnlyWorkspace?: boolean;
  /** Hostnames this command may reach besides the sandbox's own (an agent's model API), when networked. */
  egress?: EgressRules;
}

export interface ExecResult {
  exitCode: number;
  /** Combined output; callers that expect a lot should use onOutput and keep a tail. */
  output: string;
  timedOut: boolean;
  /** Set when the command was stopped by the abort signal. */
  aborted: boolean;
}

export interface Sandbox {
  readonly id: string;
  readonly isolation: Isolation;
  /** The repository checkout, as seen from inside the sandbox. */
  readonly workspace: string;
  /** A private scratch directory outside the workspace (prompts, bundles), inside the sandbox. */
  readonly scratch: string;
  /**
   * Local sandboxes only: the workspace as a directory on the host, which the host may write
   * between commands (no process of a sandbox outlives its command). See git/host-tree.ts.
   */
  readonly host?: HostWorkspace;
  /** Runs `bash -c command`. Throws a permanent ResourceLimit failure when it hit a sandbox limit. */
  exec(command: string, options: ExecOptions): Promise<ExecResult>;
  /**
   * Writes a file the sandbox's user can use. With `readOnly`, the sandbox can read it but not
   * change its contents (local: owned by root, mode 0444). It can still remove it from the
   * directory, which stays the sandbox's.
   */
  writeFile(
    path: string,
    data: Uint8Array | string,
    options?: { readOnly?: boolean; executable?: boolean },
  ): Promise<void>;
  readFile(path: string): Promise<Uint8Array>;
  /** Copies the host file `hostPath` to `path` in the sandbox (as writeFile would), streamed: bundles can be large. */
  copyIn(hostPath: string, path: string): Promise<void>;
  /**
   * Copies the regular file at `path` in the sandbox to `hostPath` (created, or replaced), streamed.
   * A path that is not a regular file (a FIFO, a link the sandbox planted) is refused.
   */
  copyOut(path: string, hostPath: string): Promise<void>;
}

/** A sandbox's workspace as the host sees it. */
export interface HostWorkspace {
  /** The workspace directory on the host. */
  dir: string;
  /** A directory of the host's own, outside everything the sandbox can see. */
  state: string;
  /** The uid (and gid) the workspace's files must belong to; undefined when they stay the worker's. */
  uid?: number;
}

export interface SandboxOptions {
  /** Whether commands may reach the network: only through the allowlisting egress proxy (see egress/sandbox-net.ts). */
  network: boolean;
  /** Hostnames the request adds to the allowlist (sandbox.allowHosts); public addresses only. */
  allowHosts?: string[];
  /**
   * Resource limits asked for; the provider fills in its defaults and caps each at the worker's
   * maximum. A command that hits one fails with a permanent ResourceLimit failure saying which.
   */
  limits?: SandboxLimitsRequest;
}

export interface SandboxProvider {
  readonly name: string;
  /**
   * Returns the sandbox for `key`, creating it only if it does not exist yet, so a retried
   * provisioning finds the same sandbox and whatever work it already holds.
   */
  provision(key: string, options: SandboxOptions): Promise<Sandbox>;
  /** The sandbox provisioned under `key`, or undefined when there is none. */
  find(key: string, options: SandboxOptions): Promise<Sandbox | undefined>;
  /** Destroys the sandbox and everything in it; destroying a missing sandbox is not an error. */
  destroy(key: string): Promise<void>;
  /**
   * How a new sandbox would be isolated here; throws a permanent IsolationUnavailable failure
   * when the provider will not run one (so a run can refuse before anything starts).
   */
  checkIsolation(): Isolation;
  /** Stops paying for an idle sandbox while its sub-task is suspended, keeping its files. */
  pause?(key: string): Promise<void>;
  /** Brings a paused sandbox back. Using it resumes it too; this just does it eagerly. */
  resume?(key: string): Promise<void>;
}
