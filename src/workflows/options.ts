import { ActivityCancellationType, type ActivityOptions } from '@temporalio/workflow';

/**
 * Short activities (git plumbing, sandbox lifecycle). They heartbeat, so a dead worker process
 * is noticed within the heartbeat timeout. Bounded retries so a persistent fault surfaces as a
 * failed run instead of retrying forever.
 */
export function activityOptions(heartbeatTimeoutMs: number): ActivityOptions {
  return {
    startToCloseTimeout: '30 minutes',
    heartbeatTimeout: heartbeatTimeoutMs,
    retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 5 },
  };
}

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
