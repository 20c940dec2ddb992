/**
 * The run mirror: a bare repository holding only the run's base commit and its history,
 * copied once per run per host out of the staging repository (which holds every run of every
 * repository, so no sandbox may see it). A local sandbox reads this mirror read-only through git
 * alternates instead of receiving its own copy of the history: seeding is a checkout, and a
 * sandbox's disk holds its work tree, its index and the objects its agent creates.
 *
 * The local provider lends a sandbox of the run the mirror's packs as links of its own, mounted
 * read-only at SANDBOX_OBJECTS (see mountedObjects and sandbox/local/objects.ts). The mirror's
 * files belong to the worker's user and are readable by all, so a sandbox under its own uid can
 * read them; the data directory above them stays private, and no sandbox of another run gets them.
 *
 * A mirror is made by the first sandbox of its run on this host that needs it, and kept for the
 * run's later sandboxes (its planner, sub-tasks and integration share it) until the run ends: the
 * leader removes it on every host its sandboxes used (removeRunObjects), and `flotilla gc` removes
 * what a crash left. Sandboxes that still hold links keep working. One worker process per data
 * directory: the lock is in this process.
 */
import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readdir, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { hostGitEnv } from './env';
import { GitError, commandOf, gitText } from './spawn';

/** Where a bubblewrap sandbox sees its run's objects (the mirror's objects/ directory). */
export const SANDBOX_OBJECTS = '/flotilla/objects';

/** The ref of the mirror that holds the run's base. */
const BASE = 'refs/flotilla/base';
const RUN_KEY = /^[A-Za-z0-9_-]{1,80}$/;

/** The run a sandbox belongs to: keys are "<runKey>/<role>..." (see the workflows). */
export function runKeyOfSandbox(sandboxKey: string): string {
  return sandboxKey.split('/')[0];
}

function mirrorDir(dataDir: string, runKey: string): string {
  if (!RUN_KEY.test(runKey)) throw new Error(`invalid run key ${JSON.stringify(runKey)}`);
  return path.join(dataDir, 'run-objects', `${runKey}.git`);
}

/** The host directory of the objects a sandbox of `sandboxKey` may read, when its run has a mirror here. */
export function mountedObjects(dataDir: string, sandboxKey: string): string | undefined {
  const runKey = runKeyOfSandbox(sandboxKey);
  if (!RUN_KEY.test(runKey)) return undefined;
  const objects = path.join(mirrorDir(dataDir, runKey), 'objects');
  return existsSync(objects) ? objects : undefined;
}

/** Runs git (the host policy) with `input` on stdin; resolves to its stdout. */
async function git(args: string[], input = ''): Promise<string> {
  try {
    return await gitText(args, { env: hostGitEnv(), input, maxOutput: 1024 * 1024 });
  } catch (err) {
    const why = err instanceof GitError ? err.stderr.trim() || err.message : String(err);
    throw new Error(`making the run mirror failed: git ${commandOf(args)}: ${why}`);
  }
}

/** Operations on one run mirror, one at a time, so a removal never happens in the middle of making it. */
const queues = new Map<string, Promise<unknown>>();
function serialized<T>(key: string, fn: () => Promise<T>): Promise<T> {
  const next = (queues.get(key) ?? Promise.resolve()).catch(() => undefined).then(fn);
  queues.set(key, next);
  void next.finally(() => queues.get(key) === next && queues.delete(key)).catch(() => undefined);
  return next;
}

/**
 * Returns the run mirror's objects directory on the host for a sandbox of `sandboxKey`, making the
 * mirror first if this host has none: the commit `baseRef` names in the staging repository at
 * `stagingDir`, and its history only. It is built aside and renamed into place, so a mirror that
 * exists is complete; sandboxes of the run seeded at once wait for it.
 */
export function acquireRunObjects(
  dataDir: string,
  sandboxKey: string,
  stagingDir: string,
  baseRef: string,
): Promise<string> {
  const runKey = runKeyOfSandbox(sandboxKey);
  const dir = mirrorDir(dataDir, runKey);
  return serialized(runKey, async () => {
    if (!existsSync(dir)) {
      await mkdir(path.dirname(dir), { recursive: true, mode: 0o700 });
      await removeLeftovers(dataDir, runKey);
      const tmp = await mkdtemp(`${dir}.new-`);
      try {
        // 0644: what git writes here is readable by the sandbox's uid and writable by no one else.
        await git(['init', '-q', '--bare', '--shared=0644', tmp]);
        // One pack of the base's history, written by the staging repository straight into the
        // mirror: it reuses the staging pack's compressed objects and deltas, so unlike a fetch
        // nothing is re-hashed (about 4x faster on a 150 MB repository).
        const sha = (
          await git(['-C', stagingDir, 'rev-parse', '--verify', '--end-of-options', `${baseRef}^{commit}`])
        ).trim();
        const pack = path.join(tmp, 'objects', 'pack');
        await git(['-C', stagingDir, 'pack-objects', '--revs', '-q', path.join(pack, 'pack')], `${sha}\n`);
        // Written with the staging repository's private modes: readable by all, as the mirror's own.
        for (const f of await readdir(pack)) await chmod(path.join(pack, f), 0o444);
        await git(['-C', tmp, 'update-ref', BASE, sha]);
        await rename(tmp, dir);
      } finally {
        await rm(tmp, { recursive: true, force: true });
      }
    }
    return path.join(dir, 'objects');
  });
}

/** Half-made or half-removed mirrors of a run that a killed worker left (this process is the only one making them). */
async function removeLeftovers(dataDir: string, runKey: string): Promise<void> {
  const parent = path.join(dataDir, 'run-objects');
  for (const name of await readdir(parent).catch(() => [] as string[])) {
    if (name.startsWith(`${runKey}.git.new-`) || name.startsWith(`${runKey}.git.old-`))
      await rm(path.join(parent, name), { recursive: true, force: true });
  }
}

/**
 * Removes run `runKey`'s mirror from this host (the run has ended); one that is not here is fine.
 * Sandboxes still holding links to its packs keep them.
 */
export function removeRunObjects(dataDir: string, runKey: string): Promise<void> {
  if (!RUN_KEY.test(runKey)) return Promise.resolve();
  return serialized(runKey, async () => {
    const dir = mirrorDir(dataDir, runKey);
    // Renamed away first: a mirror that exists under its name is always whole.
    const doomed = `${dir}.old-${process.pid}-${Date.now()}`;
    if (existsSync(dir)) await rename(dir, doomed);
    await rm(doomed, { recursive: true, force: true });
    // What a worker of an earlier release recorded of the mirror's users.
    await rm(mirrorDir(dataDir, runKey).replace(/\.git$/, '.users'), { recursive: true, force: true });
  });
}
