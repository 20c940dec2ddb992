/** What activities need from the host, built once per worker process. */
import path from 'node:path';
import { ApplicationFailure, Context } from '@temporalio/activity';
import { ArtifactStore } from '../store/artifacts';
import { makePrivateDir, stagingUrl } from '../config/settings';
import { StagingRepo, artifactRef } from '../git/staging';
import { mountedObjects } from '../git/run-mirror';
import { Workspace } from '../git/workspace';
import type { E2BApi } from '../sandbox/e2b/api';
import type { E2BProviderOptions, E2BSandboxProvider } from '../sandbox/e2b/provider';
import { type LocalProviderOptions, LocalSandboxProvider } from '../sandbox/local/provider';
import type { Sandbox, SandboxOptions, SandboxProvider } from '../sandbox/types';
import type { Isolation } from '../contracts/reports';
import type { SandboxLimitsRequest } from '../contracts/request';

/** How a workflow names a sandbox: a stable key plus the options it was made with. */
export interface SandboxRef {
  key: string;
  provider: 'local' | 'e2b';
  network: boolean;
  /** The request's additions to the network allowlist. */
  allowHosts?: string[];
  /** The E2B template, for provider e2b. */
  template?: string;
  /** Resource limits asked for by the request (the provider caps them). */
  limits?: SandboxLimitsRequest;
}

export interface ActivityDeps {
  dataDir: string;
  /** The provider for a sandbox; E2B's is made on first use, so a worker without E2B_API_KEY still starts. */
  provider(ref: SandboxRef): SandboxProvider;
  artifacts: ArtifactStore;
  /**
   * The staging repository with the refs of run `runKey` pulled from the shared store, once per
   * activity execution (the activity's own writes are published as it makes them).
   */
  staging: (runKey: string) => Promise<StagingRepo>;
  /** The staging repository as this host holds it, nothing pulled: for what only removes. */
  stagingHere: () => Promise<StagingRepo>;
  /** This worker process's host and the task queue only its host polls (see src/worker.ts). */
  host?: HostPlacement;
  /** A run's page in the Temporal Web UI, when the worker knows where that is: for the links a run writes on the forge and in notifications. */
  workflowLink?: (namespace: string, workflowId: string) => string | undefined;
}

/** Where a sandbox lives: the host, and the task queue its activities go to. */
export interface HostPlacement {
  host: string;
  taskQueue: string;
}

export interface DepsOptions {
  /** The E2B API to use instead of the real SDK (a test double). */
  e2bApi?: E2BApi;
  /** How local sandboxes are made (the bubblewrap binary, the isolation opt-out, the worker's limit caps). */
  local?: LocalProviderOptions;
  /** This process's host and host task queue, which claimHost hands out. */
  host?: HostPlacement;
  /** The shared store's URL; by default FLOTILLA_STAGING_URL, none when that is unset. */
  stagingUrl?: string;
  /** A run's page in the Temporal Web UI, when known. */
  workflowLink?: (namespace: string, workflowId: string) => string | undefined;
}

/** The activity this code runs in, or undefined outside one. */
function currentActivity(): Context | undefined {
  try {
    return Context.current();
  } catch {
    return undefined;
  }
}

export function defaultDeps(dataDir: string, options: DepsOptions = {}): ActivityDeps {
  makePrivateDir(dataDir);
  const shared = 'stagingUrl' in options ? options.stagingUrl : stagingUrl();
  let opened: Promise<StagingRepo> | undefined;
  const open = () => (opened ??= StagingRepo.open(dataDir, shared));
  const pulled = new WeakMap<Context, Set<string>>();
  const local = new LocalSandboxProvider(path.join(dataDir, 'sandboxes'), {
    objectsFor: (key) => mountedObjects(dataDir, key),
    ...options.local,
  });
  const e2b = new Map<string, LazyE2BProvider>();
  return {
    dataDir,
    provider(ref) {
      if (ref.provider === 'local') return local;
      const template = ref.template ?? 'base';
      if (!e2b.has(template)) e2b.set(template, new LazyE2BProvider({ template, api: options.e2bApi }));
      return e2b.get(template)!;
    },
    artifacts: new ArtifactStore(
      path.join(dataDir, 'artifacts'),
      shared
        ? {
            publish: async (hex, file) => (await open()).publishBlob(artifactRef(hex), file),
            fetch: async (hex, file) => (await open()).fetchBlob(artifactRef(hex), file),
          }
        : undefined,
    ),
    async staging(runKey) {
      const repo = await open();
      const activity = currentActivity();
      const done = activity && pulled.get(activity);
      if (done?.has(runKey)) return repo;
      await repo.pull(runKey);
      if (activity) pulled.set(activity, (done ?? new Set()).add(runKey));
      return repo;
    },
    stagingHere: open,
    host: options.host,
    workflowLink: options.workflowLink,
  };
}

/**
 * The E2B provider, its SDK loaded when a run first asks for an E2B sandbox: most workers never
 * do, and the SDK costs every worker ~20 MB and a tenth of its start-up.
 */
class LazyE2BProvider implements SandboxProvider {
  readonly name = 'e2b';
  private loaded: Promise<E2BSandboxProvider> | undefined;

  constructor(private readonly options: E2BProviderOptions) {}

  private get real(): Promise<E2BSandboxProvider> {
    this.loaded ??= import('../sandbox/e2b/provider').then((m) => new m.E2BSandboxProvider(this.options));
    return this.loaded;
  }

  /** E2B's own answer, which needs no SDK: its sandboxes are isolated by E2B. */
  checkIsolation(): Isolation {
    return 'e2b';
  }
  async provision(key: string, options: SandboxOptions): Promise<Sandbox> {
    return (await this.real).provision(key, options);
  }
  async find(key: string): Promise<Sandbox | undefined> {
    return (await this.real).find(key);
  }
  async destroy(key: string): Promise<void> {
    return (await this.real).destroy(key);
  }
  async pause(key: string): Promise<void> {
    return (await this.real).pause(key);
  }
  async resume(key: string): Promise<void> {
    return (await this.real).resume(key);
  }
}

/** The run a sandbox belongs to: workflows key every sandbox `<runKey>/<role>`. */
export const runOfSandbox = (ref: SandboxRef): string => ref.key.split('/')[0];

export const sandboxOptions = (ref: SandboxRef): SandboxOptions => ({
  network: ref.network,
  allowHosts: ref.allowHosts,
  limits: ref.limits,
});

/** The workspace of the existing sandbox for `ref`, its git scripts stopped when the activity is cancelled. */
export async function openWorkspace(deps: ActivityDeps, ref: SandboxRef): Promise<Workspace> {
  return new Workspace(await openSandbox(deps, ref), Context.current().cancellationSignal);
}

/** The existing sandbox for `ref`; a missing one is a hard failure, since retrying cannot bring it back. */
export async function openSandbox(deps: ActivityDeps, ref: SandboxRef): Promise<Sandbox> {
  const sb = await deps.provider(ref).find(ref.key, sandboxOptions(ref));
  if (!sb)
    throw ApplicationFailure.nonRetryable(`sandbox ${ref.key} does not exist (was it destroyed?)`, 'SandboxMissing');
  return sb;
}
