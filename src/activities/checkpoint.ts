/** Checkpoints of a running agent's work in progress (see src/git/checkpoint.ts), and what they show of it. */
import { Context } from '@temporalio/activity';
import { NOTICES_FILE } from '../agents/protocol';
import { type CheckpointMark, importCheckpoint, restoreCheckpoint, writeCheckpoint } from '../git/checkpoint';
import { revertPaths } from '../git/revert';
import { type ScopeFindings, scopeOf } from '../git/scope';
import { type Workspace, sh } from '../git/workspace';
import { revertNotice } from '../contracts/early-stops';
import { type ActivityDeps, type SandboxRef, openWorkspace } from './deps';
import { outputMark } from './output-progress';

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
  /** The paths the sub-task may change: given, the checkpoint's changes are checked against them. */
  allowedPaths?: string[];
}

/** A checkpoint and, when its input asked, what it shows of the running agent. */
export interface CheckpointSeen extends CheckpointMark {
  /** The checkpoint's changes outside the allowed paths (only with allowedPaths). */
  scope?: ScopeFindings;
  /** A fingerprint of the agent's output progress at the checkpoint, when this worker process runs the agent. */
  output?: string;
}

/** Paths one revert undoes at most; the next checkpoint finds any left. */
const MAX_REVERTED_PATHS = 1000;

/** Appends `notice` to the agent's notices file (protocol.ts), where a running shell agent reads it. */
async function tell(ws: Workspace, notice: string): Promise<void> {
  const file = `${ws.sb.scratch}/${NOTICES_FILE}`;
  const part = `${ws.sb.scratch}/notice.part`;
  await ws.sb.writeFile(part, `${notice}\n\n`);
  await ws.script(`cat ${sh(part)} >> ${sh(file)} && rm -f ${sh(part)}`, 'telling the agent', { beside: true });
}

export function checkpointActivities(deps: ActivityDeps) {
  return {
    /** Saves the workspace as a WIP commit in the staging repository; returns it, or `previous` when nothing changed. */
    async checkpointWork(input: CheckpointInput): Promise<CheckpointSeen> {
      const ws = await openWorkspace(deps, input.sandbox);
      const output = outputMark(input.sandbox.key);
      const written = await writeCheckpoint(ws, input);
      const staging = await deps.staging(input.runKey);
      let mark: CheckpointMark;
      if ('unchanged' in written) mark = written.unchanged;
      else {
        mark = await importCheckpoint(ws, staging, input, written);
        if (mark.skipped) Context.current().log.warn(`checkpoint of ${input.workerId}: ${mark.skipped}`);
      }
      const { allowedPaths, baseSha } = input;
      if (!allowedPaths) return mark;
      const { paths: _, ...scope } = await scopeOf(staging, { baseSha, headSha: mark.sha, allowedPaths });
      return { ...mark, scope, ...(output && { output }) };
    },

    /**
     * Undoes, in the workspace, the changes of checkpoint `sha` outside `allowedPaths` (computed
     * here, in staging), and appends the agent's notice of it to its notices file. Returns what
     * it reverted. Safe to repeat (a second notice says the same again).
     */
    async revertOutOfScope(input: {
      sandbox: SandboxRef;
      runKey: string;
      baseSha: string;
      sha: string;
      allowedPaths: string[];
    }): Promise<ScopeFindings> {
      const ws = await openWorkspace(deps, input.sandbox);
      const staging = await deps.staging(input.runKey);
      const { paths, ...found } = await scopeOf(staging, { ...input, headSha: input.sha }, MAX_REVERTED_PATHS);
      await revertPaths(ws, { baseSha: input.baseSha, paths });
      if (found.outOfScopeCount > 0) await tell(ws, revertNotice(found, input.allowedPaths));
      return found;
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
