/** Real git "remotes": bare repositories on disk, seeded with files, and a way to inspect them. */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { simpleGit } from 'simple-git';
import { tempDir } from './temp';

export type Remote = Awaited<ReturnType<typeof makeRemote>>;

/**
 * A bare repository (`url`) whose main holds `files` in one commit, made from a work tree beside
 * it (`root/work`); scripts (`*.sh`) are executable. Removed when the test ends.
 */
export async function makeRemote(files: Record<string, string>) {
  const root = tempDir('remote');
  const work = path.join(root, 'work');
  const url = path.join(root, 'remote.git');
  mkdirSync(work);
  for (const [name, content] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(work, name)), { recursive: true });
    writeFileSync(path.join(work, name), content, { mode: name.endsWith('.sh') ? 0o755 : 0o644 });
  }
  const git = simpleGit(work);
  await git.init(['-b', 'main']);
  await git.addConfig('user.name', 'Test').addConfig('user.email', 'test@example.com');
  await git.add('.').commit('initial');
  await simpleGit().clone(work, url, ['--bare']);
  const remote = simpleGit(url);
  return {
    url,
    root,
    async head(branch = 'main'): Promise<string | null> {
      const out = await remote.raw(['rev-parse', '--verify', '--quiet', `refs/heads/${branch}`]).catch(() => '');
      return out.trim() || null;
    },
    async show(ref: string, file: string): Promise<string | null> {
      return remote.raw(['show', `${ref}:${file}`]).catch(() => null);
    },
    async files(ref = 'main'): Promise<string[]> {
      return (await remote.raw(['ls-tree', '-r', '--name-only', ref])).split('\n').filter(Boolean);
    },
    /** Commits on `ref` that are not on `since`. */
    async log(ref: string, since: string): Promise<string[]> {
      return (await remote.raw(['log', '--format=%s', `${since}..${ref}`])).split('\n').filter(Boolean);
    },
    /** Moves main forward with a commit made elsewhere (someone else pushed). */
    async advance(file: string, content: string): Promise<string> {
      await git.pull(url, 'main').catch(() => undefined);
      writeFileSync(path.join(work, file), content);
      await git.add(file).commit(`outside change to ${file}`);
      await git.push(url, 'main');
      return (await git.revparse(['HEAD'])).trim();
    },
  };
}

/** A remote like makeRemote's whose post-receive hook counts the pushes it accepts (`pushes()`). */
export async function countingRemote(files: Record<string, string>) {
  const remote = await makeRemote(files);
  const hook = path.join(remote.url, 'hooks', 'post-receive');
  writeFileSync(hook, `#!/bin/sh\necho push >> "${remote.root}/pushes"\n`, { mode: 0o755 });
  const pushes = () => {
    try {
      return readFileSync(path.join(remote.root, 'pushes'), 'utf8').split('\n').filter(Boolean).length;
    } catch {
      return 0;
    }
  };
  return { ...remote, pushes };
}
