/**
 * How a workspace gets the commits it works on: the run's base for a sub-task (with what a redo
 * starts from on top), or any commit of the staging repository for the integration's sandboxes.
 * Only what the run added to the base travels as a bundle; the base's own objects come from the
 * run mirror (local sandboxes) or a shallow bundle (cloud sandboxes).
 */
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { permanent } from '../contracts/failures';
import { hostIndex, setHostTree } from './host-tree';
import { SANDBOX_OBJECTS, acquireRunObjects } from './run-mirror';
import { type StagingRepo, runRef } from './staging';
import { type Workspace, freshConfig, scriptFailed, sh } from './workspace';
import type { Sandbox } from '../sandbox/types';

/** Written into .git when seeding completed; its presence means the workspace may hold progress. */
export const SEEDED_MARKER = '.git/flotilla-seeded';
/** The seed script's exit code when the workspace was seeded before. */
const EXIT_SEEDED = 87;

/** The sandbox a workspace belongs to and its run. */
export interface WorkspaceOf {
  sandboxKey: string;
  runKey: string;
  baseSha: string;
}

/**
 * How a sandbox gets the run's base commit: a script fragment to run right after `git init` in
 * its workspace, which leaves the commit's objects readable there. A local sandbox borrows them,
 * read-only, from its run mirror through git alternates (run-mirror.ts): no history is copied.
 * A cloud sandbox gets the commit alone, as a shallow repository, from a bundle uploaded to its
 * scratch directory now.
 */
export async function baseObjects(sb: Sandbox, staging: StagingRepo, dataDir: string, c: WorkspaceOf): Promise<string> {
  const baseRef = runRef(c.runKey, 'base');
  await requireBase(staging, baseRef, c);
  if (sb.isolation === 'e2b') {
    const bundle = `${sb.scratch}/base.bundle`;
    await staging.withBundleFile(async (file) => {
      await staging.createShallowBundle(file, baseRef);
      await sb.copyIn(file, bundle);
    });
    return `echo ${sh(c.baseSha)} > .git/shallow
git fetch -q ${sh(bundle)} ${sh(`+${baseRef}:refs/flotilla/base`)}
rm -f ${sh(bundle)}`;
  }
  const objects = await acquireRunObjects(dataDir, c.sandboxKey, staging.dir, baseRef);
  // The base's ref, written as git packs refs: the repository is fresh, and a file costs no process.
  return `${lendObjects(sb, objects)}
printf '%s refs/flotilla/base\\n' ${sh(c.baseSha)} > .git/packed-refs`;
}

/**
 * Refuses at once a sandbox whose run's base is not here and cannot come from anywhere: without a
 * shared store a run's state stays on the host that resolved it, so a sandbox moved to another
 * host would otherwise retry its seed for as long as the activity allows, saying only what git
 * could not find.
 */
async function requireBase(staging: StagingRepo, baseRef: string, c: WorkspaceOf): Promise<void> {
  if (staging.shared || (await staging.revParse(baseRef))) return;
  throw permanent(
    'HostLost',
    `sandbox ${c.sandboxKey}: run ${c.runKey}'s base commit ${c.baseSha.slice(0, 12)} is not on this host, and there is no shared store (FLOTILLA_STAGING_URL) to bring it from: without one, every sandbox of a run must stay on the host that holds its state (docs/operations.md, "The shared store")`,
  );
}

/**
 * Points a local workspace's alternates at its run mirror (where its sandbox sees it), so the
 * base's objects are there whatever the agent did to that file; empty for a cloud sandbox or a
 * run with no mirror here.
 */
export function lendObjects(sb: Sandbox, hostObjects: string | undefined): string {
  if (sb.isolation === 'e2b' || !hostObjects) return '';
  const at = sh(sb.isolation === 'bubblewrap' ? SANDBOX_OBJECTS : hostObjects);
  return `if [ ! -d .git/objects/info ]; then mkdir -p .git/objects/info; fi; echo ${at} > .git/objects/info/alternates`;
}

/**
 * Checks out the run's base commit on `branch` in a sub-task's workspace. A workspace that was
 * seeded before is left exactly as it is, because it may already hold the agent's progress; only
 * a seed that never finished is wiped and redone.
 */
export async function seedWorkspace(
  ws: Workspace,
  staging: StagingRepo,
  dataDir: string,
  c: WorkspaceOf & { branch: string; author: string },
): Promise<{ reused: boolean }> {
  const base = await baseObjects(ws.sb, staging, dataDir, c);
  const bundle = sh(`${ws.sb.scratch}/base.bundle`);
  // One command: the "seeded before?" check and the checkout (each command starts a sandbox), with
  // as few programs as it takes: a workspace that holds nothing is not emptied, the config is
  // written whole, the marker by the shell.
  const r = await ws.run(
    `if [ -f ${SEEDED_MARKER} ]; then if [ -e ${bundle} ]; then rm -f ${bundle}; fi; exit ${EXIT_SEEDED}; fi
shopt -s nullglob dotglob; __left=(*); shopt -u nullglob dotglob
if [ \${#__left[@]} -gt 0 ]; then rm -rf -- "\${__left[@]}"; fi
git init -q .
${freshConfig(c.author, 'flotilla@localhost')}
${base}
git checkout -q -b ${sh(c.branch)} ${sh(c.baseSha)}
: > ${SEEDED_MARKER}`,
  );
  if (r.exitCode === EXIT_SEEDED) return { reused: true };
  if (r.exitCode !== 0) throw scriptFailed('seeding the workspace', r);
  return { reused: false };
}

/** Where a redone sub-task starts instead of the base: a commit of the staging repository. */
export interface SubTaskSeed {
  ref: string;
  sha: string;
}

/**
 * Whether the workspace's HEAD is at `sha` or past it. Asked before a redo's seed is moved in, of
 * a workspace the agent may have run in already: its repository config is left alone.
 */
export async function isOnSeed(ws: Workspace, sha: string): Promise<boolean> {
  const r = await ws.run(`git merge-base --is-ancestor ${sh(sha)} HEAD`, { timeoutMs: 60_000, beside: true });
  return r.exitCode === 0;
}

/** Moves a freshly seeded sub-task workspace onto `seed`, so a redone sub-task starts from the integrated tree. */
export async function moveOntoSeed(
  ws: Workspace,
  staging: StagingRepo,
  c: { baseSha: string; seed: SubTaskSeed },
): Promise<void> {
  const bundle = `${ws.sb.scratch}/seed.bundle`;
  await staging.withBundleFile(async (file) => {
    await staging.createBundle(file, c.seed.ref, c.baseSha);
    await ws.sb.copyIn(file, bundle);
  });
  await ws.script(
    `git fetch -q ${sh(bundle)} ${sh(`+${c.seed.ref}:refs/flotilla/seed`)}
rm -f ${sh(bundle)}
git reset -q --hard ${sh(c.seed.sha)}`,
    'moving the workspace onto the integrated tree',
  );
}

/**
 * Makes the workspace a fresh checkout of `sha` (a staging commit): everything in it, .git
 * included, is replaced, so nothing an earlier command left (ignored files, a planted hook,
 * replace refs that would make git check out another tree) survives. With `indexAt`, HEAD and
 * the index are at that commit, so the working tree shows `sha`'s changes as edits.
 *
 * A local sandbox's files are set by the host (host-tree.ts), writing only what differs from
 * what the workspace holds; then only its `.git` is made anew in the sandbox, its index the
 * host's. Elsewhere, and with `indexAt`, the sandbox checks out the whole tree itself.
 */
export async function checkoutCommit(
  ws: Workspace,
  staging: StagingRepo,
  dataDir: string,
  c: WorkspaceOf & { sha: string; indexAt?: string },
): Promise<void> {
  const base = await baseObjects(ws.sb, staging, dataDir, c);
  const bundle = `${ws.sb.scratch}/checkout.bundle`;
  const ref = runRef(c.runKey, 'checkout');
  if (c.sha !== c.baseSha) {
    await staging.setRef(ref, c.sha);
    await staging.withBundleFile(async (file) => {
      await staging.createBundle(file, ref, c.baseSha);
      await ws.sb.copyIn(file, bundle);
    });
  }
  const host = c.indexAt ? undefined : ws.sb.host;
  if (host) {
    await setHostTree(host, staging.dir, c.sha);
    // Removed by the host, so no `.git` the last command planted (a link, a file) is ever read.
    await rm(path.join(host.dir, '.git'), { recursive: true, force: true });
  }
  // The sandbox policy keeps configuration a command may have planted in $HOME out too.
  await ws.script(
    `${host ? '' : 'chmod -R u+w . 2>/dev/null || true\nfind . -mindepth 1 -maxdepth 1 -exec rm -rf {} +'}
git init -q .
${freshConfig('Flotilla integration', 'flotilla@localhost')}
${base}
${c.sha !== c.baseSha ? `git fetch -q ${sh(bundle)} ${sh(`+${ref}:${ref}`)}\nrm -f ${sh(bundle)}` : ''}
${host ? `git update-ref --no-deref HEAD ${sh(c.sha)}` : `git checkout -q --detach ${sh(c.sha)}`}${c.indexAt ? `\ngit reset -q ${sh(c.indexAt)}` : ''}`,
    'checking out the tree to work on',
  );
  if (host) await ws.sb.copyIn(hostIndex(host), `${ws.sb.workspace}/.git/index`);
}
