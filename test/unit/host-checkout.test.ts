/**
 * A test run's checkout made by the host alone (src/git/host-checkout.ts), on a real bare
 * repository and workspace directory: the `.git` it writes is one git works in (clean status,
 * HEAD, the run's objects from its pack and the base's through alternates), whatever `.git` the
 * last run left is gone, and what a hostile run did afterwards is read from the host's index and
 * from `.git` as plain files, never through a link it planted.
 */
import { execFileSync } from 'node:child_process';
import { lstatSync, mkdirSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { simpleGit } from 'simple-git';
import { describe, expect, it } from 'vitest';
import { checkoutOnHost, traceTestRun } from '../../src/git/host-checkout';
import type { HostWorkspace } from '../../src/sandbox/types';
import { makeRemote } from '../support/remotes';
import { tempDir } from '../support/temp';

const UID = 200_124;
const asRoot = process.getuid?.() === 0;

/** A staging repository with a base and a next commit, a run mirror holding the base only, and an empty workspace. */
async function repository() {
  const remote = await makeRemote({ 'a.txt': 'alpha\n', 'dir/c.txt': 'gamma\n', '.gitignore': 'out/\n' });
  const work = simpleGit(path.join(remote.root, 'work'));
  const base = (await work.revparse(['HEAD'])).trim();
  writeFileSync(path.join(remote.root, 'work', 'a.txt'), 'ALPHA\n');
  writeFileSync(path.join(remote.root, 'work', 'new.txt'), 'new\n');
  await work.add('.').commit('next');
  const next = (await work.revparse(['HEAD'])).trim();
  await work.push(remote.url, 'HEAD:refs/heads/next');
  const root = tempDir('host-checkout');
  const mirror = path.join(root, 'mirror.git');
  await simpleGit().clone(remote.url, mirror, ['--bare', '--single-branch', '-b', 'main']);
  const hw: HostWorkspace = { dir: path.join(root, 'workspace'), state: path.join(root, 'host-tree'), uid: UID };
  mkdirSync(hw.dir);
  const checkout = (sha: string) =>
    checkoutOnHost(hw, remote.url, { sha, baseSha: base, alternates: path.join(mirror, 'objects') });
  return { staging: remote.url, base, next, hw, root, checkout };
}

/** Git in the workspace, as a test command would run it (the files are another uid's). */
const gitIn = (dir: string) => {
  const raw = async (args: string[]) =>
    execFileSync('git', ['-c', 'safe.directory=*', ...args], {
      cwd: dir,
      encoding: 'utf8',
      env: { PATH: process.env.PATH },
    });
  return { raw, revparse: (args: string[]) => raw(['rev-parse', ...args]) };
};

describe('a test checkout made by the host', () => {
  it('is a repository git works in: HEAD at the commit, a clean status, the run’s objects and the base’s', async () => {
    const r = await repository();
    await r.checkout(r.next);
    // The sandbox's uid's, before any git of this test rewrites the index as root.
    if (asRoot)
      for (const f of ['.git', '.git/index', '.git/objects/pack'])
        expect(statSync(path.join(r.hw.dir, f)).uid).toBe(UID);
    const git = gitIn(r.hw.dir);
    expect((await git.revparse(['HEAD'])).trim()).toBe(r.next);
    expect((await git.raw(['status', '--porcelain', '--untracked-files=all'])).trim()).toBe('');
    expect(await git.raw(['show', 'HEAD:new.txt'])).toBe('new\n');
    expect(await git.raw(['show', `${r.base}:a.txt`])).toBe('alpha\n');
    expect((await git.raw(['log', '--format=%s'])).trim().split('\n')).toEqual(['next', 'initial']);
    expect((await git.raw(['config', 'user.name'])).trim()).toBe('Flotilla integration');
    // Nothing of the run's own in the pack but what lies past the base.
    const packs = readdirSync(path.join(r.hw.dir, '.git/objects/pack'));
    expect(packs.filter((p) => p.endsWith('.pack'))).toHaveLength(1);
  });

  it('replaces whatever `.git` the last run left, hooks and all', async () => {
    const r = await repository();
    await r.checkout(r.base);
    mkdirSync(path.join(r.hw.dir, '.git/hooks'), { recursive: true });
    writeFileSync(path.join(r.hw.dir, '.git/hooks/post-checkout'), '#!/bin/sh\ntouch /tmp/pwned\n', { mode: 0o755 });
    writeFileSync(path.join(r.hw.dir, '.git/config'), '[core]\n\tfsmonitor = touch /tmp/pwned\n');
    await r.checkout(r.next);
    expect(readdirSync(path.join(r.hw.dir, '.git')).sort()).toEqual(['HEAD', 'config', 'index', 'objects', 'refs']);
    expect((await gitIn(r.hw.dir).revparse(['HEAD'])).trim()).toBe(r.next);
  });

  it('reads what a run changed from the host’s index, ignored files left out, and where it moved HEAD', async () => {
    const r = await repository();
    await r.checkout(r.next);
    expect(await traceTestRun(r.hw, r.staging)).toEqual({ head: r.next, changed: [] });
    writeFileSync(path.join(r.hw.dir, 'a.txt'), 'EVIL!\n');
    writeFileSync(path.join(r.hw.dir, 'planted.txt'), 'x');
    mkdirSync(path.join(r.hw.dir, 'out'));
    writeFileSync(path.join(r.hw.dir, 'out/ignored.txt'), 'x');
    rmSync(path.join(r.hw.dir, 'dir/c.txt'));
    const git = gitIn(r.hw.dir);
    await git.raw(['-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-qam', 'sneaked in']);
    const moved = (await git.revparse(['HEAD'])).trim();
    const trace = await traceTestRun(r.hw, r.staging);
    expect(trace.head).toBe(moved);
    expect(trace.changed.sort()).toEqual(['a.txt', 'dir/c.txt', 'planted.txt']);
  });

  it('follows HEAD to a branch it made, and never through a link it planted', async () => {
    const r = await repository();
    await r.checkout(r.next);
    await gitIn(r.hw.dir).raw(['switch', '-q', '-c', 'mine']);
    expect((await traceTestRun(r.hw, r.staging)).head).toBe(r.next);
    // A HEAD that is a link to a host file holding an object id: not read.
    const outside = path.join(r.root, 'outside');
    writeFileSync(outside, `${r.base}\n`);
    rmSync(path.join(r.hw.dir, '.git/HEAD'));
    symlinkSync(outside, path.join(r.hw.dir, '.git/HEAD'));
    expect((await traceTestRun(r.hw, r.staging)).head).toBeUndefined();
    // Nor a `.git` that is itself a link.
    rmSync(path.join(r.hw.dir, '.git'), { recursive: true });
    mkdirSync(path.join(r.root, 'elsewhere'));
    writeFileSync(path.join(r.root, 'elsewhere/HEAD'), `${r.base}\n`);
    symlinkSync(path.join(r.root, 'elsewhere'), path.join(r.hw.dir, '.git'));
    expect((await traceTestRun(r.hw, r.staging)).head).toBeUndefined();
    expect(lstatSync(path.join(r.hw.dir, '.git')).isSymbolicLink()).toBe(true);
  });

  it('makes nothing again in a workspace destroyed meanwhile', async () => {
    const r = await repository();
    await r.checkout(r.base);
    rmSync(r.root, { recursive: true });
    await expect(r.checkout(r.next)).rejects.toThrow();
    expect(() => lstatSync(r.root)).toThrow();
  });
});
