/** How a run ended, pushed or not, in the shape a script needs. */
import { WorkflowFailedError, type WorkflowHandle } from '@temporalio/client';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { reportsQuery } from '../contracts/messages';
import type { RunResult, SubTaskReport } from '../contracts/reports';

export interface RunEnd {
  workflowId: string;
  /** The RunResult, whether the run pushed or ended as a failure carrying it. */
  result?: RunResult;
  /** Why it did not push: the failure type ("conflict", "InvalidRequest", ...) and message. */
  failureType?: string;
  failureMessage?: string;
}

/** Waits for a run to end and returns what a user needs of it, pushed or not. */
export async function awaitRun(handle: WorkflowHandle): Promise<RunEnd> {
  let end: RunEnd;
  try {
    end = { workflowId: handle.workflowId, result: (await handle.result()) as RunResult };
  } catch (err) {
    if (err instanceof WorkflowFailedError) end = failedEnd(handle.workflowId, err);
    else throw err;
  }
  if (end.result?.workersOmitted) end.result = await withEveryReport(handle, end.result);
  return end;
}

/**
 * A result of more reports than it carries (workersOmitted), with every report read back from the
 * run's reports query, a page at a time. The query replays the closed run on a worker: without
 * one, the result stays as it came, saying how many it left out.
 */
export async function withEveryReport(handle: WorkflowHandle, result: RunResult): Promise<RunResult> {
  const workers: SubTaskReport[] = [];
  try {
    for (let page = 1, pages = 1; page <= pages; page++) {
      const got = await handle.query(reportsQuery, { page });
      workers.push(...got.reports);
      pages = got.pages;
    }
  } catch {
    return result;
  }
  if (workers.length !== result.workersOmitted!.total) return result;
  const { workersOmitted: _omitted, ...whole } = result;
  return { ...whole, workers };
}

function failedEnd(workflowId: string, err: WorkflowFailedError): RunEnd {
  const cause = err.cause;
  if (cause instanceof CancelledFailure) {
    return { workflowId, failureType: 'cancelled', failureMessage: 'the run was cancelled; nothing was pushed' };
  }
  if (cause instanceof ApplicationFailure) {
    return {
      workflowId,
      failureType: cause.type ?? undefined,
      failureMessage: cause.message,
      result: asRunResult(cause.details?.[0]),
    };
  }
  return { workflowId, failureType: cause?.name ?? 'failed', failureMessage: cause?.message ?? err.message };
}

/** The failure's details are a RunResult only when the run got far enough to have one (not for a refused request). */
function asRunResult(details: unknown): RunResult | undefined {
  const r = details as Partial<RunResult> | undefined;
  return r && typeof r === 'object' && Array.isArray(r.workers) && typeof r.outcome === 'string'
    ? (r as RunResult)
    : undefined;
}
