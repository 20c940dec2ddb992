/**
 * A worker process's Temporal workers. It polls two task queues (Temporal's worker-specific task
 * queue pattern): the deployment's shared queue, for workflows and activities any host can run,
 * and its host's own queue `<queue>@<host>`, for the activities that need a sandbox on this
 * host's disk. Workflows claim a host (claimHost, on the shared queue) and send that sandbox's
 * activities to the host queue the claim returned.
 *
 * With a deployment version it polls as that version and every run it starts stays pinned to
 * it: a deploy never moves a run in flight onto new workflow code.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { type NativeConnection, type State, Worker, type WorkerOptions, bundleWorkflowCode } from '@temporalio/worker';
import { createActivities } from '../activities';
import { type DepsOptions, type HostPlacement, defaultDeps } from '../activities/deps';
import { type DeploymentVersion, hostId, hostTaskQueue, packageVersion } from '../config/settings';
import { startSpawner } from '../spawner';
import { TRACED_WORKFLOW_MODULES, type Tracing } from './telemetry';
import { PRELOADED_WORKFLOW_MODULES } from './workflow-bundle';

export interface FlotillaWorkerOptions {
  connection: NativeConnection;
  namespace: string;
  taskQueue: string;
  dataDir: string;
  /** A prebuilt workflow bundle (tests build one per file); by default the package's, or one bundled at start. */
  workflowBundle?: WorkerOptions['workflowBundle'];
  /** Dependencies of activities beyond the data directory (a test double of the E2B API). */
  deps?: DepsOptions;
  /** How long a running activity may go on after SIGTERM before it is cancelled (default 0). */
  shutdownGraceTime?: WorkerOptions['shutdownGraceTime'];
  /** Poll as this worker deployment version, runs pinned to it; without it, an unversioned worker. */
  deployment?: DeploymentVersion;
  /** This process's host (default: FLOTILLA_HOST_ID, or the hostname); its sandboxes' activities come on `<taskQueue>@<host>`. */
  host?: string;
  /** OpenTelemetry tracing (src/temporal/telemetry.ts); a given workflowBundle must then be bundled with TRACED_WORKFLOW_MODULES. */
  tracing?: Tracing;
}

/** A worker process's two Temporal workers: the shared queue's and its host's. They start and stop together. */
export class FlotillaWorker {
  constructor(
    private readonly shared: Worker,
    private readonly onHost: Worker,
    /** The host this process is, and the queue only it (and other processes of its host) polls. */
    readonly placement: HostPlacement,
  ) {}

  /** Polls both queues until shutdown; when one worker fails, the other is stopped too and the failure rethrown. */
  async run(): Promise<void> {
    const ran = await Promise.allSettled(
      [this.shared, this.onHost].map((w) =>
        w.run().catch((err: unknown) => {
          this.shutdown();
          throw err;
        }),
      ),
    );
    const failed = ran.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
  }

  /** RUNNING once both poll; otherwise the state of the one that is behind (INITIALIZED, STOPPING...). */
  getState(): State {
    const states = [this.shared.getState(), this.onHost.getState()];
    return states.find((s) => s !== 'RUNNING') ?? 'RUNNING';
  }

  /** Stops polling both queues; running activities get the shutdown grace time. */
  shutdown(): void {
    for (const w of [this.shared, this.onHost]) if (w.getState() === 'RUNNING') w.shutdown();
  }

  /** Runs both workers while `fn` runs, then stops them. */
  async runUntil<R>(fn: () => Promise<R>): Promise<R> {
    const running = this.run();
    try {
      return await fn();
    } finally {
      this.shutdown();
      await running;
    }
  }
}

/**
 * `npm run build` bundles the workflows into dist/ (beside dist/worker.js), so an installed
 * package starts without webpack. Run from the sources (a checkout, tests), there is none.
 */
function packagedBundle(traced = false): { codePath: string } | undefined {
  const codePath = path.join(__dirname, '..', traced ? 'workflow-bundle-traced.js' : 'workflow-bundle.js');
  return existsSync(codePath) ? { codePath } : undefined;
}

export async function createFlotillaWorker(opts: FlotillaWorkerOptions): Promise<FlotillaWorker> {
  const workflowBundle = opts.workflowBundle ?? packagedBundle(!!opts.tracing);
  const tracing = opts.tracing && {
    interceptors: {
      activity: opts.tracing.activityInterceptors,
      ...(workflowBundle ? {} : { workflowModules: TRACED_WORKFLOW_MODULES }),
    },
    sinks: opts.tracing.sinks,
  };
  // Its programs are started by the spawner, a small process, rather than by forking the worker (spawner/).
  await startSpawner();
  const host = opts.host ?? hostId();
  const placement = { host, taskQueue: hostTaskQueue(opts.taskQueue, host) };
  // Both serve every activity: runs started before host affinity send sandbox activities to the shared queue.
  const activities = createActivities(defaultDeps(opts.dataDir, { ...opts.deps, host: placement }));
  const common: Omit<WorkerOptions, 'taskQueue'> = {
    connection: opts.connection,
    namespace: opts.namespace,
    activities,
    // Cancellation reaches an activity only with a heartbeat: keep them frequent so a cancelled
    // or paused agent is stopped within seconds, not the default half-minute.
    maxHeartbeatThrottleInterval: '2 seconds',
    shutdownGraceTime: opts.shutdownGraceTime ?? 0,
    // PINNED: a run, its sub-tasks and their activities stay on the version that started the run,
    // so new code only ever sees histories it wrote. The leader waits at gates for days: with
    // AUTO_UPGRADE a deploy would replay those runs on code they were not recorded with.
    ...(opts.deployment
      ? {
          workerDeploymentOptions: {
            version: opts.deployment,
            useWorkerVersioning: true,
            defaultVersioningBehavior: 'PINNED',
          },
        }
      : {}),
  };
  const shared = await Worker.create({
    ...common,
    taskQueue: opts.taskQueue,
    ...(workflowBundle
      ? { workflowBundle }
      : {
          workflowsPath: require.resolve('../workflows'),
          bundlerOptions: { preloadModules: PRELOADED_WORKFLOW_MODULES },
        }),
    ...tracing,
  });
  const onHost = await Worker.create({
    ...common,
    taskQueue: placement.taskQueue,
    ...(opts.tracing && { interceptors: { activity: opts.tracing.activityInterceptors } }),
  });
  return new FlotillaWorker(shared, onHost, placement);
}

/** The default build ID: the package version and a hash of the workflow bundle, so changed workflow code is a new build. */
export function defaultBuildId(workflowCode: string): string {
  return `${packageVersion()}-${createHash('sha256').update(workflowCode).digest('hex').slice(0, 12)}`;
}

/**
 * The workflow code and, when the worker polls as a deployment version (FLOTILLA_DEPLOYMENT), that
 * version. Bundled once here, so the build ID names exactly the code the worker then runs.
 */
export async function versionedWorkflows(
  setting: { deploymentName: string; buildId?: string } | undefined,
  traced: boolean,
): Promise<Pick<FlotillaWorkerOptions, 'workflowBundle' | 'deployment'>> {
  if (!setting) return {};
  // Traced code is other code, so another build: a run never moves between traced and untraced workers.
  const packaged = packagedBundle(traced);
  const bundle = packaged
    ? { code: readFileSync(packaged.codePath, 'utf8') }
    : await bundleWorkflowCode({
        workflowsPath: require.resolve('../workflows'),
        preloadModules: PRELOADED_WORKFLOW_MODULES,
        ...(traced ? { workflowInterceptorModules: TRACED_WORKFLOW_MODULES } : {}),
      });
  return {
    workflowBundle: bundle,
    deployment: { deploymentName: setting.deploymentName, buildId: setting.buildId ?? defaultBuildId(bundle.code) },
  };
}
