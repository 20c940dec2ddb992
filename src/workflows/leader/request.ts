/** The run's request, validated and defaulted once, in a way that replays the same on any later release. */
import { ActivityFailure, ApplicationFailure, patched, proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../../activities';
import { permanent } from '../../contracts/failures';
import type { ParsedHead } from '../../activities/request';
import {
  type LeaderRequest,
  RequestError,
  type SubTask,
  currentLimits,
  parseLeaderRequest,
} from '../../contracts/request';
import type { LeaderInput } from '../../contracts/rollover';
import { PATCHES } from '../patches';
import type { PlanParts } from './plan-parts';

/**
 * The request, validated and defaulted by an activity whose result is in history, so that a later
 * release's schema cannot change a run in flight. Runs started before that parse it here, as
 * they did then. A refused request ends the run with the refusal itself.
 *
 * A plan sent in parts (`parts`) is first gathered: from the planPart signals, or, in a run that
 * continues one that rolled over (`from`), from that run; its parsed sub-tasks come back a page
 * at a time, so that no event holds the whole plan.
 */
export async function parseRequest(input: LeaderInput, parts?: PlanParts, from?: string): Promise<LeaderRequest> {
  if (!patched(PATCHES.requestParsedByActivity.id)) {
    try {
      return parseLeaderRequest(input);
    } catch (err) {
      if (err instanceof RequestError) throw permanent('InvalidRequest', err.message, { problems: err.problems });
      throw err;
    }
  }
  if (parts && from) await parts.readBack(async (part) => (await readPart(from, part)).text);
  else if (parts) await parts.gather();
  try {
    // A request parsed by an older release, in this run's history, has the limits' old names.
    const got = await parse(input);
    const req = 'planPages' in got ? await withPlanPages(input, got) : got;
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

const {
  parseRequest: parse,
  parsedPlanPage,
  rolledOverPage,
} = proxyActivities<Activities>({
  startToCloseTimeout: '1 minute',
  scheduleToCloseTimeout: '10 minutes',
});

function readPart(from: string, part: number) {
  const summary = `read back part ${part} of the plan of run ${from}`;
  const input = { runId: from, kind: 'planPart' as const, page: part + 1, handedOver: true };
  return rolledOverPage.executeWithOptions({ summary }, [input]);
}

/** The parsed request of a plan in parts, its sub-tasks read a page at a time. */
async function withPlanPages(input: LeaderInput, head: ParsedHead): Promise<LeaderRequest> {
  const { planPages, ...req } = head;
  let json = '';
  for (let page = 1; page <= planPages; page++) {
    const summary = `the parsed plan, page ${page} of ${planPages}`;
    json += await parsedPlanPage.executeWithOptions({ summary }, [{ request: input, page }]);
  }
  return { ...req, subTasks: JSON.parse(json) as SubTask[] };
}
