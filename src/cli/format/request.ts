/** A request in a few words, for `validate` and `start`. */
import type { LeaderRequest } from '../../contracts/request';

export function requestSummary(req: LeaderRequest): string {
  return req.subTasks ? `${req.subTasks.length} sub-task(s)` : 'a planner agent splits the work';
}
