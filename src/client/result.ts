/** How a run ended, pushed or not, in the shape a script needs. */
import { WorkflowFailedError, type WorkflowHandle } from '@temporalio/client';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import type { RunResult } from '../contracts/reports';

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
  try {
    return { workflowId: handle.workflowId, result: (await handle.result()) as RunResult };
  } catch (err) {
    if (err instanceof WorkflowFailedError) return failedEnd(handle.workflowId, err);
    throw err;
  }
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
