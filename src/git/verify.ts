/**
 * Host-side checks of commits imported from a sandbox. The staging repository is the only
 * truth: everything here is computed there, on the exact commit that was imported and will be
 * merged, after the last moment an agent could touch it. Nothing a sandbox printed is used.
 * (Object integrity is checked by the import itself, see StagingRepo.importBundle.)
 */
import path from 'node:path';
import { permanent } from '../contracts/failures';
import type { Walked } from './import';
import type { StagingRepo } from './staging';
import { redact } from '../store/secrets';
import { type CommitPolicy } from '../contracts/request';
import { MAX_LISTED_PATHS, ScopeCheck, type ScopeFindings } from './scope';

export { MAX_LISTED_PATHS };

export interface VerifiedWork extends ScopeFindings {
  headSha: string;
  /** Commits from the base to the head. */
  commits: number;
  /** Paths the head changes relative to the base. */
  filesChanged: number;
}

interface Change {
  mode: string;
  sha: string;
  path: string;
}

/**
 * Checks `ref` (the commit `headSha`, when the caller knows it) against `baseSha` and the policy; throws a permanent failure naming the first
 * rule it breaks. Changed paths outside `allowedPaths` are reported, not thrown, so the sub-task's
 * report can say which they were.
 */
export async function verifyWork(
  staging: StagingRepo,
  input: { ref: string; headSha?: string; baseSha: string; allowedPaths: string[]; policy: CommitPolicy },
  /** What the import's walk showed of the commits (from the base), when they were just imported: no git walks them again. */
  walked?: Walked,
): Promise<VerifiedWork> {
  const { baseSha, policy } = input;
  // The import names the commit it brought: no git to ask which one the ref names.
  const headSha = input.headSha ?? (await staging.revParse(input.ref));
  if (!headSha) throw permanent('CorruptObjects', `${input.ref} is not a commit in the staging repository`);
  const commits = walked
    ? await lineageOf(staging, baseSha, walked.commits, walked.descends, walked.root)
    : await checkLineage(staging, baseSha, headSha);

  const scope = new ScopeCheck(input.allowedPaths);
  let filesChanged = 0;
  const linked: Change[] = [];
  const gitlinks: Change[] = [];
  const added = new Map<string, string>();
  let meta: string | undefined;
  await staging.stream(
    ['diff-tree', '-r', '-z', '--no-renames', '--no-commit-id', baseSha, headSha],
    '\0',
    (record) => {
      if (meta === undefined) {
        meta = record;
        return true;
      }
      // ":<old mode> <new mode> <old sha> <new sha> <status>" then the path.
      const [, mode, , sha] = meta.slice(1).split(' ');
      meta = undefined;
      const change = { mode, sha, path: record };
      filesChanged++;
      if (filesChanged > policy.maxChangedFiles) return false;
      scope.note(change.path);
      if (mode === '120000') linked.push(change);
      else if (mode === '160000') gitlinks.push(change);
      else if (mode !== '000000') added.set(sha, change.path);
      return true;
    },
  );
  if (filesChanged > policy.maxChangedFiles) {
    throw permanent(
      'TooLarge',
      `the worker's commits change more than ${policy.maxChangedFiles} files (policy.maxChangedFiles); split the sub-task or raise the limit`,
    );
  }
  if (gitlinks.length > 0 && !policy.allowSubmodules) {
    const g = gitlinks[0];
    throw permanent(
      'PolicyViolation',
      redact(
        `"${g.path}" is a submodule (a gitlink to commit ${g.sha.slice(0, 12)} of another repository); submodules are refused unless policy.allowSubmodules is true`,
      ),
    );
  }
  if (!policy.allowExternalSymlinks) {
    for (const link of linked) {
      const target = await staging.blob(link.sha);
      if (leavesRepository(link.path, target)) {
        throw permanent(
          'PolicyViolation',
          redact(
            `"${link.path}" is a symbolic link to "${target.slice(0, 200)}", outside the repository; such links are refused unless policy.allowExternalSymlinks is true`,
          ),
        );
      }
    }
  }
  const large = walked ? walked.large?.oid : await largeBlob(staging, baseSha, headSha, policy.maxFileBytes);
  if (large) await refuseLarge(staging, large, policy.maxFileBytes, added);
  return { headSha, commits, filesChanged, ...scope.findings };
}

/**
 * The head descends from the base, and every commit it brings has the base's history as its root;
 * returns how many commits it brings. One `rev-list --parents` answers all three: the base is an
 * ancestor of the head exactly when it is the parent of one of the commits only the head reaches
 * (or is the head), and a commit there with no parent is a root from elsewhere (a merge of an
 * unrelated branch, even one with `-s ours` that leaves the tree alone).
 */
async function checkLineage(staging: StagingRepo, baseSha: string, headSha: string): Promise<number> {
  let commits = 0;
  let onBase = headSha === baseSha;
  let root: string | undefined;
  await staging.stream(['rev-list', '--parents', headSha, `^${baseSha}`], '\n', (line) => {
    if (!line) return true;
    const [commit, ...parents] = line.split(' ');
    commits++;
    if (parents.includes(baseSha)) onBase = true;
    if (parents.length === 0) root ??= commit;
    return true;
  });
  return lineageOf(staging, baseSha, commits, onBase, root);
}

/** `commits`, once the lineage they show is the base's: a failure naming what breaks it otherwise. */
async function lineageOf(
  staging: StagingRepo,
  baseSha: string,
  commits: number,
  onBase: boolean,
  root: string | undefined,
): Promise<number> {
  if (!onBase)
    throw permanent(
      'LineageBroken',
      `the worker's commits do not descend from the base commit ${baseSha.slice(0, 12)}`,
    );
  if (root) {
    const subject = redact((await staging.raw(['log', '-1', '--format=%s', root])).trim().slice(0, 120));
    throw permanent(
      'LineageBroken',
      `the worker's commits bring in unrelated history: root commit ${root.slice(0, 12)} ("${subject}") does not descend from the base commit ${baseSha.slice(0, 12)}`,
    );
  }
  return commits;
}

/** The first blob the new commits add, in any of them, past the size limit. */
async function largeBlob(
  staging: StagingRepo,
  baseSha: string,
  headSha: string,
  maxBytes: number,
): Promise<string | undefined> {
  let big: string | undefined;
  // blob:limit=n omits blobs of n bytes or more and --filter-print-omitted lists them as "~<sha>".
  await staging.stream(
    ['rev-list', '--objects', `--filter=blob:limit=${maxBytes + 1}`, '--filter-print-omitted', headSha, `^${baseSha}`],
    '\n',
    (line) => {
      if (!line.startsWith('~')) return true;
      big = line.slice(1);
      return false;
    },
  );
  return big;
}

/** Refuses the blob `big`, over the size limit, naming its path when the head has it (`paths`). */
async function refuseLarge(
  staging: StagingRepo,
  big: string,
  maxBytes: number,
  paths: Map<string, string>,
): Promise<never> {
  const size = Number((await staging.raw(['cat-file', '-s', big])).trim());
  const where = paths.has(big)
    ? `"${redact(paths.get(big)!)}"`
    : `a file in the worker's history (blob ${big.slice(0, 12)})`;
  throw permanent('TooLarge', `${where} is ${size} bytes, over the limit of ${maxBytes} bytes (policy.maxFileBytes)`);
}

/**
 * Whether a symlink at `linkPath` (repository-relative) pointing at `target` resolves outside
 * the repository's files: absolute, up through "..", or into `.git`, where a later step that
 * writes through the link would reach git's own state.
 */
export function leavesRepository(linkPath: string, target: string): boolean {
  if (target.startsWith('/')) return true;
  const resolved = path.posix.normalize(path.posix.join(path.posix.dirname(linkPath), target));
  return resolved === '..' || resolved.startsWith('../') || resolved === '.git' || resolved.startsWith('.git/');
}
