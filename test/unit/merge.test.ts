/**
 * Host-side merging (src/git/merge.ts) on a real bare repository, as the staging repository holds
 * the workers' commits: clean merges, conflicts with the workers and files they involve, and
 * a retry of a half-done merge that lands on the very same commits.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { simpleGit } from 'simple-git';
import { describe, expect, it } from 'vitest';
import { mergeWorkers } from '../../src/git/merge';
import { makeRemote } from '../support/remotes';

/** A bare repository with main, and one branch per worker made by `edit` on top of main. */
async function staging(workers: Record<string, Record<string, string>>) {
  const remote = await makeRemote({ 'names.txt': 'one\ntwo\nthree\n', 'README.md': '# r\n' });
  const work = simpleGit(path.join(remote.root, 'work'));
  const base = (await work.revparse(['HEAD'])).trim();
  const heads: Record<string, string> = {};
  for (const [id, files] of Object.entries(workers)) {
    await work.checkout(['-q', '-B', id, base]);
    for (const [file, content] of Object.entries(files)) writeFileSync(path.join(remote.root, 'work', file), content);
    await work.add('.').commit(`work of ${id}`);
    heads[id] = (await work.revparse(['HEAD'])).trim();
    await work.push(remote.url, `${id}:refs/workers/${id}`);
  }
  const git = simpleGit(remote.url);
  const workerList = (ids: string[]) =>
    ids.map((id) => ({ workerId: id, headSha: heads[id], title: `Integrate ${id}` }));
  return { dir: remote.url, git, base, heads, workerList };
}

const at = 1_700_000_000;

describe('merging on the host', () => {
  it('merges workers that changed different files into one merge commit each, with the trailers', async () => {
    const s = await staging({ a: { 'a.txt': 'a\n' }, b: { 'b.txt': 'b\n' } });
    const merged = await mergeWorkers(s.dir, {
      runKey: 'run-1',
      baseSha: s.base,
      into: s.base,
      workers: s.workerList(['a', 'b']),
      at,
    });
    expect(merged.status).toBe('merged');
    const sha = merged.sha;
    expect((await s.git.raw(['ls-tree', '-r', '--name-only', sha])).trim().split('\n')).toEqual([
      'README.md',
      'a.txt',
      'b.txt',
      'names.txt',
    ]);
    const log = await s.git.raw(['log', '--first-parent', '--format=%an <%ae>|%P|%B%x00', `${s.base}..${sha}`]);
    const [second, first] = log
      .split('\0')
      .map((e) => e.trim())
      .filter(Boolean);
    expect(first).toBe(
      `Flotilla integration <flotilla@localhost>|${s.base} ${s.heads.a}|Integrate a\n\nFlotilla-Worker: a\nFlotilla-Run: run-1`,
    );
    expect(second).toMatch(
      new RegExp(`\\|[0-9a-f]{40} ${s.heads.b}\\|Integrate b\\n\\nFlotilla-Worker: b\\nFlotilla-Run: run-1$`),
    );
  });

  it('stops at a conflict, naming the files and the earlier workers that changed them', async () => {
    const s = await staging({
      a: { 'a.txt': 'a\n' },
      left: { 'names.txt': 'one\nleft\nthree\n' },
      right: { 'names.txt': 'one\nright\nthree\n' },
    });
    const merged = await mergeWorkers(s.dir, {
      runKey: 'run-1',
      baseSha: s.base,
      into: s.base,
      workers: s.workerList(['a', 'left', 'right']),
      at,
    });
    expect(merged).toMatchObject({
      status: 'conflict',
      workerId: 'right',
      files: ['names.txt'],
      conflictsWith: ['left'],
    });
    // The head is where the merge stopped: a and left are in it, right is not.
    expect(await s.git.raw(['show', `${merged.sha}:names.txt`])).toBe('one\nleft\nthree\n');
    expect(await s.git.raw(['show', `${merged.sha}:a.txt`])).toBe('a\n');
  });

  it('a retry of a half-done merge lands on the same commits, merging nothing twice', async () => {
    const s = await staging({ a: { 'a.txt': 'a\n' }, b: { 'b.txt': 'b\n' }, c: { 'c.txt': 'c\n' } });
    const input = { runKey: 'run-1', baseSha: s.base, workers: s.workerList(['a', 'b', 'c']), at };
    const whole = await mergeWorkers(s.dir, { ...input, into: s.base });
    // Interrupted after a and b: the retry starts from there with the whole list.
    const half = await mergeWorkers(s.dir, { ...input, into: s.base, workers: s.workerList(['a', 'b']) });
    const retried = await mergeWorkers(s.dir, { ...input, into: half.sha });
    expect(retried).toEqual(whole);
    // And from the start again: deterministic commits, the same SHA.
    expect(await mergeWorkers(s.dir, { ...input, into: s.base })).toEqual(whole);
    const merges = (await s.git.raw(['log', '--merges', '--format=%s', `${s.base}..${whole.sha}`])).trim().split('\n');
    expect(merges).toEqual(['Integrate c', 'Integrate b', 'Integrate a']);
  });
});
