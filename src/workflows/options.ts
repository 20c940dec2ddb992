import { ActivityCancellationType, type ActivityOptions } from '@temporalio/workflow';

/**
 * Retries are bounded by time, not by a small attempt count: a worker process that crashes again
 * and again (a deploy, an OOM-killed host) is retried for as long as the bound allows, each
 * crash noticed within the heartbeat timeout. Deterministic failures are non-retryable
 * (src/contracts/failures.ts), so they end at once whatever the bound.
 */
const RETRY = { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds' } as const;

/** Short activities (git plumbing, sandbox lifecycle). They heartbeat. */
export function activityOptions(heartbeatTimeoutMs: number): ActivityOptions {
  return {
    startToCloseTimeout: '30 minutes',
    scheduleToCloseTimeout: Math.max(15 * 60_000, 20 * heartbeatTimeoutMs),
    heartbeatTimeout: heartbeatTimeoutMs,
    retry: RETRY,
  };
}

/**
 * Long commands (agents, tests) heartbeat; a worker process that dies is noticed within the
 * heartbeat timeout and the attempt is retried on another worker process, in the same sandbox,
 * within twice the command's own time limit and a margin. A cancelled command is waited for
 * until its processes are gone, so nothing outlives the sandbox it ran in.
 */
export function commandOptions(timeoutMs: number, heartbeatTimeoutMs: number): ActivityOptions {
  const attemptMs = timeoutMs + 2 * 60_000;
  return {
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    startToCloseTimeout: attemptMs,
    scheduleToCloseTimeout: 2 * attemptMs + 10 * 60_000,
    heartbeatTimeout: heartbeatTimeoutMs,
    retry: RETRY,
  };
}
