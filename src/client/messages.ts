/** Steering a run: each message is an Update, which the run accepts with an answer or refuses with a reason. */
import { type Client, type WorkflowHandle, WorkflowUpdateFailedError } from '@temporalio/client';
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
} from '../contracts/messages';

/** A message the run refused: the reason is the workflow's own words. */
export class MessageRefused extends Error {
  constructor(readonly reason: string) {
    super(`refused: ${reason}`);
    this.name = 'MessageRefused';
  }
}

/** Sends an update and returns the run's answer; a refusal becomes MessageRefused with its reason. */
async function ask(client: Client, runId: string, send: (h: WorkflowHandle) => Promise<string>): Promise<string> {
  try {
    return await send(client.workflow.getHandle(runId));
  } catch (err) {
    if (err instanceof WorkflowUpdateFailedError && err.cause instanceof ApplicationFailure)
      throw new MessageRefused(err.cause.message);
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
