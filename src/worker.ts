/**
 * The Temporal worker process: runs leader and worker workflows and every activity. It polls two
 * task queues (Temporal's worker-specific task queue pattern): the deployment's shared queue, for
 * workflows and activities any host can run, and its host's own queue `<queue>@<host>`, for the
 * activities that need a sandbox on this host's disk. Workflows claim a host (claimHost, on the
 * shared queue) and send that sandbox's activities to the host queue the claim returned.
 *
 *   flotilla worker [--verbose] [--log-format text|json]     (in a checkout: npm run worker)
 *
 * With FLOTILLA_DEPLOYMENT set it polls as one version of that worker deployment and every run it
 * starts stays pinned to that version: a deploy never moves a run in flight onto new workflow code.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import path from 'node:path';
import { Client } from '@temporalio/client';
import { type NativeConnection, type State, Worker, type WorkerOptions, bundleWorkflowCode } from '@temporalio/worker';
import { createActivities } from './activities';
import { type DepsOptions, type HostPlacement, defaultDeps } from './activities/deps';
import {
  type DeploymentVersion,
  dataDir,
  deploymentSetting,
  hostId,
  hostTaskQueue,
  packageVersion,
  stagingUrl,
  taskQueue,
} from './config/settings';
import { connectWorker } from './temporal/connection';
import { checkRetention, retentionPolicy, startRetention } from './retention/gc';
import { createLogger, installSdkLogger, logOptions } from './log/logger';
import { readOnlyDirs } from './sandbox/local/bwrap';
import { probeBubblewrap } from './sandbox/local/probe';
import { checkMessage, checkSearchAttributes, registerSearchAttributes } from './temporal/search-attributes';
import { TRACED_WORKFLOW_MODULES, type Tracing, startTracing } from './temporal/telemetry';
import { credentialFiles } from './temporal/server';

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
 * `npm run build` bundles the workflows into dist/, next to the compiled worker, so an installed
 * package starts without webpack. Run from the sources (a checkout, tests), there is none.
 */
function packagedBundle(traced = false): { codePath: string } | undefined {
  const codePath = path.join(__dirname, traced ? 'workflow-bundle-traced.js' : 'workflow-bundle.js');
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
    // PINNED: a run, its workers and their activities stay on the version that started the run,
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
    ...(workflowBundle ? { workflowBundle } : { workflowsPath: require.resolve('./workflows') }),
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
 * The workflow code and, if FLOTILLA_DEPLOYMENT asks for one, the version it runs as. Bundled once
 * here, so the build ID names exactly the code the worker then runs.
 */
async function versionedWorkflows(
  traced: boolean,
): Promise<Pick<FlotillaWorkerOptions, 'workflowBundle' | 'deployment'>> {
  const setting = deploymentSetting();
  if (!setting) return {};
  // Traced code is other code, so another build: a run never moves between traced and untraced workers.
  const packaged = packagedBundle(traced);
  const bundle = packaged
    ? { code: readFileSync(packaged.codePath, 'utf8') }
    : await bundleWorkflowCode({
        workflowsPath: require.resolve('./workflows'),
        ...(traced ? { workflowInterceptorModules: TRACED_WORKFLOW_MODULES } : {}),
      });
  return {
    workflowBundle: bundle,
    deployment: { deploymentName: setting.deploymentName, buildId: setting.buildId ?? defaultBuildId(bundle.code) },
  };
}

/** Says loudly, once, when agents will run without isolation, or when local sandboxes will be refused. */
export function warnIfUnisolated(log: (line: string) => void = console.error): void {
  if (process.env.FLOTILLA_ISOLATION === 'none') {
    log('WARNING: FLOTILLA_ISOLATION=none: local sandboxes are NOT isolated. Agents, and the code they write,');
    log("         run as plain processes with this worker's user and access. Every report says isolation none.");
    return;
  }
  const probe = probeBubblewrap();
  if (probe.isolation === 'none') {
    log(`WARNING: local sandboxes will be refused: ${probe.reason}.`);
    log(
      '         Install bubblewrap (apt-get install bubblewrap), or set FLOTILLA_ISOLATION=none to run agents unisolated.',
    );
  }
}

/** A deployment (the Docker image) sets FLOTILLA_REQUIRE_ISOLATION=1: better no worker than bare agents. */
function requireIsolationIfAsked(): void {
  if (process.env.FLOTILLA_REQUIRE_ISOLATION !== '1') return;
  const probe = probeBubblewrap();
  if (probe.isolation === 'none') {
    throw new Error(
      `refusing to start: FLOTILLA_REQUIRE_ISOLATION=1, but sandboxes would not be isolated (${probe.reason})`,
    );
  }
}

/** Sandboxes mount some host directories read-only (/etc, /opt...): Temporal credentials must not be in them. */
function refuseCredentialsVisibleToAgents(): void {
  const visible = readOnlyDirs().map((d) => realpathSync(d));
  for (const file of credentialFiles()) {
    const real = realpathSync(file);
    const dir = visible.find((d) => real === d || real.startsWith(`${d}/`));
    if (dir)
      throw new Error(
        `refusing to start: ${file} holds Temporal credentials, and every sandbox can read it (${dir} is mounted into sandboxes); move it elsewhere`,
      );
  }
}

/**
 * Leaders upsert Flotilla's search attributes, and an upsert the namespace cannot take fails the
 * workflow task again and again: better no worker, saying how to fix it, than runs that hang.
 * A deployment that owns its cluster (docker-compose.yml) lets the worker register them instead.
 */
async function requireSearchAttributes(
  connection: NativeConnection,
  namespace: string,
  log: (line: string) => void,
): Promise<void> {
  if (process.env.FLOTILLA_REGISTER_SEARCH_ATTRIBUTES === '1') {
    const added = await registerSearchAttributes(connection.operatorService, namespace);
    if (added.length) log(`Registered search attributes in namespace "${namespace}": ${added.join(', ')}`);
    return;
  }
  const problem = checkMessage(namespace, await checkSearchAttributes(connection.operatorService, namespace));
  if (problem) throw new Error(`refusing to start: ${problem}`);
}

/**
 * After SIGTERM a worker stops polling and gives running activities this long to finish; then
 * they are cancelled, which kills their agent and destroys the sandbox, and Temporal retries them
 * on another worker. Agents run for minutes, so waiting for them is not the point: a clean stop is.
 */
const SHUTDOWN_GRACE_TIME = '10 seconds';

export async function runWorkerProcess(args: string[] = []): Promise<void> {
  const opts = logOptions(args);
  const log = createLogger(opts);
  installSdkLogger(log, opts);
  requireIsolationIfAsked();
  stagingUrl(); // a bad FLOTILLA_STAGING_URL stops the worker here, before it connects
  const tracing = startTracing('flotilla-worker', (line) => log.warn(line));
  const retention = retentionPolicy();
  const versioned = await versionedWorkflows(!!tracing);
  const dir = dataDir();
  const temporal = await connectWorker({ dataDir: dir });
  if (temporal.started)
    log.info(`Started an embedded Temporal dev server at ${temporal.address} (data in ${dir}/temporal)`);
  if (temporal.uiUrl) log.info(`Temporal Web UI: ${temporal.uiUrl}`);
  warnIfUnisolated((line) => log.warn(line.trim()));
  try {
    refuseCredentialsVisibleToAgents();
    await requireSearchAttributes(temporal.connection, temporal.namespace, (line) => log.info(line));
    // Retention (FLOTILLA_RETENTION): this host's share of `flotilla gc`, from the first poll on.
    const gc = retention && {
      client: new Client({ connection: temporal.connection, namespace: temporal.namespace }),
      policy: retention,
    };
    if (gc) await checkRetention(gc.client, temporal.namespace, gc.policy);
    const worker = await createFlotillaWorker({
      connection: temporal.connection,
      namespace: temporal.namespace,
      taskQueue: taskQueue(),
      dataDir: dir,
      shutdownGraceTime: SHUTDOWN_GRACE_TIME,
      tracing,
      ...versioned,
    });
    if (tracing) log.info(`Tracing to ${tracing.endpoint}`);
    if (gc)
      log.info(
        `Retention: the state of runs closed over ${gc.policy.setting} is removed every ${gc.policy.everyMs / 1000}s`,
      );
    const as = versioned.deployment
      ? ` as ${versioned.deployment.deploymentName}:${versioned.deployment.buildId} (runs pinned)`
      : '';
    log.info(
      `Flotilla worker polling task queue "${taskQueue()}" and its host's "${worker.placement.taskQueue}"${as} in namespace "${temporal.namespace}" at ${temporal.address}; data in ${dir}`,
    );
    const pruning = gc && startRetention(gc.client, dir, gc.policy, log);
    await worker.run();
    await pruning?.stop();
    log.info('Flotilla worker stopped');
  } finally {
    await tracing?.flush();
    await temporal.close();
  }
}

if (require.main === module) {
  runWorkerProcess(process.argv.slice(2)).catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  });
}
