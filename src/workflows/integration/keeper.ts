/**
 * The keeper of the integration's sandboxes on one host: a child workflow of the leader whose one
 * job is to destroy them once it is cancelled. The leader cancels it when the integration is done
 * with them; and since it is started with ParentClosePolicy.REQUEST_CANCEL (as sub-task workflows
 * are), Temporal cancels it when the leader closes without doing so: terminated, timed out, or
 * failed in a way no code of its own saw. So the sandboxes the integration makes early (while the
 * agents run) or keeps between its rounds never outlive the run. The leader starts it before the
 * first of them is provisioned on the host.
 *
 * A leader that closed without its own end (terminated) never removed the run's mirror either: the
 * keeper's host removes it too when it finds the leader closed (retireSandboxes).
 *
 * A host that is lost takes its sandboxes with it: the destruction waits for the host as long as
 * any of the run's activities would, then gives up (`flotilla gc`, or FLOTILLA_RETENTION, removes
 * them if that host comes back).
 */
import { CancellationScope, proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { Activities, HostPlacement, SandboxRef } from '../../activities';
import { hostLost } from '../host-affinity';
import { activityOptions } from '../options';

export interface KeeperInput {
  /** The sandboxes it keeps: the integration's test and fixer sandboxes. */
  sandboxes: SandboxRef[];
  /** Their host. */
  placement: HostPlacement;
  /** The run's key: its mirror on the host goes with the sandboxes when the leader is gone (absent in keepers started before). */
  runKey?: string;
  hostTimeoutMs: number;
  heartbeatTimeoutMs: number;
}

/** The workflow id of the leader's `n`th keeper: under the leader's, and never a sub-task's (those have no dot). */
export function keeperWorkflowId(leaderId: string, n: number): string {
  return `${leaderId}/integration-sandboxes.${n}`;
}

export async function sandboxKeeperWorkflow(input: KeeperInput): Promise<void> {
  try {
    await CancellationScope.current().cancelRequested;
  } finally {
    await CancellationScope.nonCancellable(() => retire(input));
  }
}

async function retire(input: KeeperInput): Promise<void> {
  const { retireSandboxes } = proxyActivities<Activities>({
    ...activityOptions(input.heartbeatTimeoutMs),
    taskQueue: input.placement.taskQueue,
    scheduleToStartTimeout: input.hostTimeoutMs,
  });
  try {
    await retireSandboxes.executeWithOptions(
      { summary: `destroy the integration's sandboxes on ${input.placement.host}` },
      [
        {
          sandboxes: input.sandboxes,
          ...(input.runKey && { runKey: input.runKey, leaderId: workflowInfo().parent?.workflowId }),
        },
      ],
    );
  } catch (err) {
    if (!hostLost(err)) throw err;
  }
}
