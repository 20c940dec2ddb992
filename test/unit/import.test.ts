/**
 * Importing bundles from sandboxes (src/git/import.ts), with real git: a bundle is taken in whole
 * or not at all. Its objects come from its own pack (never from another run's objects the staging
 * repository already holds), its head descends from the seed when that is asked, and nothing in it
 * carries a secret the worker holds.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { bundleScript } from '../../src/git/bundles';
import { ObjectScanner } from '../../src/git/import';
import { StagingRepo } from '../../src/git/staging';

// Built from pieces, as test/e2e/attacks/secrets.test.ts does.
const API_KEY = 'sk-ant-api03-' + 'Zq8mXw4UnitOnlyKey';

let root: string;
let staging: StagingRepo;
let base: string;
/** A sandbox's workspace: a clone of the base. */
let work: string;

const git = (cwd: string, ...args: string[]) =>
  execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { cwd, encoding: 'utf8' }).trim();

/** Commits `files` in `dir` and returns the commit. */
function commit(dir: string, files: Record<string, string>, message = 'work'): string {
  for (const [name, content] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
    writeFileSync(path.join(dir, name), content);
  }
  git(dir, 'add', '-A');
  git(dir, 'commit', '-qm', message);
  return git(dir, 'rev-parse', 'HEAD');
}

/** The bundle a sandbox makes of its HEAD (bundleScript), as a file. */
function sandboxBundle(exclude: string): string {
  const file = path.join(root, `bundle-${Math.random().toString(36).slice(2)}`);
  git(work, 'update-ref', 'refs/flotilla/export', 'HEAD');
  execFileSync('bash', ['-c', `set -euo pipefail\n${bundleScript(file, exclude)}`], { cwd: work });
  return file;
}

/** A bundle whose header names `head` over an empty pack. */
function forgedBundle(head: string): string {
  const file = path.join(root, 'forged.bundle');
  const pack = execFileSync('git', ['pack-objects', '--stdout', '-q'], { cwd: work, input: '' });
  writeFileSync(file, Buffer.concat([Buffer.from(`# v2 git bundle\n${head} refs/flotilla/export\n\n`), pack]));
  return file;
}

const packs = () => readdirSync(path.join(staging.dir, 'objects', 'pack')).sort();

beforeEach(async () => {
  root = mkdtempSync(path.join(os.tmpdir(), 'flotilla-import-'));
  staging = await StagingRepo.open(path.join(root, 'data'));
  const origin = path.join(root, 'origin');
  mkdirSync(origin);
  git(origin, 'init', '-q', '-b', 'main');
  base = commit(origin, { 'README.md': '# r\n', 'src/a.txt': 'a\n'.repeat(200) }, 'base');
  await staging.raw(['fetch', '-q', origin, `+main:refs/flotilla/run-1/base`]);
  work = path.join(root, 'work');
  git(root, 'clone', '-q', origin, work);
});
afterEach(() => {
  vi.unstubAllEnvs();
  rmSync(root, { recursive: true, force: true });
});

/** Another run's hidden tests in the staging repository: a commit no sandbox of run-1 was given. */
async function anotherRunsCommit(): Promise<string> {
  const other = path.join(root, 'other');
  mkdirSync(other);
  git(other, 'init', '-q', '-b', 'main');
  const sha = commit(other, { 'hidden.test.sh': 'assert the secret answer is 42\n' }, 'hidden tests');
  await staging.raw(['fetch', '-q', other, '+main:refs/flotilla/run-2/oracle']);
  return sha;
}

const importOf = { what: 'the checkpoint of api', seed: '' };

describe('a bundle from a sandbox', () => {
  it("is imported with its own objects, and names the sandbox's commit", async () => {
    const head = commit(work, { 'src/a.txt': 'a\n'.repeat(199) + 'b\n', 'src/new.txt': 'new\n' });
    const imported = await staging.importBundle(sandboxBundle(base), 'refs/flotilla/run-1/workers/api', {
      ...importOf,
      seed: base,
      descends: true,
    });
    expect(imported.head).toBe(head);
    expect(imported.fresh).toBe(true);
    expect(await staging.revParse('refs/flotilla/run-1/workers/api')).toBe(head);
    expect(packs()).toContain(`${imported.pack}.pack`);
  });

  it("that names another run's commit over an empty pack is refused, naming the import and not the content", async () => {
    const hidden = await anotherRunsCommit();
    const before = packs();
    const refusal = staging.importBundle(forgedBundle(hidden), 'refs/flotilla/run-1/checkpoints/api', {
      ...importOf,
      seed: base,
      descends: true,
    });
    await expect(refusal).rejects.toMatchObject({ type: 'CorruptObjects' });
    await expect(refusal).rejects.toThrow(/^the checkpoint of api: the bundle does not carry object [0-9a-f]{12}/);
    await expect(refusal).rejects.not.toThrow(/hidden|secret answer/);
    expect(await staging.revParse('refs/flotilla/run-1/checkpoints/api')).toBeNull();
    expect(packs()).toEqual(before);
  });

  it("whose new commit points at another run's file is refused: the file did not come in the bundle", async () => {
    await anotherRunsCommit();
    // The sandbox knows the id of a file of the other run (not its content) and builds a tree around it.
    const blob = (await staging.raw(['rev-parse', 'refs/flotilla/run-2/oracle:hidden.test.sh'])).trim();
    const tree = execFileSync('git', ['mktree', '--missing'], { cwd: work, input: `100644 blob ${blob}\tstolen.sh\n` })
      .toString()
      .trim();
    const forged = git(work, 'commit-tree', tree, '-p', base, '-m', 'stolen');
    // Its pack carries the commit and the tree; the file is left for the host to supply.
    const pack = execFileSync('git', ['pack-objects', '--stdout', '-q'], { cwd: work, input: `${forged}\n${tree}\n` });
    const file = path.join(root, 'stolen.bundle');
    writeFileSync(
      file,
      Buffer.concat([Buffer.from(`# v2 git bundle\n-${base}\n${forged} refs/flotilla/export\n\n`), pack]),
    );
    const refusal = staging.importBundle(file, 'refs/flotilla/run-1/workers/api', {
      what: "the worker's commits",
      seed: base,
    });
    await expect(refusal).rejects.toThrow(
      `the worker's commits: the bundle does not carry object ${blob.slice(0, 12)}, which its commits need`,
    );
  });

  it('whose pack is thin (its deltas lean on objects it does not carry) is refused', async () => {
    const head = commit(work, { 'src/a.txt': 'a\n'.repeat(199) + 'changed\n' });
    const file = path.join(root, 'thin.bundle');
    const pack = execFileSync('git', ['pack-objects', '--revs', '--thin', '--stdout', '-q'], {
      cwd: work,
      input: `${head}\n^${base}\n`,
    });
    writeFileSync(
      file,
      Buffer.concat([Buffer.from(`# v2 git bundle\n-${base}\n${head} refs/flotilla/export\n\n`), pack]),
    );
    await expect(
      staging.importBundle(file, 'refs/flotilla/run-1/workers/api', { what: "the worker's commits", seed: base }),
    ).rejects.toThrow(/^the worker's commits: the bundle failed git's integrity check: .*unresolved delta/);
  });

  it('tells what its walk showed: the commits, the lineage, the first root from elsewhere, the first large blob', async () => {
    commit(work, { 'src/big.bin': 'x'.repeat(5000) }, 'big');
    commit(work, { 'src/big.bin': 'small\n' }, 'smaller again');
    const head = git(work, 'rev-parse', 'HEAD');
    const imported = await staging.importBundle(sandboxBundle(base), 'refs/flotilla/run-1/workers/api', {
      what: "the worker's commits",
      seed: base,
      largeBlob: 4096,
    });
    const big = git(work, 'rev-parse', 'HEAD~1:src/big.bin');
    expect(imported.walked).toEqual({
      commits: 2,
      descends: true,
      headIsCommit: true,
      large: { oid: big, size: 5000 },
    });
    expect(imported.head).toBe(head);
    // A merge of a history from elsewhere: its root is named.
    git(work, 'checkout', '-q', '--orphan', 'elsewhere');
    const stray = commit(work, { 'x.txt': 'x\n' }, 'stray');
    git(work, 'checkout', '-q', 'main');
    git(work, 'merge', '-q', '--allow-unrelated-histories', '-m', 'merge', 'elsewhere');
    const merged = await staging.importBundle(sandboxBundle(base), 'refs/flotilla/run-1/workers/api', {
      what: "the worker's commits",
      seed: base,
    });
    expect(merged.walked).toMatchObject({ commits: 4, descends: true, headIsCommit: true, root: stray });
    expect(merged.walked.large).toBeUndefined();
  });

  it('that does not descend from its seed is refused when it must', async () => {
    git(work, 'checkout', '-q', '--orphan', 'elsewhere');
    commit(work, { 'x.txt': 'x\n' }, 'unrelated');
    const refusal = staging.importBundle(sandboxBundle(base), 'refs/flotilla/run-1/checkpoints/api', {
      ...importOf,
      seed: base,
      descends: true,
    });
    await expect(refusal).rejects.toMatchObject({ type: 'LineageBroken' });
    await expect(refusal).rejects.toThrow(
      /^the checkpoint of api: the bundle names [0-9a-f]{12}, which does not descend from/,
    );
  });

  it('that holds the value of a secret the worker holds is refused, naming the variable and the file, never the value', async () => {
    vi.stubEnv('ANTHROPIC_API_KEY', API_KEY);
    commit(work, { 'notes/env.txt': `PATH=/usr/bin\nANTHROPIC_API_KEY=${API_KEY}\n` }, 'env');
    commit(work, { 'notes/env.txt': 'nothing here now\n' }, 'removed again');
    const refusal = staging.importBundle(sandboxBundle(base), 'refs/flotilla/run-1/workers/api', {
      what: "the worker's commits",
      seed: base,
    });
    await expect(refusal).rejects.toMatchObject({ type: 'SecretExposed' });
    await expect(refusal).rejects.toThrow(
      `the worker's commits: "notes/env.txt" holds the value of ANTHROPIC_API_KEY, a secret this worker holds`,
    );
    await expect(refusal).rejects.not.toThrow(API_KEY);
    expect(await staging.revParse('refs/flotilla/run-1/workers/api')).toBeNull();
  });

  it('that carries a secret in a commit message is refused too', async () => {
    vi.stubEnv('FLOTILLA_GIT_TOKEN', 'ghp_unitOnlyToken0123456789');
    commit(work, { 'src/b.txt': 'b\n' }, 'token ghp_unitOnlyToken0123456789 for later');
    await expect(
      staging.importBundle(sandboxBundle(base), 'refs/flotilla/run-1/workers/api', {
        what: "the worker's commits",
        seed: base,
      }),
    ).rejects.toThrow(/the message, author or committer of commit [0-9a-f]{12} holds the value of FLOTILLA_GIT_TOKEN/);
  });

  it('whose pack says it holds more objects than the bound is refused before git reads it', async () => {
    const file = path.join(root, 'huge.bundle');
    const header = Buffer.alloc(12);
    header.write('PACK', 0, 'latin1');
    header.writeUInt32BE(2, 4);
    header.writeUInt32BE(5_000_000, 8);
    writeFileSync(file, Buffer.concat([Buffer.from(`# v2 git bundle\n${base} refs/flotilla/export\n\n`), header]));
    await expect(
      staging.importBundle(file, 'refs/flotilla/run-1/workers/api', { what: "the worker's commits", seed: base }),
    ).rejects.toThrow("the worker's commits: 5000000 objects, over the import limit of 1000000");
  });
});

describe('the scan of imported objects', () => {
  it('finds a secret however the stream splits it, and only there', () => {
    const content = Buffer.from(`${'x'.repeat(100)}${API_KEY}${'y'.repeat(50)}`);
    const stream = Buffer.concat([
      Buffer.from(`${'a'.repeat(40)} blob 5 clean.txt\nclean\n`),
      Buffer.from(`${'b'.repeat(40)} blob ${content.length} dir/leak.txt\n`),
      content,
      Buffer.from('\n'),
    ]);
    for (let size = 1; size <= 64; size += 7) {
      const scanner = new ObjectScanner([{ name: 'ANTHROPIC_API_KEY', value: API_KEY }]);
      for (let i = 0; i < stream.length && scanner.push(stream.subarray(i, i + size)); i += size);
      expect(scanner.found).toEqual({ kind: 'secret', name: 'ANTHROPIC_API_KEY', where: '"dir/leak.txt"' });
    }
    const clean = new ObjectScanner([{ name: 'ANTHROPIC_API_KEY', value: API_KEY }]);
    expect(clean.push(Buffer.from(`${'a'.repeat(40)} blob 5 clean.txt\nclean\n`))).toBe(true);
    expect(clean.found).toBeUndefined();
  });
});
