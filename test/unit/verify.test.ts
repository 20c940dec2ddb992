/** The host's checks of imported commits (src/git/verify.ts): lineage in a real staging repository, symlink targets without one. */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CommitPolicy } from '../../src/contracts/request';
import { hostGitEnv } from '../../src/git/env';
import { commitTree } from '../../src/git/merge';
import { gitText } from '../../src/git/spawn';
import { StagingRepo } from '../../src/git/staging';
import { leavesRepository, verifyWork } from '../../src/git/verify';

let dataDir: string;
let staging: StagingRepo;
beforeEach(async () => {
  dataDir = mkdtempSync(path.join(os.tmpdir(), 'flotilla-verify-'));
  staging = await StagingRepo.open(dataDir);
});
afterEach(() => rmSync(dataDir, { recursive: true, force: true }));

/** A commit of the staging repository holding `files`, on `parents`. */
async function commit(files: Record<string, string>, parents: string[]): Promise<string> {
  const opts = { repo: staging.dir, env: { ...hostGitEnv(), GIT_INDEX_FILE: path.join(dataDir, 'index') } };
  rmSync(opts.env.GIT_INDEX_FILE, { force: true });
  for (const [name, content] of Object.entries(files)) {
    const blob = (await gitText(['hash-object', '-w', '--stdin'], { ...opts, input: content })).trim();
    await gitText(['update-index', '--add', '--cacheinfo', `100644,${blob},${name}`], opts);
  }
  const tree = (await gitText(['write-tree'], opts)).trim();
  return commitTree(staging.dir, { tree, parents, message: Object.keys(files).join(' '), at: 1_700_000_000 });
}

const verify = async (head: string, baseSha: string) => {
  await staging.setRef('refs/flotilla/run-1/workers/a', head);
  return verifyWork(staging, {
    ref: 'refs/flotilla/run-1/workers/a',
    baseSha,
    allowedPaths: ['src'],
    policy: CommitPolicy.parse({}),
  });
};

describe("verifying a sub-task's commits", () => {
  it('accepts commits on top of the base and counts them', async () => {
    const root = await commit({ 'README.md': '# r\n' }, []);
    const base = await commit({ 'README.md': '# r\n', 'src/a.ts': 'a\n' }, [root]);
    const head = await commit({ 'README.md': '# r\n', 'src/a.ts': 'b\n', 'docs/x.md': 'x\n' }, [base]);
    expect(await verify(head, base)).toEqual({
      headSha: head,
      commits: 1,
      filesChanged: 2,
      outOfScope: ['docs/x.md'],
      outOfScopeCount: 1,
    });
  });

  it('refuses commits that share history with the base but do not descend from it', async () => {
    const root = await commit({ 'README.md': '# r\n' }, []);
    const base = await commit({ 'README.md': '# r\n', 'src/a.ts': 'a\n' }, [root]);
    // Built on the base's parent: no unrelated root, yet the base is not in its history.
    const sibling = await commit({ 'README.md': '# r\n', 'src/b.ts': 'b\n' }, [root]);
    await expect(verify(sibling, base)).rejects.toThrow(
      `the worker's commits do not descend from the base commit ${base.slice(0, 12)}`,
    );
    await expect(verify(root, base)).rejects.toThrow('do not descend from the base commit');
  });
});

describe('symbolic link targets', () => {
  it('inside the repository are fine; absolute, up and out, or into .git are not', () => {
    expect(leavesRepository('a/link', 'b.txt')).toBe(false);
    expect(leavesRepository('a/b/link', '../../c.txt')).toBe(false);
    expect(leavesRepository('a/link', '/etc/passwd')).toBe(true);
    expect(leavesRepository('a/link', '../../etc')).toBe(true);
    expect(leavesRepository('link', '..')).toBe(true);
    expect(leavesRepository('a/link', '../.git/hooks')).toBe(true);
    expect(leavesRepository('link', '.git')).toBe(true);
  });
});
