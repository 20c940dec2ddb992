import { ActivityCancellationType, type ActivityOptions } from '@temporalio/workflow';

/**
 * Short activities (git plumbing, sandbox lifecycle). Bounded retries so a persistent fault
 * surfaces as a failed run instead of retrying forever.
 */
export const activityOptions: ActivityOptions = {
  startToCloseTimeout: '10 minutes',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 5 },
};

/**
 * Long commands (agents, tests) heartbeat; a worker process that dies is noticed within the
 * heartbeat timeout and the attempt is retried on another worker process. A cancelled command
 * is waited for until its processes are gone, so nothing outlives the sandbox it ran in.
 */
export function commandOptions(timeoutMs: number, heartbeatTimeoutMs: number): ActivityOptions {
  return {
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    startToCloseTimeout: timeoutMs + 2 * 60_000,
    heartbeatTimeout: heartbeatTimeoutMs,
    retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumAttempts: 3 },
  };
}
