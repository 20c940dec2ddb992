/**
 * Checkpoints of work in progress: while an agent runs, its workspace is saved now and then as a
 * WIP commit in the staging repository, so a sandbox whose host is lost is moved to another host
 * from there instead of from the start.
 *
 * A checkpoint is taken beside a running agent, so it leaves the agent's repository as it is:
 * the WIP commit is written through an index of its own (never .git/index), by commit-tree
 * (never moving HEAD or a branch), with the agent's HEAD as its parent. What git cannot take
 * (FIFOs, sockets, devices) and nested repositories are left out, and the checkpoint says so.
 *
 * The workspace is hostile, and a checkpoint goes back into a sandbox: it is imported like any
 * commits from a sandbox (import.ts: every object from its own bundle, none of another run's, no
 * secret of the worker's), must descend from the commit the sandbox was seeded with, and is
 * bounded (MAX_CHECKPOINT_BYTES each, MAX_RUN_CHECKPOINT_BYTES and MAX_RUN_CHECKPOINTS for a run
 * on one host). Nothing checks its scope: it only ever goes back to a sandbox of the same
 * sub-task, and what that sub-task finally hands over is checked by collectWork like any work.
 *
 * Each checkpoint's pack is recorded (checkpoint-packs.ts): a new checkpoint removes the packs of
 * the ones it supersedes, and the sub-task's end removes them all, so checkpoints never pile up
 * in the staging repository.
 */
import { stat } from 'node:fs/promises';
import { bundleScript, checkImportSize } from './bundles';
import { CheckpointPacks } from './checkpoint-packs';
import { SharedStoreError } from './shared-store';
import { type StagingRepo, runRef } from './staging';
import { type Workspace, sh } from './workspace';

/** Bytes one checkpoint's pack may take. */
export const MAX_CHECKPOINT_BYTES = 256 * 1024 * 1024;

/** A checkpoint as the workflow keeps it: the WIP commit, what it was made of, and when. */
export interface CheckpointMark {
  sha: string;
  tree: string;
  parent: string;
  at: number;
  /** What the checkpoint left out of the workspace, in words (special files, nested repositories). */
  skipped?: string;
}

/** The staging ref holding a sub-task's latest checkpoint. */
export function checkpointRef(runKey: string, workerId: string): string {
  return runRef(runKey, `checkpoints/${workerId}`);
}

const FIELD = /^(TREE|PARENT|SIZE|SKIPPED) ([0-9a-f]{40}|\d+)$/;
/** Skipped paths named in a checkpoint's report; the count says how many there were. */
const LISTED_SKIPS = 5;
/** Attempts at `git add` while the agent rewrites files under it. */
const ADD_ATTEMPTS = 3;

/**
 * The script that writes the WIP commit and its bundle. The same commit date for the same tree
 * and parent, so a retry makes the same commit. Beside a running agent: its .git/config is
 * neither rewritten (its git would read a half-written one) nor used. A scratch repository of
 * ours, with a config of its own and the agent's objects as alternates, does the work; new
 * objects go to the scratch.
 *
 * A file the agent rewrites while git reads it may kill git (a file mapped into memory that
 * shrinks is a bus error): files over 32 KiB are streamed, not mapped, every attempt starts from
 * a fresh index with no lock left, and `git add` is tried again.
 */
function checkpointScript(scratch: string, c: { workerId: string; baseSha: string; previous?: CheckpointMark }) {
  const at = (name: string) => sh(`${scratch}/checkpoint.${name}`);
  const [index, bundle, repo, skip, pathspecs] = ['index', 'bundle', 'git', 'skip', 'pathspecs'].map(at);
  const previous = c.previous ? `${c.previous.tree} ${c.previous.parent}` : '';
  return {
    bundle: `${scratch}/checkpoint.bundle`,
    body: `if [ -L .git ] || [ ! -d .git ]; then echo "the workspace's .git is not a directory" >&2; exit 90; fi
rm -rf ${index} ${at('index.lock')} ${bundle} ${repo} ${skip} ${pathspecs}
git init -q --bare ${repo}
git --git-dir=${repo} config core.bare false
echo "$PWD/.git/objects" > ${sh(`${scratch}/checkpoint.git/objects/info/alternates`)}
parent=$(git --git-dir=.git rev-parse --verify -q HEAD^{commit})
export GIT_DIR=${repo} GIT_WORK_TREE="$PWD" GIT_INDEX_FILE=${index}
find . -path ./.git -prune -o -name .git -printf '%h\\0' -prune -o ! -type f ! -type d ! -type l -printf '%p\\0' > ${skip}
{ printf '.\\0'; while IFS= read -r -d '' p; do printf ':(exclude,literal)%s\\0' "\${p#./}"; done < ${skip}; } > ${pathspecs}
for try in $(seq ${ADD_ATTEMPTS}); do
  rm -f ${index} ${at('index.lock')}
  git read-tree "$parent"
  if git -c core.bigFileThreshold=32k add -A --pathspec-from-file=${pathspecs} --pathspec-file-nul; then break; fi
  if [ "$try" = ${ADD_ATTEMPTS} ]; then exit 1; fi
done
tree=$(git write-tree)
rm -f ${index}
echo; echo "TREE $tree"; echo "PARENT $parent"; echo "SKIPPED $(tr -cd '\\0' < ${skip} | wc -c)"
head -z -n ${LISTED_SKIPS} ${skip} | while IFS= read -r -d '' p; do n="\${p#./}"; n="\${n//[$'\\n\\r']/ }"; printf 'SKIP %s\\n' "\${n:0:300}"; done
if [ "$tree $parent" = ${sh(previous)} ]; then exit 0; fi
wip=$(GIT_AUTHOR_DATE='@0 +0000' GIT_COMMITTER_DATE='@0 +0000' git -c user.name=Flotilla -c user.email=flotilla@localhost commit-tree "$tree" -p "$parent" -m ${sh(`flotilla: checkpoint of ${c.workerId}`)})
${bundleScript(`${scratch}/checkpoint.bundle`, c.baseSha, '"$wip"')}
echo "SIZE $(stat -c %s ${bundle})"`,
  };
}

/** A WIP commit written in the sandbox, not imported yet. */
export interface WrittenCheckpoint {
  bundle: string;
  tree: string;
  parent: string;
  skipped?: string;
}

/** "skipped 2 path(s) git cannot take: a.fifo, vendor/lib (special files and nested repositories)". */
function skippedPaths(out: string, count: number): string | undefined {
  if (count === 0) return undefined;
  const named = out
    .split('\n')
    .filter((line) => line.startsWith('SKIP '))
    .map((line) => line.slice(5));
  const more = count > named.length ? ` and ${count - named.length} more` : '';
  return `left out ${count} path(s) git cannot take or that are repositories of their own: ${named.join(', ')}${more}`;
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
  const skipped = skippedPaths(out, Number(fields.SKIPPED ?? 0));
  const previous = c.previous;
  if (previous && size === undefined && tree === previous.tree && parent === previous.parent)
    return { unchanged: { ...previous, skipped } };
  checkImportSize(Number(size), `the checkpoint of ${c.workerId}`, MAX_CHECKPOINT_BYTES);
  return { bundle, tree, parent, skipped };
}

/**
 * Imports a written checkpoint under the sub-task's checkpoint ref, replacing the one before; the
 * packs of every checkpoint of the sub-task but this one and `previous` (the one the workflow
 * holds) are removed. Tree and parent are read from the imported commit, not from the sandbox.
 */
export async function importCheckpoint(
  ws: Workspace,
  staging: StagingRepo,
  c: { runKey: string; workerId: string; baseSha: string; previous?: CheckpointMark },
  written: WrittenCheckpoint,
): Promise<CheckpointMark> {
  const what = `the checkpoint of ${c.workerId}`;
  const packs = new CheckpointPacks(staging.dir, c.runKey);
  const keep = c.previous?.sha;
  const imported = await staging.withBundleFile(async (file) => {
    await ws.sb.copyOut(written.bundle, file);
    const bytes = (await stat(file)).size;
    checkImportSize(bytes, what, MAX_CHECKPOINT_BYTES);
    await packs.checkRoom(c.workerId, keep, bytes, what);
    return staging.importBundle(file, checkpointRef(c.runKey, c.workerId), {
      what,
      seed: c.baseSha,
      descends: true,
      maxBytes: MAX_CHECKPOINT_BYTES,
    });
  });
  await packs.replace(c.workerId, imported, keep);
  const [tree, parent] = (await staging.raw(['log', '-1', '--format=%T %P', imported.head])).trim().split(' ');
  return { sha: imported.head, tree, parent, at: Date.now(), ...(written.skipped && { skipped: written.skipped }) };
}

/**
 * Puts a checkpoint into a freshly seeded workspace: `branch` at the agent's HEAD of then, and
 * the working tree as it was, its uncommitted changes unstaged again. A checkpoint this host does
 * not hold is fetched from the shared store (pulls leave checkpoints out: see SharedStore.pull).
 */
export async function restoreCheckpoint(
  ws: Workspace,
  staging: StagingRepo,
  c: { runKey: string; workerId: string; baseSha: string; sha: string; branch: string },
): Promise<void> {
  if (!(await staging.revParse(c.sha))) await staging.pullRef(checkpointRef(c.runKey, c.workerId));
  // A ref of this host's alone, at exactly that commit (a later checkpoint may have moved the
  // sub-task's), for as long as the bundle takes: then nothing but the checkpoint ref names it.
  const ref = runRef(c.runKey, `restores/${c.workerId}`);
  const bundle = `${ws.sb.scratch}/checkpoint.bundle`;
  await staging.withBundleFile(async (file) => {
    await staging.raw(['update-ref', ref, c.sha]);
    try {
      await staging.createBundle(file, ref, c.baseSha);
    } finally {
      await staging.raw(['update-ref', '-d', ref]);
    }
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

/**
 * The sub-task ended: its checkpoint ref goes, here and from the shared store, and its packs with
 * it. A store that cannot be reached keeps its copy (returned, in words) until `flotilla gc`.
 */
export async function dropCheckpoints(
  staging: StagingRepo,
  runKey: string,
  workerId: string,
): Promise<string | undefined> {
  const ref = checkpointRef(runKey, workerId);
  let left: string | undefined;
  await staging.deleteRefs([ref]).catch((err: unknown) => {
    if (!(err instanceof SharedStoreError)) throw err;
    left = `the shared store keeps ${ref}: ${err.message}`;
  });
  await new CheckpointPacks(staging.dir, runKey).drop(workerId);
  return left;
}
