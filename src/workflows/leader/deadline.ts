/**
 * The run's deadline (limits.runTimeoutMinutes): a durable timer from the run's start. When it
 * fires, the leader's steps are cancelled as on `flotilla cancel` (sub-task workflows stop and
 * destroy their sandboxes, the integration's sandboxes go), nothing is pushed, and the run fails
 * as `run-timeout`. What was integrated stays on the integration head, as after any failure. In
 * the review phase, after a push, the run ends with that push instead (`pr-opened` with its PR).
 */
import { CancellationScope, isCancellation, patched, setCurrentDetails, sleep } from '@temporalio/workflow';
import type { RunResult } from '../../contracts/reports';
import type { LeaderRequest } from '../../contracts/request';
import { msOfMinutes, timerMs } from '../durations';
import { PATCHES } from '../patches';
import type { Run } from './run';

/** Why a run that ran past its deadline ended, in the status, the result and the CLI. */
export function deadlineReason(minutes: number): string {
  return `ran past limits.runTimeoutMinutes (${minutes} min); what ran was cancelled and nothing was pushed`;
}

/** How a run in its review phase ends at its deadline: with its last push, the round under way cancelled. */
export function reviewEndedReason(minutes: number, sha: string, targetRef: string): string {
  return `pushed ${sha} to ${targetRef}; the review phase ended at limits.runTimeoutMinutes (${minutes} min), a round under way cancelled`;
}

/**
 * Runs the leader's steps (`steps`) within the run's deadline, if the request sets one. A push
 * under way when the deadline passes is let finish (it cannot be undone halfway).
 */
export async function withinDeadline(
  run: Run,
  req: LeaderRequest,
  steps: () => Promise<RunResult>,
): Promise<RunResult> {
  const minutes = req.limits.runTimeoutMinutes;
  // Asked only of runs that set a deadline, so that every other run's commands stay as they were.
  if (minutes === undefined || !patched(PATCHES.runLimits.id)) return steps();
  const deadlineAt = run.status.startedAt + msOfMinutes(minutes);
  run.status.deadlineAt = deadlineAt;
  const work = new CancellationScope();
  const timer = new CancellationScope();
  let expired = false;
  const ticking = timer
    .run(() => sleep(timerMs(Math.max(1, deadlineAt - Date.now()))))
    .then(() => {
      if (run.status.phase === 'pushing' || run.status.endedAt !== undefined) return;
      expired = true;
      work.cancel();
    })
    .catch(() => undefined);
  try {
    return await work.run(steps);
  } catch (err) {
    if (!expired || !isCancellation(err)) throw err;
    // A gate the deadline closed is no longer open to a decision.
    run.status.gate = undefined;
    setCurrentDetails('');
    // Past a push (the review phase), the run ends with what it pushed: that push stands, and
    // with land: pr so does the pull request it opened.
    const pushed = run.result.pushedSha;
    const outcome = run.result.pullRequest ? 'pr-opened' : 'pushed';
    if (pushed) return run.succeed(outcome, reviewEndedReason(minutes, pushed, run.result.targetRef));
    return run.fail('run-timeout', deadlineReason(minutes));
  } finally {
    timer.cancel();
    await ticking;
  }
}
