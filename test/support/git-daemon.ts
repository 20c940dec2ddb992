/** A shared store as several hosts reach it: a bare repository served by `git daemon` (part of git) on loopback. */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { simpleGit } from 'simple-git';
import { releaseAtEnd } from './cleanup';
import { freePort } from './ports';
import { run, waitFor } from './processes';
import { tempDir } from './temp';

export interface ServedStore {
  /** The git:// URL workers are given as FLOTILLA_STAGING_URL. */
  url: string;
  /** The bare repository on disk, for the test to inspect. */
  dir: string;
  /** Its refs under `prefix`. */
  refs(prefix?: string): Promise<string[]>;
}

async function bareRepo(root: string): Promise<string> {
  const dir = path.join(root, 'store.git');
  mkdirSync(dir);
  await simpleGit(dir).init(true);
  return dir;
}

function refsOf(dir: string) {
  return async (prefix = 'refs/flotilla/') =>
    (await simpleGit(dir).raw(['for-each-ref', '--format=%(refname)', prefix])).split('\n').filter(Boolean);
}

/**
 * A store served read-write by git daemon on `address` (default loopback) at a free port; ready
 * when it answers ls-remote, stopped when the test (or file) ends.
 */
export async function serveStore(address = '127.0.0.1'): Promise<ServedStore> {
  const root = tempDir('store');
  const dir = await bareRepo(root);
  const port = await freePort();
  const daemon: ChildProcess = spawn(
    'git',
    [
      'daemon',
      '--reuseaddr',
      '--export-all',
      '--enable=receive-pack',
      `--base-path=${root}`,
      `--listen=${address}`,
      `--port=${port}`,
      root,
    ],
    { stdio: 'ignore' },
  );
  const exited = new Promise((resolve) => daemon.once('exit', resolve));
  releaseAtEnd(async () => {
    if (daemon.exitCode === null && daemon.signalCode === null) daemon.kill();
    await exited;
  });
  const url = `git://${address}:${port}/store.git`;
  await waitFor('git daemon to answer', async () =>
    (await run('git', ['ls-remote', url])).code === 0 ? true : undefined,
  );
  return { url, dir, refs: refsOf(dir) };
}

/** A store reached as file://, as a shared volume would be. */
export async function fileStore(): Promise<ServedStore> {
  const root = tempDir('store');
  const dir = await bareRepo(root);
  return { url: `file://${dir}`, dir, refs: refsOf(dir) };
}
