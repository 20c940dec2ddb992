/**
 * The host-side git store: one bare staging repository under the data directory that holds, per
 * run, the resolved base, every worker's commits and the integrated result as refs. Workflow
 * history only ever names these refs and SHAs. This is also the only place that talks to the
 * user's remote, so the git credential never leaves the host process.
 */
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { simpleGit, type SimpleGit } from 'simple-git';

/** The ref every bundle exchanged with a sandbox carries. */
export const BUNDLE_REF = 'refs/flotilla/export';

export function runRef(runKey: string, name: string): string {
  return `refs/flotilla/${runKey}/${name}`;
}

/**
 * Environment for git commands that reach the remote. The token (FLOTILLA_GIT_TOKEN) travels as
 * an HTTP header through GIT_CONFIG_* variables, so it is never part of a URL, an argument list
 * or a log line. Only transports that cannot execute programs are allowed.
 */
function remoteEnv(): Record<string, string> {
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: process.env.HOME ?? os.homedir(),
    GIT_TERMINAL_PROMPT: '0',
    GIT_ALLOW_PROTOCOL: 'file:https:ssh',
  };
  if (process.env.SSH_AUTH_SOCK) env.SSH_AUTH_SOCK = process.env.SSH_AUTH_SOCK;
  if (process.env.GIT_SSH_COMMAND) env.GIT_SSH_COMMAND = process.env.GIT_SSH_COMMAND;
  const token = process.env.FLOTILLA_GIT_TOKEN;
  if (token) {
    const basic = Buffer.from(`x-access-token:${token}`).toString('base64');
    Object.assign(env, {
      GIT_CONFIG_COUNT: '1',
      GIT_CONFIG_KEY_0: 'http.extraHeader',
      GIT_CONFIG_VALUE_0: `Authorization: Basic ${basic}`,
    });
  }
  return env;
}

/** Error text safe to show: a credential that git echoed back is masked. */
export function scrubSecrets(text: string): string {
  const token = process.env.FLOTILLA_GIT_TOKEN;
  let out = text.replace(/(https?:\/\/)[^/@\s]+@/g, '$1***@');
  if (token) out = out.split(token).join('***');
  return out;
}

export type PushOutcome =
  | { outcome: 'pushed'; remoteSha: string }
  | { outcome: 'raced'; remoteSha: string | null; message: string };

export class StagingRepo {
  private readonly git: SimpleGit;

  private constructor(readonly dir: string) {
    const env = remoteEnv();
    // simple-git refuses GIT_* variables unless they are named here; these are ours on purpose.
    const allowEnvironment = Object.keys(env).filter((k) => k.startsWith('GIT_'));
    // GIT_CONFIG_COUNT carries only our http.extraHeader (the token) and GIT_SSH_COMMAND is the
    // operator's own setting from the worker's environment; neither comes from a request.
    this.git = simpleGit({
      baseDir: dir,
      allowEnvironment,
      unsafe: { allowUnsafeConfigEnvCount: true, allowUnsafeSshCommand: true },
    }).env(env);
  }

  static async open(dataDir: string): Promise<StagingRepo> {
    const dir = path.join(dataDir, 'staging.git');
    if (!existsSync(path.join(dir, 'HEAD'))) {
      await mkdir(dir, { recursive: true });
      await simpleGit({ baseDir: dir }).init(true);
    }
    return new StagingRepo(dir);
  }

  async revParse(ref: string): Promise<string | null> {
    try {
      return (await this.git.raw(['rev-parse', '--verify', '--quiet', `${ref}^{commit}`])).trim() || null;
    } catch {
      return null;
    }
  }

  /** The SHA `branch` has on the remote, or null when it does not exist there. */
  async remoteBranchSha(url: string, branch: string): Promise<string | null> {
    const out = await this.git.raw(['ls-remote', '--', url, `refs/heads/${branch}`]);
    const line = out.split('\n').find((l) => l.endsWith(`\trefs/heads/${branch}`));
    return line ? line.split('\t')[0] : null;
  }

  /** Fetches `branch` from the remote into `ref` and returns its SHA. */
  async fetchBranch(url: string, branch: string, ref: string): Promise<string> {
    await this.git.raw(['fetch', '--no-tags', '--quiet', '--', url, `+refs/heads/${branch}:${ref}`]);
    const sha = await this.revParse(ref);
    if (!sha) throw new Error(`fetched ${branch} but ${ref} is missing`);
    return sha;
  }

  /** A bundle of `ref` (minus history reachable from `exclude`); readers fetch it by the same name. */
  async createBundle(ref: string, exclude?: string): Promise<Uint8Array> {
    const tmp = await mkdtemp(path.join(os.tmpdir(), 'flotilla-bundle-'));
    try {
      const file = path.join(tmp, 'out.bundle');
      const args = ['bundle', 'create', '--quiet', file, ref];
      if (exclude) args.push(`^${exclude}`);
      await this.git.raw(args);
      return await readFile(file);
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
  }

  /** Stores the commits of a bundle made by a sandbox (carrying BUNDLE_REF) under `ref`; returns the head SHA. */
  async importBundle(bytes: Uint8Array, ref: string): Promise<string> {
    const tmp = await mkdtemp(path.join(os.tmpdir(), 'flotilla-bundle-'));
    try {
      const file = path.join(tmp, 'in.bundle');
      await writeFile(file, bytes);
      await this.git.raw(['fetch', '--quiet', file, `+${BUNDLE_REF}:${ref}`]);
      const sha = await this.revParse(ref);
      if (!sha) throw new Error(`imported bundle but ${ref} is missing`);
      return sha;
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
  }

  async setRef(ref: string, sha: string): Promise<void> {
    await this.git.raw(['update-ref', ref, sha]);
  }

  /**
   * Compare-and-swap push of `sha` to `branch`. With `expected` null the lease is create-only:
   * the push fails if the branch appeared meanwhile. Pushing a SHA the remote already has at
   * that branch is a success, so a retried push never pushes twice.
   */
  async push(url: string, branch: string, sha: string, expected: string | null): Promise<PushOutcome> {
    const current = await this.remoteBranchSha(url, branch);
    if (current === sha) return { outcome: 'pushed', remoteSha: sha };
    if (current !== expected) {
      return {
        outcome: 'raced',
        remoteSha: current,
        message: `${branch} moved on the remote: expected ${expected ?? '(absent)'}, found ${current ?? '(absent)'}`,
      };
    }
    try {
      await this.git.raw([
        'push', '--quiet', '--porcelain',
        `--force-with-lease=refs/heads/${branch}:${expected ?? ''}`,
        '--', url, `${sha}:refs/heads/${branch}`,
      ]);
    } catch (err) {
      const after = await this.remoteBranchSha(url, branch);
      if (after === sha) return { outcome: 'pushed', remoteSha: sha };
      if (after !== expected) {
        return { outcome: 'raced', remoteSha: after, message: `${branch} moved on the remote during the push (now ${after ?? 'absent'})` };
      }
      throw new Error(scrubSecrets(err instanceof Error ? err.message : String(err)));
    }
    return { outcome: 'pushed', remoteSha: sha };
  }
}
