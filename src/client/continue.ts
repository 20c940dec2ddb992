/**
 * `flotilla continue`: a new run with a failed run's request and plan, which reuses what that run
 * integrated and every finished sub-task's verified commits (the new run checks them on the host),
 * and runs only what failed or never ran.
 */
import type { Client, WorkflowHandle } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import { planPartQuery, planQuery } from '../contracts/messages';
import { planOf } from '../contracts/plan-parts';
import { type LeaderRequest, parseLeaderRequest } from '../contracts/request';
import type { leaderWorkflow } from '../workflows/leader/leader';
import type { LeaderInput } from '../contracts/rollover';
import { awaitRun } from './result';
import { startRun } from './start';

/** The run cannot be continued: it runs still, pushed, or never had a request. */
export class ContinueRefused extends Error {
  name = 'ContinueRefused';
}

/** How long the failed run's plan query may take (a worker replays the closed run to answer it). */
const PLAN_QUERY_MS = 15_000;

/** The request that continues run `runId`: its request, its plan as it stood, and `continues`. */
export async function continuationOf(client: Client, runId: string): Promise<LeaderRequest> {
  const handle = client.workflow.getHandle(runId);
  const described = await handle.describe();
  if (described.status.name === 'RUNNING')
    throw new ContinueRefused(`run ${runId} is still running; continue it once it has ended`);
  const end = await awaitRun(handle);
  const outcome = end.result?.outcome;
  if (end.result && (outcome === 'pushed' || outcome === 'unchanged' || outcome === 'pr-opened'))
    throw new ContinueRefused(`run ${runId} ended ${end.result.outcome}; there is nothing to continue`);
  const { planParts, ...request } = await startInput(client, runId, described.runId);
  // The plan with its amendments and replans; runs from before the living plan have no such query.
  const asked = <T>(query: () => Promise<T>) =>
    client.connection.withDeadline(Date.now() + PLAN_QUERY_MS, query).catch(() => undefined);
  const plan = await asked(() => handle.query(planQuery));
  // A plan sent in parts is the run's, part by part, when its plan query does not answer.
  const parts =
    !plan && planParts
      ? await client.connection.withDeadline(Date.now() + PLAN_QUERY_MS, () => partsOfRun(handle, planParts.length))
      : undefined;
  const subTasks = plan?.subTasks ?? parts;
  return parseLeaderRequest({ ...request, ...(subTasks && { subTasks }), continues: { runId } });
}

async function partsOfRun(handle: WorkflowHandle, count: number): Promise<unknown[]> {
  const texts = await Promise.all(Array.from({ length: count }, (_, part) => handle.query(planPartQuery, part)));
  const missing = texts.findIndex((t) => t === null);
  if (missing >= 0) throw new ContinueRefused(`${handle.workflowId} never received part ${missing} of its plan`);
  return planOf(texts as string[]);
}

/** Starts the run that continues `runId`. */
export async function continueRun(
  client: Client,
  runId: string,
  opts: { taskQueue: string; workflowId?: string },
): Promise<WorkflowHandle<typeof leaderWorkflow>> {
  return startRun(client, await continuationOf(client, runId), opts);
}

/** The request a run was started with: the input of its history's first event. */
async function startInput(client: Client, workflowId: string, runId: string): Promise<LeaderInput> {
  const input = await startedWith(client, workflowId, runId);
  if (!input) throw new ContinueRefused(`run ${workflowId} has no request to continue from`);
  return input;
}

/** The input a run was started with, as its history's first event holds it (undefined without one). */
export async function startedWith(client: Client, workflowId: string, runId: string): Promise<LeaderInput | undefined> {
  const page = await client.workflowService.getWorkflowExecutionHistory({
    namespace: client.options.namespace,
    execution: { workflowId, runId },
    maximumPageSize: 1,
  });
  const payload = page.history?.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
  if (!payload) return undefined;
  // A run that rolled over was started with its request and what the run before it carried: the request alone.
  const { rollover: _carried, ...request } = defaultPayloadConverter.fromPayload(payload) as LeaderInput;
  return request;
}
