/**
 * limits.autoResume: a sub-task suspended on its budget slice is resumed by the leader, with
 * another slice and no message, while the run's budget has room. Once it has none, the
 * suspension waits for a person as any other does, and the sub-task's status line says why.
 */
import { patched } from '@temporalio/workflow';
import { resumeSignal } from '../../contracts/messages';
import type { LeaderRequest } from '../../contracts/request';
import { PATCHES } from '../patches';
import type { Run } from './run';

/** Who a resume the run sent itself is from, as a person's name would be. */
export const AUTO_RESUME_BY = 'flotilla (limits.autoResume)';

/** Less than a cent left is no room: a slice that small would suspend again at once. */
const LEAST_ROOM_USD = 0.01;

/** Lets the inbox resume budget suspensions by itself, if the request asks for it. */
export function enableAutoResume(run: Run, req: LeaderRequest): void {
  const budget = req.limits.runBudgetUsd;
  // Asked only of runs that set it, so that every other run's commands stay as they were.
  if (!req.limits.autoResume || budget === undefined || !patched(PATCHES.runLimits.id)) return;
  const slices = new Map<string, number>();
  const usd = (n: number) => `$${n.toFixed(2)}`;
  run.crew.autoResume = async (line, sliceUsd) => {
    const spent = run.spent();
    const room = budget - spent;
    if (room < LEAST_ROOM_USD) {
      line.autoResume = `not resumed by itself: the run has spent ${usd(spent)} of its ${usd(budget)} (limits.runBudgetUsd); waiting for a person`;
      return;
    }
    const slice = (slices.get(line.id) ?? 1) + 1;
    slices.set(line.id, slice);
    line.autoResume = `resumed by itself: slice ${slice}, ${usd(spent)} of ${usd(budget)}`;
    const child = run.crew.children.get(line.id);
    const resume = { workerId: line.id, addBudgetUsd: Math.min(sliceUsd, room), by: AUTO_RESUME_BY };
    // A sub-task that ended meanwhile needs no resume.
    await child?.signal(resumeSignal, resume).catch(() => undefined);
  };
}
