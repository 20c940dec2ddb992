/**
 * The Temporal worker process: runs leader and worker workflows and every activity. Activities
 * use local sandboxes and the staging repository under the data directory, so all worker
 * processes of one deployment share that directory (one host, or a shared volume).
 *
 *   npx tsx src/worker.ts        (or `flotilla worker`)
 */
import { NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { createActivities } from './activities';
import { type DepsOptions, defaultDeps } from './activities/deps';
import { dataDir, taskQueue } from './config';
import { probeBubblewrap } from './sandbox/local';
import { ensureTemporal } from './temporal';

export interface FlotillaWorkerOptions {
  connection: NativeConnection;
  namespace: string;
  taskQueue: string;
  dataDir: string;
  /** A prebuilt workflow bundle (tests build one per file); by default workflows are bundled at start. */
  workflowBundle?: WorkerOptions['workflowBundle'];
  /** Dependencies of activities beyond the data directory (a test double of the E2B API). */
  deps?: DepsOptions;
}

export async function createFlotillaWorker(opts: FlotillaWorkerOptions): Promise<Worker> {
  return Worker.create({
    connection: opts.connection,
    namespace: opts.namespace,
    taskQueue: opts.taskQueue,
    ...(opts.workflowBundle ? { workflowBundle: opts.workflowBundle } : { workflowsPath: require.resolve('./workflows') }),
    activities: createActivities(defaultDeps(opts.dataDir, opts.deps)),
    // Cancellation reaches an activity only with a heartbeat: keep them frequent so a cancelled
    // or paused agent is stopped within seconds, not the default half-minute.
    maxHeartbeatThrottleInterval: '2 seconds',
  });
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
    log('         Install bubblewrap (apt-get install bubblewrap), or set FLOTILLA_ISOLATION=none to run agents unisolated.');
  }
}

export async function runWorkerProcess(): Promise<void> {
  const dir = dataDir();
  const temporal = await ensureTemporal({ dataDir: dir });
  if (temporal.started) console.log(`Started an embedded Temporal dev server at ${temporal.address} (data in ${dir}/temporal)`);
  if (temporal.uiUrl) console.log(`Temporal Web UI: ${temporal.uiUrl}`);
  warnIfUnisolated();
  const connection = await NativeConnection.connect({ address: temporal.address });
  const worker = await createFlotillaWorker({ connection, namespace: temporal.namespace, taskQueue: taskQueue(), dataDir: dir });
  console.log(`Flotilla worker polling task queue "${taskQueue()}" in namespace "${temporal.namespace}"; data in ${dir}`);
  try {
    await worker.run();
  } finally {
    await connection.close();
    await temporal.stop();
  }
}

if (require.main === module) {
  runWorkerProcess().catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  });
}
