/**
 * What a running agent's output last showed, per sandbox, for the checkpoints of the same host
 * to report beside the workspace: a stalled agent is one whose workspace and output both stay
 * the same (limits.stallCheckpoints). Held in the worker process that runs the agent; a
 * checkpoint taken by another process finds nothing, and nothing found never counts as stalled.
 */
import { createHash } from 'node:crypto';
import type { AgentProgress } from '../agents/types';

const latest = new Map<string, string>();

/** A short fingerprint of the agent's progress: it changes when the agent shows anything new. */
export function progressMark(progress: AgentProgress): string {
  const { turns, toolCalls, costUsd, sessionId, lastEvent } = progress;
  return createHash('sha256')
    .update(JSON.stringify([turns, toolCalls, costUsd, sessionId ?? '', lastEvent ?? '']))
    .digest('hex')
    .slice(0, 16);
}

/** The agent in sandbox `key` shows `progress` now. */
export function noteOutput(key: string, progress: AgentProgress): void {
  latest.set(key, progressMark(progress));
}

/** The agent in sandbox `key` has ended: nothing it showed describes the sandbox any longer. */
export function forgetOutput(key: string): void {
  latest.delete(key);
}

/** The fingerprint of what the agent in sandbox `key` last showed, if this process runs it. */
export function outputMark(key: string): string | undefined {
  return latest.get(key);
}
