/**
 * The run's end on its hosts: each host its sandboxes used removes the run's mirror (the base's
 * history its sandboxes read, src/git/run-mirror.ts), which it kept for the whole run. A host that
 * does not pick the removal up soon (lost, or gone) keeps it for `flotilla gc`: the run's end
 * waits seconds, not a host's timeout, for it.
 */
import { CancellationScope, patched, proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { Activities } from '../../activities';
import { hostTaskQueue } from '../../contracts/names';
import { takeLeaderPlacements } from '../host-affinity';
import { PATCHES } from '../patches';
import type { Run } from './run';

const ON_A_HOST = {
  scheduleToStartTimeout: '10 seconds',
  startToCloseTimeout: '1 minute',
  retry: { maximumAttempts: 2 },
} as const;

/** Removes the run's mirror on every host its sandboxes used: the leader's own, and each sub-task's last. */
export async function removeRunMirrors(run: Run): Promise<void> {
  if (!patched(PATCHES.runMirrorPerRun.id)) return;
  // One removal per host (a replay's task queue is not the run's: the count must not depend on it).
  const queues = new Map(takeLeaderPlacements().map((p) => [p.host, p.taskQueue]));
  const { taskQueue } = workflowInfo();
  for (const { host } of run.status.workers)
    if (host && !queues.has(host)) queues.set(host, hostTaskQueue(taskQueue, host));
  await CancellationScope.nonCancellable(() =>
    Promise.all(
      [...queues.values()].map((queue) =>
        proxyActivities<Activities>({ ...ON_A_HOST, taskQueue: queue })
          .removeRunMirror.executeWithOptions({ summary: 'remove the run mirror on its host' }, [{ runKey: run.key }])
          .catch(() => undefined),
      ),
    ),
  );
}
