/** The run's request, validated and defaulted once, in a way that replays the same on any later release. */
import { ActivityFailure, ApplicationFailure, patched, proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../../activities';
import { permanent } from '../../contracts/failures';
import {
  type LeaderRequest,
  type LeaderRequestInput,
  RequestError,
  currentLimits,
  parseLeaderRequest,
} from '../../contracts/request';
import { PATCHES } from '../patches';

/**
 * The request, validated and defaulted by an activity whose result is in history, so that a later
 * release's schema cannot change a run in flight. Runs started before that parse it here, as
 * they did then. A refused request ends the run with the refusal itself.
 */
export async function parseRequest(input: LeaderRequestInput): Promise<LeaderRequest> {
  if (!patched(PATCHES.requestParsedByActivity.id)) {
    try {
      return parseLeaderRequest(input);
    } catch (err) {
      if (err instanceof RequestError) throw permanent('InvalidRequest', err.message, { problems: err.problems });
      throw err;
    }
  }
  const { parseRequest: parse } = proxyActivities<Activities>({
    startToCloseTimeout: '1 minute',
    scheduleToCloseTimeout: '10 minutes',
  });
  try {
    // A request parsed by an older release, in this run's history, has the limits' old names.
    const req = await parse(input);
    return { ...req, limits: currentLimits(req.limits) };
  } catch (err) {
    if (
      err instanceof ActivityFailure &&
      err.cause instanceof ApplicationFailure &&
      err.cause.type === 'InvalidRequest'
    )
      throw err.cause;
    throw err;
  }
}
