/** Steering a run: each message is an Update, which the run accepts with an answer or refuses with a reason. */
import { type Client, type WorkflowHandle, WorkflowNotFoundError, WorkflowUpdateFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import {
  type AddSubTaskInput,
  type ApproveInput,
  type CancelSubTaskInput,
  type PauseInput,
  type RejectInput,
  type ResumeInput,
  type RetrySubTaskInput,
  addSubTaskUpdate,
  approveUpdate,
  cancelSubTaskUpdate,
  pauseUpdate,
  rejectUpdate,
  resumeUpdate,
  retrySubTaskUpdate,
  finishUpdate,
  reviseUpdate,
} from '../contracts/messages';
import type { FinishInput, ReviseInput } from '../contracts/review';
import { awaitRun } from './result';

/** A message the run refused: the reason is the workflow's own words. */
export class MessageRefused extends Error {
  constructor(readonly reason: string) {
    super(`refused: ${reason}`);
    this.name = 'MessageRefused';
  }
}

/** The run has ended, so no message reaches it; `how` says how it ended. */
export class RunEnded extends Error {
  constructor(
    readonly runId: string,
    readonly how: string,
  ) {
    super(`run ${runId} has ended (${how})`);
    this.name = 'RunEnded';
  }
}

/**
 * How run `runId` ended ("rejected: alice rejected the plan gate: too broad", "cancelled"), or
 * undefined while it runs. Throws WorkflowNotFoundError when there is no such run.
 */
export async function endedAs(client: Client, runId: string): Promise<string | undefined> {
  const handle = client.workflow.getHandle(runId);
  const { status } = await handle.describe();
  if (status.name === 'RUNNING') return undefined;
  if (status.name !== 'COMPLETED' && status.name !== 'FAILED') return status.name.toLowerCase().replace(/_/g, ' ');
  const end = await awaitRun(handle);
  return end.failureType
    ? `${end.failureType}: ${end.failureMessage}`
    : `${end.result?.outcome}: ${end.result?.message}`;
}

/**
 * Sends an update and returns the run's answer; a refusal becomes MessageRefused with its
 * reason, and a run that has ended (the server knows no running one by that id) RunEnded.
 */
async function ask(client: Client, runId: string, send: (h: WorkflowHandle) => Promise<string>): Promise<string> {
  try {
    return await send(client.workflow.getHandle(runId));
  } catch (err) {
    if (err instanceof WorkflowUpdateFailedError && err.cause instanceof ApplicationFailure)
      throw new MessageRefused(err.cause.message);
    const how = err instanceof WorkflowNotFoundError && (await endedAs(client, runId).catch(() => undefined));
    if (how) throw new RunEnded(runId, how);
    throw err;
  }
}

/** Passes the open gate; the answer says what was done. Throws MessageRefused with the reason. */
export function approve(client: Client, runId: string, input: ApproveInput): Promise<string> {
  return ask(client, runId, (h) => h.executeUpdate(approveUpdate, { args: [input] }));
}

export function reject(client: Client, runId: string, input: RejectInput): Promise<string> {
  return ask(client, runId, (h) => h.executeUpdate(rejectUpdate, { args: [input] }));
}

/** Pauses a sub-task; returns once it is suspended (or has ended), or at once for one not started yet. */
export function pause(client: Client, runId: string, input: PauseInput): Promise<string> {
  return ask(client, runId, (h) => h.executeUpdate(pauseUpdate, { args: [input] }));
}

/** Resumes a suspended sub-task; returns once it runs again (or has ended). */
export function resume(client: Client, runId: string, input: ResumeInput): Promise<string> {
  return ask(client, runId, (h) => h.executeUpdate(resumeUpdate, { args: [input] }));
}

/** Adds a sub-task to a running plan; the answer says what it waits for. Refused (MessageRefused) like a request would be. */
export function addSubTask(client: Client, runId: string, input: AddSubTaskInput): Promise<string> {
  return ask(client, runId, (h) => h.executeUpdate(addSubTaskUpdate, { args: [input] }));
}

/** Cancels a queued or running sub-task; returns once its agent is stopped and its sandbox destroyed. */
export function cancelSubTask(client: Client, runId: string, input: CancelSubTaskInput): Promise<string> {
  return ask(client, runId, (h) => h.executeUpdate(cancelSubTaskUpdate, { args: [input] }));
}

/** Tries a failed sub-task again from the integration head, its agent told why it failed and `message`. */
export function retrySubTask(client: Client, runId: string, input: RetrySubTaskInput): Promise<string> {
  return ask(client, runId, (h) => h.executeUpdate(retrySubTaskUpdate, { args: [input] }));
}

/** Starts a review round with comments (the run's review phase); the answer names the sub-tasks they go to. */
export function revise(client: Client, runId: string, input: ReviseInput): Promise<string> {
  return ask(client, runId, (h) => h.executeUpdate(reviseUpdate, { args: [input] }));
}

/** Ends the review phase: the run ends with its last push. */
export function finish(client: Client, runId: string, input: FinishInput): Promise<string> {
  return ask(client, runId, (h) => h.executeUpdate(finishUpdate, { args: [input] }));
}
