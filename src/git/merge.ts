/**
 * Host-side merge plumbing on the bare staging repository: merges, conflict detection and the
 * commits Flotilla makes are computed here, without a work tree, so nothing an agent or a test
 * controls takes part in building the commit that is pushed. Sandboxes only receive trees to
 * test or fix; what comes back from them is a tree, checked here before it is committed here.
 *
 * Commits are deterministic (fixed identity, a date the workflow passes), so recomputing a
 * half-done merge after a retry yields the same SHAs.
 */
import { hostGitEnv } from './env';
import { type GitResult, git as runGit, nulRecords } from './spawn';

const IDENTITY = { name: 'Flotilla integration', email: 'flotilla@localhost' };
const WORKER_TRAILER = 'Flotilla-Worker';

type GitOptions = { ok?: number[]; env?: Record<string, string> };

/** Runs git on the bare repository `dir` under the host policy; exit codes not in `ok` throw. */
function gitBytes(dir: string, args: string[], opts: GitOptions = {}): Promise<GitResult> {
  return runGit(['-c', 'core.quotepath=off', ...args], {
    repo: dir,
    env: { ...hostGitEnv(), ...opts.env },
    ok: opts.ok,
  });
}

async function git(dir: string, args: string[], opts: GitOptions = {}): Promise<{ code: number; stdout: string }> {
  const r = await gitBytes(dir, args, opts);
  return { code: r.code, stdout: r.stdout.toString('utf8') };
}

export type TreeMerge = { clean: true; tree: string } | { clean: false; tree: string; files: string[] };

/** A real 3-way merge of two commits; on conflict the tree holds the conflicted files with markers. */
export async function mergeTrees(dir: string, ours: string, theirs: string): Promise<TreeMerge> {
  const r = await git(dir, ['merge-tree', '--write-tree', '--name-only', '--no-messages', '-z', ours, theirs], {
    ok: [0, 1],
  });
  const [tree, ...files] = nulRecords(r.stdout);
  return r.code === 0 ? { clean: true, tree } : { clean: false, tree, files: [...new Set(files)] };
}

export async function commitTree(
  dir: string,
  c: { tree: string; parents: string[]; message: string; at: number },
): Promise<string> {
  const date = `@${c.at} +0000`;
  const env = {
    GIT_AUTHOR_NAME: IDENTITY.name,
    GIT_AUTHOR_EMAIL: IDENTITY.email,
    GIT_AUTHOR_DATE: date,
    GIT_COMMITTER_NAME: IDENTITY.name,
    GIT_COMMITTER_EMAIL: IDENTITY.email,
    GIT_COMMITTER_DATE: date,
  };
  const r = await git(dir, ['commit-tree', c.tree, ...c.parents.flatMap((p) => ['-p', p]), '-m', c.message], { env });
  return r.stdout.trim();
}

export async function treeOf(dir: string, commit: string): Promise<string> {
  return (await git(dir, ['rev-parse', '--verify', `${commit}^{tree}`])).stdout.trim();
}

export async function isAncestor(dir: string, ancestor: string, of: string): Promise<boolean> {
  return (await git(dir, ['merge-base', '--is-ancestor', ancestor, of], { ok: [0, 1] })).code === 0;
}

export async function mergeBase(dir: string, a: string, b: string): Promise<string> {
  return (await git(dir, ['merge-base', a, b])).stdout.trim();
}

/** Paths that differ between two trees or commits (no rename detection: both sides count). */
export async function changedPaths(dir: string, from: string, to: string): Promise<string[]> {
  return nulRecords((await git(dir, ['diff-tree', '-r', '--name-only', '--no-renames', '-z', from, to])).stdout);
}

/** "path:line" of every conflict marker that `to` adds over `from`. */
export async function addedMarkers(dir: string, from: string, to: string): Promise<string[]> {
  const r = await git(dir, ['diff', '--check', from, to], { ok: [0, 2] });
  return r.stdout
    .split('\n')
    .filter((l) => l.endsWith(': leftover conflict marker'))
    .map((l) => l.slice(0, -': leftover conflict marker'.length));
}

export interface TreeEntry {
  mode: string;
  type: string;
  oid: string;
  path: string;
}

export async function listTree(dir: string, treeish: string): Promise<TreeEntry[]> {
  return nulRecords((await git(dir, ['ls-tree', '-r', '-z', treeish])).stdout).map((line) => {
    const [meta, path] = line.split('\t');
    const [mode, type, oid] = meta.split(' ');
    return { mode, type, oid, path };
  });
}

export async function readBlob(dir: string, oid: string): Promise<Buffer> {
  return (await gitBytes(dir, ['cat-file', 'blob', oid])).stdout;
}

/** The sub-tasks (by their merge commits' Flotilla-Worker trailer) whose merges since `base` changed any of `files`. */
export async function workersTouching(dir: string, base: string, head: string, files: string[]): Promise<string[]> {
  if (base === head) return [];
  const r = await git(dir, [
    'log',
    '--first-parent',
    `--format=%(trailers:key=${WORKER_TRAILER},valueonly)`,
    `${base}..${head}`,
    '--',
    ...files,
  ]);
  return [
    ...new Set(
      r.stdout
        .split('\n')
        .map((l) => l.trim())
        .filter(Boolean),
    ),
  ];
}

/** `git diff --stat` of from..to, at most 40 lines; the summary line survives a cut. */
export async function diffstat(dir: string, from: string, to: string, paths: string[] = []): Promise<string> {
  const r = await git(dir, ['diff', '--stat=100', from, to, ...(paths.length ? ['--', ...paths] : [])]);
  const stat = r.stdout.trimEnd().split('\n').filter(Boolean);
  return (stat.length > 40 ? [...stat.slice(0, 38), '...', stat[stat.length - 1]] : stat).join('\n');
}

/** Lines added and removed from `from` to `to` (`git diff --numstat`); a binary file counts as one. */
export async function linesChanged(dir: string, from: string, to: string): Promise<number> {
  const r = await git(dir, ['diff', '--numstat', '--no-renames', from, to]);
  let lines = 0;
  for (const row of r.stdout.split('\n').filter(Boolean)) {
    const [added, removed] = row.split('\t');
    lines += added === '-' ? 1 : Number(added) + Number(removed);
  }
  return lines;
}

export function mergeMessage(title: string, workerId: string, runKey: string, extra = ''): string {
  return `${title}\n\n${WORKER_TRAILER}: ${workerId}\nFlotilla-Run: ${runKey}${extra}`;
}

export interface SubTaskHead {
  workerId: string;
  /** The sub-task's commits in the staging repository. */
  headSha: string;
  /** The merge commit's title. */
  title: string;
}

export type MergeRun =
  | { status: 'merged'; sha: string }
  | { status: 'conflict'; sha: string; workerId: string; files: string[]; conflictsWith: string[] };

/**
 * Merges each sub-task's commits in order onto `into` (one already contained is skipped), stopping
 * at the first conflict with the head reached so far, the files and the earlier sub-tasks that
 * changed them.
 */
export async function mergeWorkers(
  dir: string,
  m: { runKey: string; baseSha: string; into: string; workers: SubTaskHead[]; at: number },
): Promise<MergeRun> {
  let head = m.into;
  for (const w of m.workers) {
    if (await isAncestor(dir, w.headSha, head)) continue;
    const merged = await mergeTrees(dir, head, w.headSha);
    if (!merged.clean) {
      const conflictsWith = await workersTouching(dir, m.baseSha, head, merged.files);
      return { status: 'conflict', sha: head, workerId: w.workerId, files: merged.files, conflictsWith };
    }
    head = await commitTree(dir, {
      tree: merged.tree,
      parents: [head, w.headSha],
      message: mergeMessage(w.title, w.workerId, m.runKey),
      at: m.at,
    });
  }
  return { status: 'merged', sha: head };
}
