/** Checkpoints of a running agent's work in progress (see src/git/checkpoint.ts). */
import { Context } from '@temporalio/activity';
import { type CheckpointMark, importCheckpoint, restoreCheckpoint, writeCheckpoint } from '../git/checkpoint';
import { type ActivityDeps, type SandboxRef, openWorkspace } from './deps';

export interface CheckpointInput {
  sandbox: SandboxRef;
  runKey: string;
  workerId: string;
  /** What the workspace was seeded with (the base, or a redo's seed): the bundle leaves it out. */
  baseSha: string;
  /**
   * The last checkpoint, the one the workflow holds: when the workspace still matches it, nothing
   * new is made; it is kept when a new one replaces the others.
   */
  previous?: CheckpointMark;
}

export function checkpointActivities(deps: ActivityDeps) {
  return {
    /** Saves the workspace as a WIP commit in the staging repository; returns it, or `previous` when nothing changed. */
    async checkpointWork(input: CheckpointInput): Promise<CheckpointMark> {
      const ws = await openWorkspace(deps, input.sandbox);
      const written = await writeCheckpoint(ws, input);
      if ('unchanged' in written) return written.unchanged;
      const mark = await importCheckpoint(ws, await deps.staging(input.runKey), input, written);
      if (mark.skipped) Context.current().log.warn(`checkpoint of ${input.workerId}: ${mark.skipped}`);
      return mark;
    },

    /**
     * Puts a checkpoint into a freshly seeded workspace: `branch` at the agent's HEAD of then,
     * and the working tree as it was, its uncommitted changes unstaged again.
     */
    async restoreCheckpoint(input: {
      sandbox: SandboxRef;
      runKey: string;
      workerId: string;
      baseSha: string;
      sha: string;
      branch: string;
    }): Promise<void> {
      const ws = await openWorkspace(deps, input.sandbox);
      await restoreCheckpoint(ws, await deps.staging(input.runKey), input);
    },
  };
}
