/**
 * The failures Flotilla raises on purpose, by type. A deterministic failure (the same input
 * fails the same way on every attempt) is non-retryable: retrying it only delays the one-line
 * reason a person needs. Everything else (a dead process, a network blip) stays retryable.
 *
 * Pure: imported by workflows and activities alike.
 */
import { ApplicationFailure } from '@temporalio/common';

/**
 * Every failure type, with what it means. The type is what `flotilla result`, the status and
 * the Web UI show beside the message.
 */
export const FAILURE_TYPES = {
  /** The request (or a planner's plan) breaks the schema or a rule; nothing started. */
  InvalidRequest: 'the request is invalid',
  /** A sandbox the run needs is gone (destroyed, or its host lost it). */
  SandboxMissing: 'a sandbox is missing',
  /** Isolation is not available and the worker was not started with an explicit opt-out. */
  IsolationUnavailable: 'sandbox isolation is not available',
  /** The worker lacks an agent's CLI or its credentials; nothing started. */
  AgentUnavailable: 'an agent cannot run on this worker',
  /** An oracle file would reach an agent, a commit or the push. */
  OracleExposed: 'an oracle file would be exposed',
  /** Imported commits do not descend from the base, or bring unrelated history. */
  LineageBroken: 'the commits do not descend from the base',
  /** Imported commits change paths outside what the sub-task may change. */
  OutOfScope: 'changes outside the allowed paths',
  /** A file, a change or a workspace is over a configured size or count limit. */
  TooLarge: 'over a size or count limit',
  /** A commit holds something the policy refuses (a symlink out of the repository, a submodule). */
  PolicyViolation: 'refused by the repository policy',
  /** Imported commits hold the value of a secret the worker holds (an API key, the git token). */
  SecretExposed: 'a commit holds a secret of the worker',
  /** Objects that fail git's integrity check, or that a bundle names without carrying them. */
  CorruptObjects: 'corrupt git objects',
  /** The repository or a ref cannot be used as configured (missing branch, refused host). */
  RemoteRefused: 'the remote refused',
  /** The forge (GitHub) refused a call no retry can fix: a missing repository or PR, a token it refuses, a validation error. */
  ForgeRefused: 'the forge refused',
  /** A sandbox ran out of a resource (memory, processes, /tmp, disk) and was stopped. */
  ResourceLimit: 'a sandbox hit a resource limit',
  /** The hosts holding a sandbox were lost more often than a workflow re-provisions it. */
  HostLost: 'the host holding a sandbox was lost',
  /** A log the run names is on no host and not in the shared store (pruned, or the store was replaced). */
  ArtifactMissing: 'an artifact is gone',
  /** A message (approve, reject, pause, resume) the run refuses: a bad payload, a closed gate, an unknown sub-task. */
  MessageRefused: 'the run refused the message',
  /** A notification that no retry can deliver: its URL variable is unset, or its URL is refused. */
  Undeliverable: 'a notification cannot be delivered',
} as const;

export type FailureType = keyof typeof FAILURE_TYPES;

/** A failure that no retry can fix, with a message a person understands in one line. */
export function permanent(type: FailureType, message: string, ...details: unknown[]): ApplicationFailure {
  return ApplicationFailure.create({
    type,
    message,
    nonRetryable: true,
    details: details.length ? details : undefined,
  });
}

/** True when `err` is one of ours of the given type (after crossing an activity boundary too). */
export function isFailure(err: unknown, type: FailureType): boolean {
  let e: unknown = err;
  while (e instanceof Error) {
    if (e instanceof ApplicationFailure && e.type === type) return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/** The innermost cause's message: what went wrong, rather than "Activity task failed" around it. */
export function rootMessage(err: unknown): string {
  let e: unknown = err;
  let message = String(err);
  while (e instanceof Error) {
    if (e.message) message = e.message;
    e = (e as { cause?: unknown }).cause;
  }
  return message;
}
