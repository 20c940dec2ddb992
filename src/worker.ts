/**
 * The worker process: runs leader and sub-task workflows and every activity, polling its
 * deployment's shared task queue and its host's own (src/temporal/worker.ts says how).
 *
 *   flotilla worker [--verbose] [--log-format text|json]     (in a checkout: npm run worker)
 *
 * This file reads the settings, connects, creates the worker and runs it until it is stopped.
 */
import { Client } from '@temporalio/client';
import { ConfigError, checkSettings, dataDir, deploymentSetting, taskQueue } from './config/settings';
import { createLogger, installSdkLogger, logOptions } from './log/logger';
import { checkRetention, retentionPolicy, startRetention } from './retention/gc';
import { connectWorker } from './temporal/connection';
import {
  refuseCredentialsVisibleToAgents,
  refuseUnreadableInstall,
  requireIsolationIfAsked,
  requireSearchAttributes,
  warnIfUnisolated,
} from './temporal/preflight';
import { workflowUrl } from './temporal/server';
import { startSpawner } from './spawner';
import { receiverSettings, startWebhookReceiver } from './webhooks/receiver';
import { startTracing } from './temporal/telemetry';
import { createFlotillaWorker, versionedWorkflows } from './temporal/worker';

// Tests and scripts create workers in their own process from here.
export { FlotillaWorker, type FlotillaWorkerOptions, createFlotillaWorker, defaultBuildId } from './temporal/worker';

/**
 * After SIGTERM a worker stops polling and gives running activities this long to finish; then
 * they are cancelled, which kills their agent and destroys the sandbox, and Temporal retries them
 * on another worker. Agents run for minutes, so waiting for them is not the point: a clean stop is.
 */
const SHUTDOWN_GRACE_TIME = '10 seconds';

export async function runWorkerProcess(args: string[] = []): Promise<void> {
  // A setting the worker cannot use stops it here, before it logs, connects or polls.
  checkSettings('worker');
  const opts = logOptions(args);
  const log = createLogger(opts);
  installSdkLogger(log, opts);
  requireIsolationIfAsked();
  // Both before connecting: a key sandboxes could read is the graver of the two.
  refuseCredentialsVisibleToAgents();
  refuseUnreadableInstall();
  // While the process is small: the spawner is started by forking it (spawner/).
  const unspawned = await startSpawner();
  if (unspawned) log.warn(unspawned);
  const tracing = startTracing('flotilla-worker', (line) => log.warn(line));
  const retention = retentionPolicy();
  const webhooks = receiverSettings();
  const versioned = await versionedWorkflows(deploymentSetting(), !!tracing);
  const dir = dataDir();
  const temporal = await connectWorker({ dataDir: dir });
  if (temporal.started)
    log.info(`Started an embedded Temporal dev server at ${temporal.address} (data in ${dir}/temporal)`);
  if (temporal.uiUrl) log.info(`Temporal Web UI: ${temporal.uiUrl}`);
  warnIfUnisolated((line) => log.warn(line.trim()));
  try {
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
      deps: { workflowLink: (ns, id) => workflowUrl(temporal.uiUrl, ns, id) },
      tracing,
      ...versioned,
    });
    if (tracing) log.info(`Tracing to ${tracing.endpoint}`);
    const receiver =
      webhooks &&
      (await startWebhookReceiver({
        client: gc ? gc.client : new Client({ connection: temporal.connection, namespace: temporal.namespace }),
        ...webhooks,
        warn: (l) => log.warn(l),
      }));
    if (receiver) log.info(`Receiving GitHub's webhooks at ${receiver.url}`);
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
    await receiver?.close();
    log.info('Flotilla worker stopped');
  } finally {
    await tracing?.flush();
    await temporal.close();
  }
}

if (require.main === module) {
  runWorkerProcess(process.argv.slice(2)).catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    // A setting it cannot use is bad input, as the CLI says it: exit 2.
    process.exit(err instanceof ConfigError ? 2 : 1);
  });
}
