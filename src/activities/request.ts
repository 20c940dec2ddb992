/** The request, parsed and defaulted outside the workflow. */
import { Context } from '@temporalio/activity';
import { permanent } from '../contracts/failures';
import { planPartQuery } from '../contracts/messages';
import { PART_BYTES, digestOf, planOf } from '../contracts/plan-parts';
import { type LeaderRequest, RequestError, parseLeaderRequest } from '../contracts/request';
import { pieces } from '../contracts/text';

/** A request whose plan was sent in parts, parsed: its sub-tasks come a page at a time (parsedPlanPage). */
export type ParsedHead = Omit<LeaderRequest, 'subTasks'> & { planPages: number };

export function requestActivities() {
  return {
    /**
     * Validates a run's request and fills in its defaults. Its result is in the run's history,
     * so a later release's schema (a new default, a stricter rule) cannot change a run in flight
     * when it replays. A request whose plan came in parts (planParts) is validated whole, the
     * parts read from the run itself; its result leaves the sub-tasks out, to be read by page.
     */
    async parseRequest(input: unknown): Promise<LeaderRequest | ParsedHead> {
      if (!hasParts(input)) return parsed(input);
      const { subTasks, ...head } = parsed(await withPlan(input));
      return { ...head, planPages: pieces(JSON.stringify(subTasks), PART_BYTES).length };
    },

    /** A page (1-based) of the parsed sub-tasks' JSON of a request whose plan came in parts. */
    async parsedPlanPage(input: { request: unknown; page: number }): Promise<string> {
      const { subTasks } = parsed(await withPlan(input.request));
      const page = pieces(JSON.stringify(subTasks), PART_BYTES)[input.page - 1];
      if (page === undefined) throw permanent('InvalidRequest', `parsedPlanPage: the plan has no page ${input.page}`);
      return page;
    },
  };
}

function parsed(input: unknown): LeaderRequest {
  try {
    return parseLeaderRequest(input);
  } catch (err) {
    if (err instanceof RequestError) throw permanent('InvalidRequest', err.message, { problems: err.problems });
    throw err;
  }
}

function hasParts(input: unknown): input is { planParts: string[] } {
  return input !== null && typeof input === 'object' && Array.isArray((input as { planParts?: unknown }).planParts);
}

/**
 * The request with its sub-tasks, as the run's own `planPart` query holds the parts: each checked
 * again against its digest here, on the host, whatever the workflow took.
 */
async function withPlan(input: unknown): Promise<unknown> {
  if (!hasParts(input)) return input;
  const { planParts, ...head } = input;
  const { client, info } = Context.current();
  const run = info.workflowExecution;
  if (!run) throw permanent('InvalidRequest', 'planParts: a plan in parts is read from the run that parses it');
  const handle = client.workflow.getHandle(run.workflowId, run.runId);
  const texts = await Promise.all(planParts.map((_, part) => handle.query(planPartQuery, part)));
  texts.forEach((text, i) => {
    if (text === null || digestOf(text) !== planParts[i])
      throw permanent('InvalidRequest', `planParts[${i}]: the run does not hold that part`);
  });
  try {
    return { ...head, subTasks: planOf(texts as string[]) };
  } catch (err) {
    throw permanent('InvalidRequest', err instanceof Error ? err.message : String(err));
  }
}
