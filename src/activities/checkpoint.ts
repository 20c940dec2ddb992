/**
 * Checkpoints of work in progress: while an agent runs, its workspace is saved now and then as a
 * WIP commit in the staging store, so a sandbox whose host is lost is re-provisioned elsewhere
 * from there instead of from the start.
 *
 * A checkpoint is taken beside a running agent, so it leaves the agent's repository as it is:
 * the WIP commit is written through an index of its own (never .git/index), by commit-tree
 * (never moving HEAD or a branch), with the agent's HEAD as its parent. The workspace is
 * hostile: the commit travels as a bundle that the staging store imports with
 * `index-pack --strict` under the same size bound as any worker's commits. Nothing checks its
 * scope: it only ever goes back to a sandbox of the same worker, and what that worker finally
 * hands over is checked by collectWork like any other work.
 */
import { stat } from 'node:fs/promises';
import { BUNDLE_REF, checkImportSize } from '../git/bundles';
import { runRef } from '../git/staging';
import { type ActivityDeps, type SandboxRef, openSandbox } from './deps';
import { script, sh } from './exec';

export interface CheckpointInput {
  sandbox: SandboxRef;
  runKey: string;
  workerId: string;
  /** What the workspace was seeded with (the base, or a redo's seed): the bundle leaves it out. */
  baseSha: string;
  /** The last checkpoint: when the workspace still matches it, nothing new is made. */
  previous?: CheckpointMark;
}

/** A checkpoint as the workflow keeps it: the WIP commit, what it was made of, and when. */
export interface CheckpointMark {
  sha: string;
  tree: string;
  parent: string;
  at: number;
}

/** The staging ref holding a worker's latest checkpoint. */
export function checkpointRef(runKey: string, workerId: string): string {
  return runRef(runKey, `checkpoints/${workerId}`);
}

const FIELD = /^(TREE|PARENT|SIZE) ([0-9a-f]{40}|\d+)$/;

export function checkpointActivities(deps: ActivityDeps) {
  return {
    /** Saves the workspace as a WIP commit in the staging store; returns it, or `previous` when nothing changed. */
    async checkpointWork(input: CheckpointInput): Promise<CheckpointMark> {
      const sb = await openSandbox(deps, input.sandbox);
      const index = `${sb.scratch}/checkpoint.index`;
      const bundle = `${sb.scratch}/checkpoint.bundle`;
      const previous = input.previous;
      // The same commit date for the same tree and parent, so a retry makes the same commit.
      // Beside a running agent: its .git/config is neither rewritten (its git would read a
      // half-written one) nor used. A scratch repository of ours, with a config of its own and
      // the agent's objects as alternates, does the work; new objects go to the scratch.
      const repo = `${sb.scratch}/checkpoint.git`;
      const out = await script(
        sb,
        `if [ -L .git ] || [ ! -d .git ]; then echo "the workspace's .git is not a directory" >&2; exit 90; fi
rm -rf ${sh(index)} ${sh(bundle)} ${sh(repo)}
git init -q --bare ${sh(repo)}
git --git-dir=${sh(repo)} config core.bare false
echo "$PWD/.git/objects" > ${sh(`${repo}/objects/info/alternates`)}
parent=$(git --git-dir=.git rev-parse --verify -q HEAD^{commit})
export GIT_DIR=${sh(repo)} GIT_WORK_TREE="$PWD" GIT_INDEX_FILE=${sh(index)}
git read-tree "$parent"
git add -A
tree=$(git write-tree)
rm -f ${sh(index)}
echo; echo "TREE $tree"; echo "PARENT $parent"
if [ "$tree $parent" = ${sh(previous ? `${previous.tree} ${previous.parent}` : '')} ]; then exit 0; fi
wip=$(GIT_AUTHOR_DATE='@0 +0000' GIT_COMMITTER_DATE='@0 +0000' git -c user.name=Flotilla -c user.email=flotilla@localhost commit-tree "$tree" -p "$parent" -m ${sh(`flotilla: checkpoint of ${input.workerId}`)})
git update-ref --no-deref ${BUNDLE_REF} "$wip"
git bundle create -q ${sh(bundle)} ${BUNDLE_REF} ^${sh(input.baseSha)}
echo "SIZE $(stat -c %s ${sh(bundle)})"`,
        'checkpointing the workspace',
        5 * 60_000,
        true,
      );
      const fields = Object.fromEntries(
        out.split('\n').flatMap((line) => {
          const m = FIELD.exec(line.trim());
          return m ? [[m[1], m[2]]] : [];
        }),
      );
      const { TREE: tree, PARENT: parent, SIZE: size } = fields;
      if (!tree || !parent) throw new Error(`checkpointing did not report the workspace's tree: ${out.slice(-300)}`);
      if (previous && size === undefined && tree === previous.tree && parent === previous.parent) return previous;
      checkImportSize(Number(size));
      const staging = await deps.staging(input.runKey);
      const sha = await staging.withBundleFile(async (file) => {
        await sb.copyOut(bundle, file);
        checkImportSize((await stat(file)).size);
        return staging.importBundle(file, checkpointRef(input.runKey, input.workerId));
      });
      return { sha, tree, parent, at: Date.now() };
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
      const sb = await openSandbox(deps, input.sandbox);
      const staging = await deps.staging(input.runKey);
      // Its own ref at exactly that commit: a later checkpoint may have moved the worker's.
      const ref = runRef(input.runKey, `restores/${input.workerId}`);
      await staging.setRef(ref, input.sha);
      const bundle = `${sb.scratch}/checkpoint.bundle`;
      await staging.withBundleFile(async (file) => {
        await staging.createBundle(file, ref, input.baseSha);
        await sb.copyIn(file, bundle);
      });
      await script(
        sb,
        `git fetch -q ${sh(bundle)} ${sh(`+${ref}:refs/flotilla/checkpoint`)}
rm -f ${sh(bundle)}
git checkout -q -f -B ${sh(input.branch)} ${sh(input.sha)}
git reset -q HEAD~1`,
        'restoring the checkpoint',
      );
    },
  };
}
