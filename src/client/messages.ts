/** Steering a run: each message is an Update, which the run accepts with an answer or refuses with a reason. */
import { type Client, type WorkflowHandle, WorkflowUpdateFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import {
  type ApproveInput,
  type PauseInput,
  type RejectInput,
  type ResumeInput,
  approveUpdate,
  pauseUpdate,
  rejectUpdate,
  resumeUpdate,
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
