/**
 * Checkpoints of work in progress: while an agent runs, its workspace is saved now and then as a
 * WIP commit in the staging repository, so a sandbox whose host is lost is moved to another host
 * from there instead of from the start.
 *
 * A checkpoint is taken beside a running agent, so it leaves the agent's repository as it is:
 * the WIP commit is written through an index of its own (never .git/index), by commit-tree
 * (never moving HEAD or a branch), with the agent's HEAD as its parent. The workspace is
 * hostile: the commit travels as a bundle that the staging repository imports with
 * `index-pack --strict` under the same size bound as any sub-task's commits. Nothing checks its
 * scope: it only ever goes back to a sandbox of the same sub-task, and what that sub-task finally
 * hands over is checked by collectWork like any other work.
 */
import { stat } from 'node:fs/promises';
import { BUNDLE_REF, checkImportSize } from './bundles';
import { type StagingRepo, runRef } from './staging';
import { type Workspace, sh } from './workspace';

/** A checkpoint as the workflow keeps it: the WIP commit, what it was made of, and when. */
export interface CheckpointMark {
  sha: string;
  tree: string;
  parent: string;
  at: number;
}

/** The staging ref holding a sub-task's latest checkpoint. */
export function checkpointRef(runKey: string, workerId: string): string {
  return runRef(runKey, `checkpoints/${workerId}`);
}

const FIELD = /^(TREE|PARENT|SIZE) ([0-9a-f]{40}|\d+)$/;

/**
 * The script that writes the WIP commit and its bundle. The same commit date for the same tree
 * and parent, so a retry makes the same commit. Beside a running agent: its .git/config is
 * neither rewritten (its git would read a half-written one) nor used. A scratch repository of
 * ours, with a config of its own and the agent's objects as alternates, does the work; new
 * objects go to the scratch.
 */
function checkpointScript(scratch: string, c: { workerId: string; baseSha: string; previous?: CheckpointMark }) {
  const index = `${scratch}/checkpoint.index`;
  const bundle = `${scratch}/checkpoint.bundle`;
  const repo = `${scratch}/checkpoint.git`;
  const previous = c.previous ? `${c.previous.tree} ${c.previous.parent}` : '';
  return {
    bundle,
    body: `if [ -L .git ] || [ ! -d .git ]; then echo "the workspace's .git is not a directory" >&2; exit 90; fi
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
if [ "$tree $parent" = ${sh(previous)} ]; then exit 0; fi
wip=$(GIT_AUTHOR_DATE='@0 +0000' GIT_COMMITTER_DATE='@0 +0000' git -c user.name=Flotilla -c user.email=flotilla@localhost commit-tree "$tree" -p "$parent" -m ${sh(`flotilla: checkpoint of ${c.workerId}`)})
git update-ref --no-deref ${BUNDLE_REF} "$wip"
git bundle create -q ${sh(bundle)} ${BUNDLE_REF} ^${sh(c.baseSha)}
echo "SIZE $(stat -c %s ${sh(bundle)})"`,
  };
}

/** A WIP commit written in the sandbox, not imported yet. */
export interface WrittenCheckpoint {
  bundle: string;
  tree: string;
  parent: string;
}

/**
 * Writes the workspace as a WIP commit and its bundle in the sandbox's scratch directory; returns
 * `previous` when the workspace still matches it (nothing is written then).
 */
export async function writeCheckpoint(
  ws: Workspace,
  c: { workerId: string; baseSha: string; previous?: CheckpointMark },
): Promise<WrittenCheckpoint | { unchanged: CheckpointMark }> {
  const { bundle, body } = checkpointScript(ws.sb.scratch, c);
  const out = await ws.script(body, 'checkpointing the workspace', { beside: true });
  const fields = Object.fromEntries(
    out.split('\n').flatMap((line) => {
      const m = FIELD.exec(line.trim());
      return m ? [[m[1], m[2]]] : [];
    }),
  );
  const { TREE: tree, PARENT: parent, SIZE: size } = fields;
  if (!tree || !parent) throw new Error(`checkpointing did not report the workspace's tree: ${out.slice(-300)}`);
  const previous = c.previous;
  if (previous && size === undefined && tree === previous.tree && parent === previous.parent)
    return { unchanged: previous };
  checkImportSize(Number(size));
  return { bundle, tree, parent };
}

/** Imports a written checkpoint under the sub-task's checkpoint ref (replacing the one before). */
export async function importCheckpoint(
  ws: Workspace,
  staging: StagingRepo,
  c: { runKey: string; workerId: string },
  written: WrittenCheckpoint,
): Promise<CheckpointMark> {
  const sha = await staging.withBundleFile(async (file) => {
    await ws.sb.copyOut(written.bundle, file);
    checkImportSize((await stat(file)).size);
    return staging.importBundle(file, checkpointRef(c.runKey, c.workerId));
  });
  return { sha, tree: written.tree, parent: written.parent, at: Date.now() };
}

/**
 * Puts a checkpoint into a freshly seeded workspace: `branch` at the agent's HEAD of then, and
 * the working tree as it was, its uncommitted changes unstaged again.
 */
export async function restoreCheckpoint(
  ws: Workspace,
  staging: StagingRepo,
  c: { runKey: string; workerId: string; baseSha: string; sha: string; branch: string },
): Promise<void> {
  // Its own ref at exactly that commit: a later checkpoint may have moved the sub-task's.
  const ref = runRef(c.runKey, `restores/${c.workerId}`);
  await staging.setRef(ref, c.sha);
  const bundle = `${ws.sb.scratch}/checkpoint.bundle`;
  await staging.withBundleFile(async (file) => {
    await staging.createBundle(file, ref, c.baseSha);
    await ws.sb.copyIn(file, bundle);
  });
  await ws.script(
    `git fetch -q ${sh(bundle)} ${sh(`+${ref}:refs/flotilla/checkpoint`)}
rm -f ${sh(bundle)}
git checkout -q -f -B ${sh(c.branch)} ${sh(c.sha)}
git reset -q HEAD~1`,
    'restoring the checkpoint',
  );
}
