/**
 * The tree of a local sandbox's workspace, set by the host: git of the host's, on the staging
 * repository's objects, with an index only the host holds (HostWorkspace.state), writes the
 * workspace directly between sandbox commands. Moving it from one commit to another, or back to
 * the same one after a command ran in it, costs what changed plus one lstat per tracked file,
 * not a checkout of the whole repository.
 *
 * Nothing of the sandbox takes part: not its `.git` (git skips a work tree's `.git`; the caller
 * makes a fresh one), not its git, not its config. The host's index records each file's ctime and
 * inode, which no process in the sandbox can set back, so a command that rewrites a file and
 * restores its size and mtime is still seen, and the file is written again. Afterwards the host
 * checks that nothing differs from the commit, and starts from an empty workspace when it does
 * or when anything failed (a worker killed mid-way leaves an `index.lock`).
 *
 * This git compares ctimes to the second only, so a rewrite in the very second the host recorded
 * a file's ctime would pass for untouched. Every stat the index records is one the host made
 * (`read-tree --reset -u` writes again any file whose stat a command changed), and the index
 * file's mtime is set back to the start of the oldest move that ended in the current second: git
 * then takes every file those moves wrote as "racily clean" and compares its content, not its
 * stat (git's Documentation/technical/racy-git.txt).
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir, rm, utimes, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { HostWorkspace } from '../sandbox/types';
import { startProgram } from '../spawner';
import { hostGitEnv } from './env';
import { git, nulRecords } from './spawn';

/** The host's index of the workspace, in the host's own directory. */
const indexOf = (hw: HostWorkspace) => path.join(hw.state, 'index');

function gitOn(hw: HostWorkspace, stagingDir: string) {
  const env = { ...hostGitEnv(), GIT_WORK_TREE: hw.dir, GIT_INDEX_FILE: indexOf(hw) };
  return (args: string[]) => git(args, { repo: stagingDir, env });
}

/**
 * Gives the sandbox's uid what the host's git just wrote (files it owns already are left, so
 * their ctimes, which the index checks, stay). `-h`/`-P`: links are changed, never followed.
 */
async function handOver(hw: HostWorkspace): Promise<void> {
  const uid = hw.uid;
  const me = process.getuid?.();
  if (uid === undefined || me === undefined || me === uid) return;
  await new Promise<void>((resolve, reject) => {
    const child = startProgram('chown', ['-R', '-h', '-P', `--from=${me}`, `${uid}:${uid}`, hw.dir], {
      stdio: ['ignore', 'ignore', 'ignore'],
    });
    child.on('error', reject);
    child.on('close', (code: number | null) => (code === 0 ? resolve() : reject(new Error(`chown exited ${code}`))));
  });
}

/** Removes every untracked and ignored file (nested repositories too) from a workspace the host has set. */
export async function cleanHostTree(hw: HostWorkspace, stagingDir: string): Promise<void> {
  if (existsSync(indexOf(hw))) await gitOn(hw, stagingDir)(['clean', '-ffdxq']);
}

/** Moves the workspace to `sha` from whatever it holds now; throws when git could not. */
async function moveTo(hw: HostWorkspace, stagingDir: string, sha: string): Promise<void> {
  const started = Math.floor(Date.now() / 1000);
  const run = gitOn(hw, stagingDir);
  // Untracked and ignored files go first: read-tree keeps an untracked file that is in its way.
  await cleanHostTree(hw, stagingDir);
  await run(['read-tree', '--reset', '-u', sha]);
  await handOver(hw);
  // The hand-over changed ctimes: the index learns them (re-reading only what was just written).
  await run(['update-index', '-q', '--refresh']);
  await keepRacy(hw, started);
}

/**
 * Sets the index file's mtime back to the start of the oldest move whose writes may share the
 * current second with a command's next write (this one, and those before it that ended in this
 * second): git then compares the content of every file they wrote instead of trusting its stat.
 */
async function keepRacy(hw: HostWorkspace, started: number): Promise<void> {
  const marks = path.join(hw.state, 'moves');
  const now = Math.floor(Date.now() / 1000);
  const [lastEnded, lastRacy] = (await readFile(marks, 'utf8').catch(() => '')).split(' ').map((n) => Number(n) || 0);
  const racyFrom = lastEnded === now && lastRacy ? Math.min(started, lastRacy) : started;
  await writeFile(marks, `${now} ${racyFrom}`);
  await utimes(indexOf(hw), racyFrom, racyFrom);
}

/** What differs from the index in the workspace (untracked, modified or deleted): nothing, when it is exact. */
async function differences(hw: HostWorkspace, stagingDir: string): Promise<string[]> {
  const r = await gitOn(hw, stagingDir)(['ls-files', '-z', '--others', '--modified', '--deleted']);
  return nulRecords(r.stdout);
}

/** Empties the workspace (its `.git` too) and forgets the host's index. */
async function wipe(hw: HostWorkspace): Promise<void> {
  await rm(indexOf(hw), { force: true });
  await rm(`${indexOf(hw)}.lock`, { force: true });
  for (const entry of await readdir(hw.dir)) await rm(path.join(hw.dir, entry), { recursive: true, force: true });
}

/**
 * Makes the workspace's files exactly `sha`'s tree (the staging repository must hold it), its
 * `.git` excepted; returns how: `moved` when only what differed was written, `fresh` when it
 * was emptied first (nothing there yet, or the move failed or left a difference).
 */
export async function setHostTree(hw: HostWorkspace, stagingDir: string, sha: string): Promise<'moved' | 'fresh'> {
  // Not recursive: a sandbox destroyed meanwhile (its directory gone) is not made again.
  await mkdir(hw.state, { mode: 0o700 }).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'EEXIST') throw err;
  });
  if (existsSync(indexOf(hw))) {
    const moved = await moveTo(hw, stagingDir, sha).then(
      () => true,
      () => false,
    );
    if (moved && (await differences(hw, stagingDir)).length === 0) return 'moved';
  }
  await wipe(hw);
  await moveTo(hw, stagingDir, sha);
  const left = await differences(hw, stagingDir);
  if (left.length)
    throw new Error(`the checkout of ${sha.slice(0, 12)} left ${left.length} path(s) that differ from it`);
  return 'fresh';
}

/** The host's index of the workspace, to copy into its fresh `.git` (so its git sees a clean tree without re-reading it). */
export function hostIndex(hw: HostWorkspace): string {
  return indexOf(hw);
}
