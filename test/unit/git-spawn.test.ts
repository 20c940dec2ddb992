/** The one spawn helper every host git goes through (src/git/spawn.ts), against real git. */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { createWriteStream } from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { hostGitEnv } from '../../src/git/env';
import { GitError, git, gitInto, gitRecords, gitText, nulRecords, runGit } from '../../src/git/spawn';

let dir: string;
let repo: { repo: string; env: ReturnType<typeof hostGitEnv> };
beforeEach(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'flotilla-spawn-'));
  repo = { repo: path.join(dir, 'repo.git'), env: hostGitEnv() };
  await git(['init', '--quiet', '--bare', repo.repo], { env: hostGitEnv() });
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** `git hash-object` of "hello\n". */
const HELLO = 'ce013625030ba8dba906f756967f9e9ca394464a';

const blob = async (content: string) =>
  (await gitText(['hash-object', '-w', '--stdin'], { ...repo, input: content })).trim();

describe('the spawn helper', () => {
  it('feeds stdin as bytes or as a stream read piece by piece', async () => {
    expect(await blob('hello\n')).toBe(HELLO);
    const stream = Readable.from([Buffer.from('hel'), Buffer.from('lo'), Buffer.from('\n')]);
    expect((await gitText(['hash-object', '-w', '--stdin'], { ...repo, input: stream })).trim()).toBe(HELLO);
  });

  it('splits NUL-terminated output into records, whatever the names hold', async () => {
    const sha = await blob('x\n');
    const names = ['a file', 'two\nlines', 'tab\there'];
    const tree = (
      await gitText(['mktree', '-z'], { ...repo, input: names.map((n) => `100644 blob ${sha}\t${n}\0`).join('') })
    ).trim();
    const listed = nulRecords((await git(['ls-tree', '-z', '--name-only', tree], repo)).stdout);
    expect(listed.sort()).toEqual([...names].sort());
  });

  it('reports exit codes: an answer when the caller expects it, a GitError naming the command otherwise', async () => {
    const one = await blob('1\n');
    const tree = (await gitText(['mktree'], { ...repo, input: `100644 blob ${one}\tf\n` })).trim();
    expect((await runGit(['cat-file', '-e', `${tree}:missing`], repo)).code).toBe(128);
    expect(
      (await git(['diff-tree', '--quiet', tree, '4b825dc642cb6eb9a060e54bf8d69288fbee4904'], { ...repo, ok: [0, 1] }))
        .code,
    ).toBe(1);
    const err = await git(['cat-file', '-t', '0'.repeat(40)], repo).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(GitError);
    expect((err as GitError).command).toBe('cat-file');
    expect((err as GitError).message).toMatch(/^git cat-file failed \(exit 128\): fatal: /);
  });

  it('keeps the end of a long stderr, where git says why, and an error carries only its last part', async () => {
    // The trace line repeats the name: more stderr than is kept, with git's reason at its end.
    const name = `${'x'.repeat(200)}/`.repeat(15);
    const traced = { ...repo, env: { ...repo.env, GIT_TRACE: '1' } };
    const err = (await git(['show', name], traced).catch((e: unknown) => e)) as GitError;
    expect(err.command).toBe('show');
    expect(err.stderr.length).toBe(4000);
    expect(err.stderr).not.toContain('trace: ');
    expect(err.message.length).toBeLessThan(1600);
    expect(err.message).toMatch(/^git show failed \(exit 128\): [x/]+': unknown revision/);
    expect(err.message).toContain("Use '--' to separate paths from revisions");
  });

  it('refuses output over its bound instead of holding it', async () => {
    const big = await blob('y'.repeat(100_000));
    await expect(git(['cat-file', 'blob', big], { ...repo, maxOutput: 10_000 })).rejects.toThrow(
      'git cat-file printed more than 10000 bytes',
    );
  });

  it('hands over records as they come and stops git when told', async () => {
    const sha = await blob('z\n');
    const lines = Array.from({ length: 5000 }, (_, i) => `100644 blob ${sha}\tf${i}\n`).join('');
    const tree = (await gitText(['mktree'], { ...repo, input: lines })).trim();
    const seen: string[] = [];
    await gitRecords(['ls-tree', '-z', '--name-only', tree], repo, '\0', (r) => {
      seen.push(r);
      return seen.length < 3;
    });
    expect(seen).toHaveLength(3);
    const all: string[] = [];
    await gitRecords(['ls-tree', '--name-only', tree], repo, '\n', (r) => void all.push(r));
    expect(all).toHaveLength(5000);
    await expect(gitRecords(['ls-tree', 'nope'], repo, '\n', () => true)).rejects.toThrow(
      /^git ls-tree failed \(exit 128\)/,
    );
  });

  it('streams output into a file', async () => {
    const content = 'w'.repeat(300_000);
    const sha = await blob(content);
    const file = path.join(dir, 'out');
    await gitInto(['cat-file', 'blob', sha], repo, createWriteStream(file));
    expect(readFileSync(file, 'utf8')).toBe(content);
  });
});
