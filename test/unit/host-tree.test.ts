/**
 * The host setting a local sandbox's files (src/git/host-tree.ts) on a real bare repository and
 * workspace directory: a first checkout, a move that writes only what changed, and a reset after
 * a hostile command that rewrote a file behind the same size and mtime, planted files, a `.git`
 * and a link out of the workspace, and after a worker killed mid-way.
 */
import {
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { execFileSync } from 'node:child_process';
import { readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { simpleGit } from 'simple-git';
import { describe, expect, it } from 'vitest';
import { setHostTree } from '../../src/git/host-tree';
import type { HostWorkspace } from '../../src/sandbox/types';
import { makeRemote } from '../support/remotes';
import { tempDir } from '../support/temp';

const UID = 200_123;
const asRoot = process.getuid?.() === 0;

/** A bare repository with a base and a next commit that changes one file and removes another. */
async function repository() {
  const remote = await makeRemote({
    'a.txt': 'alpha\n',
    'b.txt': 'beta\n',
    'dir/c.txt': 'gamma\n',
    '.gitignore': 'out/\n',
  });
  const work = simpleGit(path.join(remote.root, 'work'));
  const base = (await work.revparse(['HEAD'])).trim();
  writeFileSync(path.join(remote.root, 'work', 'a.txt'), 'ALPHA\n');
  await work.rm(['b.txt']);
  await work.add('.').commit('next');
  const next = (await work.revparse(['HEAD'])).trim();
  await work.push(remote.url, 'HEAD:refs/heads/next');
  const root = tempDir('host-tree');
  const hw: HostWorkspace = { dir: path.join(root, 'workspace'), state: path.join(root, 'host-tree'), uid: UID };
  mkdirSync(hw.dir);
  return { staging: remote.url, base, next, hw, root };
}

/** Every file under `dir` but `.git`, with its contents. */
async function filesOf(dir: string, prefix = ''): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const e of await readdir(path.join(dir, prefix), { withFileTypes: true })) {
    const rel = path.join(prefix, e.name);
    if (rel === '.git') continue;
    if (e.isDirectory()) Object.assign(out, await filesOf(dir, rel));
    else out[rel] = e.isSymbolicLink() ? '<link>' : readFileSync(path.join(dir, rel), 'utf8');
  }
  return out;
}

const BASE_FILES = { '.gitignore': 'out/\n', 'a.txt': 'alpha\n', 'b.txt': 'beta\n', 'dir/c.txt': 'gamma\n' };
const NEXT_FILES = { '.gitignore': 'out/\n', 'a.txt': 'ALPHA\n', 'dir/c.txt': 'gamma\n' };

describe('the host setting a sandbox workspace', () => {
  it('checks out the base into an empty workspace, the files the sandbox uid’s', async () => {
    const r = await repository();
    expect(await setHostTree(r.hw, r.staging, r.base)).toBe('fresh');
    expect(await filesOf(r.hw.dir)).toEqual(BASE_FILES);
    if (asRoot) expect(statSync(path.join(r.hw.dir, 'dir/c.txt')).uid).toBe(UID);
  });

  it('moves to the next commit writing only what changed', async () => {
    const r = await repository();
    await setHostTree(r.hw, r.staging, r.base);
    const untouched = statSync(path.join(r.hw.dir, 'dir/c.txt')).ino;
    expect(await setHostTree(r.hw, r.staging, r.next)).toBe('moved');
    expect(await filesOf(r.hw.dir)).toEqual(NEXT_FILES);
    expect(statSync(path.join(r.hw.dir, 'dir/c.txt')).ino).toBe(untouched);
  });

  it('undoes what a hostile command did, a rewrite behind the same size and mtime included, without following its link out', async () => {
    const r = await repository();
    await setHostTree(r.hw, r.staging, r.next);
    const file = path.join(r.hw.dir, 'a.txt');
    const { atime, mtime } = statSync(file);
    writeFileSync(file, 'EVIL!\n');
    utimesSync(file, atime, mtime);
    mkdirSync(path.join(r.hw.dir, 'out'));
    writeFileSync(path.join(r.hw.dir, 'out/ignored.txt'), 'x');
    writeFileSync(path.join(r.hw.dir, 'planted.txt'), 'x');
    mkdirSync(path.join(r.hw.dir, '.git'));
    writeFileSync(path.join(r.hw.dir, '.git/config'), '[core]\n\tfsmonitor = touch /tmp/pwned\n');
    const outside = path.join(r.root, 'outside');
    mkdirSync(outside);
    writeFileSync(path.join(outside, 'c.txt'), 'the host’s\n');
    await rm(path.join(r.hw.dir, 'dir'), { recursive: true });
    symlinkSync(outside, path.join(r.hw.dir, 'dir'));
    expect(await setHostTree(r.hw, r.staging, r.next)).toBe('moved');
    expect(await filesOf(r.hw.dir)).toEqual(NEXT_FILES);
    expect(lstatSync(path.join(r.hw.dir, 'dir')).isDirectory()).toBe(true);
    expect(readFileSync(path.join(outside, 'c.txt'), 'utf8')).toBe('the host’s\n');
  });

  it.runIf(asRoot)(
    'sees a rewrite made in the second the host handed a file over, when it wrote the file the second before',
    async () => {
      const r = await repository();
      const file = path.join(r.hw.dir, 'a.txt');
      await setHostTree(r.hw, r.staging, r.base);
      // A hand-over that waits for the next second: the window where this git, which compares
      // ctimes to the second, would trust the stat it records for a file written just before. A
      // little past it: the kernel stamps files with a clock up to a tick behind `date`'s.
      const bin = tempDir('slow-chown');
      const chown = execFileSync('sh', ['-c', 'command -v chown'], { encoding: 'utf8' }).trim();
      const script = `s=$(date +%s); while [ "$(date +%s)" = "$s" ]; do sleep 0.01; done; sleep 0.05; exec ${chown} "$@"`;
      writeFileSync(path.join(bin, 'chown'), `#!/bin/sh\n${script}\n`, { mode: 0o755 });
      const PATH = process.env.PATH;
      process.env.PATH = `${bin}:${PATH}`;
      try {
        expect(await setHostTree(r.hw, r.staging, r.next)).toBe('moved');
      } finally {
        process.env.PATH = PATH;
      }
      const recorded = statSync(file);
      expect(Math.floor(recorded.mtimeMs / 1000)).toBeLessThan(Math.floor(recorded.ctimeMs / 1000));
      writeFileSync(file, 'EVIL!\n');
      utimesSync(file, recorded.atime, recorded.mtime);
      // The case itself: the rewrite kept the recorded ctime's second (the next second is far).
      expect(Math.floor(statSync(file).ctimeMs / 1000)).toBe(Math.floor(recorded.ctimeMs / 1000));
      await setHostTree(r.hw, r.staging, r.next);
      expect(readFileSync(file, 'utf8')).toBe('ALPHA\n');
    },
  );

  it('starts from an empty workspace when a worker killed mid-way left the index locked', async () => {
    const r = await repository();
    await setHostTree(r.hw, r.staging, r.base);
    writeFileSync(path.join(r.hw.state, 'index.lock'), '');
    writeFileSync(path.join(r.hw.dir, 'b.txt'), 'half-written');
    expect(await setHostTree(r.hw, r.staging, r.next)).toBe('fresh');
    expect(await filesOf(r.hw.dir)).toEqual(NEXT_FILES);
    expect(existsSync(path.join(r.hw.state, 'index.lock'))).toBe(false);
  });
});
