/**
 * Collecting a sub-task's commits: whatever the agent left uncommitted is committed (so it is not
 * lost), the commits are bundled in the sandbox and imported into the staging repository, where
 * they are checked (lineage, policy, paths against the paths the sub-task may change). Nothing the
 * sandbox prints decides what is accepted: one that claims there are no commits only loses its own
 * work.
 */
import { stat } from 'node:fs/promises';
import { permanent } from '../contracts/failures';
import type { CommitPolicy } from '../contracts/request';
import { tail } from '../store/artifacts';
import { bundleScript, checkImportSize } from './bundles';
import { mountedObjects } from './run-mirror';
import { SEEDED_MARKER, lendObjects } from './seeding';
import { type StagingRepo, runRef } from './staging';
import { type VerifiedWork, verifyWork } from './verify';
import { type Workspace, scriptFailed, sh } from './workspace';

const EXIT_NO_COMMITS = 10;
const EXIT_TOO_BIG = 11;
const EXIT_NO_REPOSITORY = 12;

/** What a sub-task's commits are, as the staging repository sees them; `ref` is set when there are any. */
export interface CollectedWork extends VerifiedWork {
  ref?: string;
}

/** The report of a sub-task that made no commits. */
export function noCommits(baseSha: string): CollectedWork {
  return { headSha: baseSha, commits: 0, filesChanged: 0, outOfScope: [], outOfScopeCount: 0 };
}

interface WorkOf {
  sandboxKey: string;
  workerId: string;
  baseSha: string;
  policy: CommitPolicy;
}

/**
 * Commits what the agent left and bundles the commits since the base in the sandbox's scratch
 * directory; returns the bundle's path there, or undefined when there are no commits. A file over
 * the policy's size is refused here already, which only saves hashing a huge file just to refuse
 * it: the host decides (verifyWork).
 */
export async function bundleWork(ws: Workspace, dataDir: string, c: WorkOf): Promise<string | undefined> {
  const bundle = `${ws.sb.scratch}/work.bundle`;
  const base = sh(c.baseSha);
  // The agent's processes are gone by now, so an index.lock is stale (a git it killed).
  // The base's objects come through the run mirror, whatever the agent made of alternates.
  // Programs only where needed: a lock that is not there is not removed, nothing is committed
  // when nothing is left, and the bundle is made from the head's SHA without a ref for it.
  const r = await ws.run(
    `[ -d .git ] || exit ${EXIT_NO_REPOSITORY}
${lendObjects(ws.sb, mountedObjects(dataDir, c.sandboxKey))}
newer=(); if [ -f ${SEEDED_MARKER} ]; then newer=(-newer ${SEEDED_MARKER}); fi
big=$(find . -path ./.git -prune -o -type f -size +${c.policy.maxFileBytes}c "\${newer[@]}" -print -quit)
if [ -n "$big" ]; then echo; echo "BIG $(stat -c %s -- "$big") $big"; exit ${EXIT_TOO_BIG}; fi
if [ -e .git/index.lock ] || [ -L .git/index.lock ]; then rm -rf .git/index.lock; fi
git add -A
git diff --cached --quiet || git commit -q --no-verify -m ${sh(`flotilla: uncommitted work left by ${c.workerId}`)}
head=$(git rev-parse --verify HEAD^{commit})
if [ "$head" = ${base} ]; then exit ${EXIT_NO_COMMITS}; fi
${bundleScript(bundle, c.baseSha, '"$head"')}
echo; echo "SIZE $(stat -c %s ${sh(bundle)})"`,
  );
  const last = r.output.trimEnd().split('\n').pop() ?? '';
  if (r.exitCode === EXIT_NO_COMMITS) return undefined;
  if (r.exitCode === EXIT_TOO_BIG && last.startsWith('BIG ')) {
    const [, size, ...name] = last.split(' ');
    throw permanent(
      'TooLarge',
      `"${name.join(' ').replace(/^\.\//, '')}" is ${size} bytes, over the limit of ${c.policy.maxFileBytes} bytes (policy.maxFileBytes)`,
    );
  }
  // No retry brings a repository back: say so at once (a salvage after a failed seed, for one).
  if (r.exitCode === EXIT_NO_REPOSITORY)
    throw permanent(
      'LineageBroken',
      "collecting the worker's commits: the workspace has no git repository (its seed never finished, or the agent removed .git)",
    );
  if (r.exitCode !== 0) throw scriptFailed("collecting the worker's commits", r);
  const size = /^SIZE (\d+)$/.exec(last)?.[1];
  if (size === undefined)
    throw new Error(`collecting the worker's commits did not report the bundle's size: ${tail(r.output, 500)}`);
  checkImportSize(Number(size));
  return bundle;
}

/**
 * Imports the bundle bundleWork made under the sub-task's ref and checks it there; work that
 * cannot be accepted (too large, refused by the policy, unrelated history) is a permanent failure
 * saying why, and its ref is removed. Safe to repeat.
 */
export async function importWork(
  ws: Workspace,
  staging: StagingRepo,
  c: WorkOf & { runKey: string; allowedPaths: string[] },
  bundle: string,
): Promise<CollectedWork> {
  const ref = runRef(c.runKey, `workers/${c.workerId}`);
  const { head, walked } = await staging.withBundleFile(async (file) => {
    await ws.sb.copyOut(bundle, file);
    checkImportSize((await stat(file)).size);
    return staging.importBundle(file, ref, {
      what: "the worker's commits",
      seed: c.baseSha,
      largeBlob: c.policy.maxFileBytes,
    });
  });
  try {
    const { baseSha, allowedPaths, policy } = c;
    const work = await verifyWork(staging, { ref, headSha: head, baseSha, allowedPaths, policy }, walked);
    return { ...work, ref };
  } catch (err) {
    // Nothing may build on refused commits.
    await staging.deleteRef(ref);
    throw err;
  }
}
