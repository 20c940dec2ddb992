/**
 * The host-side git store: one bare staging repository under the data directory that holds, per
 * run, the resolved base, every worker's commits and the integrated result as refs. Workflow
 * history only ever names these refs and SHAs. This is also the only place that talks to the
 * user's remote, so the git credential never leaves the host process.
 *
 * With a shared store (FLOTILLA_STAGING_URL) consecutive activities of a run may run on different
 * hosts: the local repository is then this host's cache of the shared one. An activity pulls the
 * run's refs before it reads them, and every ref written here is published there at once, so
 * whatever a later activity needs is in the shared store wherever that activity runs.
 */
import { createReadStream, createWriteStream, existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { spawn } from 'node:child_process';
import { pipeline } from 'node:stream/promises';
import { simpleGit, type SimpleGit } from 'simple-git';
import { setting, tokenHosts } from '../config/settings';
import { permanent } from '../contracts/failures';
import { redact } from '../store/secrets';

/** The ref every bundle exchanged with a sandbox carries. */
export const BUNDLE_REF = 'refs/flotilla/export';

export function runRef(runKey: string, name: string): string {
  return `refs/flotilla/${runKey}/${name}`;
}

/** The run a ref made by runRef belongs to. */
export function runKeyOfRef(ref: string): string {
  const m = /^refs\/flotilla\/([A-Za-z0-9_-]+)\//.exec(ref);
  if (!m) throw permanent('InvalidRequest', `not a run's staging ref: ${ref.slice(0, 200)}`);
  return m[1];
}

/** Where the shared store keeps an artifact (a log, by the sha256 of its content) as a blob. */
export function artifactRef(hex: string): string {
  return `refs/flotilla/artifacts/${hex}`;
}

/**
 * Environment for git commands that reach `url`. The token (FLOTILLA_GIT_TOKEN) travels as an
 * HTTP header through GIT_CONFIG_* variables, so it is never part of a URL, an argument list or
 * a log line; and only to an https URL whose host the worker allows (tokenHosts), as a header
 * scoped to that origin (`http.https://host/.extraHeader`), so a request for any other URL, a
 * redirect to another host included, does not carry it. Only transports that cannot execute
 * programs are allowed.
 */
function remoteEnv(url: string, protocols = 'file:https:ssh'): Record<string, string> {
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: process.env.HOME ?? os.homedir(),
    GIT_TERMINAL_PROMPT: '0',
    GIT_ALLOW_PROTOCOL: protocols,
  };
  for (const name of ['SSH_AUTH_SOCK', 'GIT_SSH_COMMAND', 'GIT_SSL_CAINFO']) {
    const value = process.env[name];
    if (value) env[name] = value;
  }
  const token = setting('FLOTILLA_GIT_TOKEN');
  const origin = tokenOrigin(url);
  if (token && origin) {
    const basic = Buffer.from(`x-access-token:${token}`).toString('base64');
    Object.assign(env, {
      GIT_CONFIG_COUNT: '1',
      GIT_CONFIG_KEY_0: `http.${origin}/.extraHeader`,
      GIT_CONFIG_VALUE_0: `Authorization: Basic ${basic}`,
    });
  }
  return env;
}

/** The origin ("https://host[:port]") the token may be sent to for `url`, or undefined. */
export function tokenOrigin(url: string, hosts: string[] = tokenHosts()): string | undefined {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return undefined;
  }
  if (u.protocol !== 'https:') return undefined;
  return hosts.includes(u.host.toLowerCase()) ? u.origin : undefined;
}

/** Error text safe to show: a credential that git echoed back is masked. */
export function scrubSecrets(text: string): string {
  const token = setting('FLOTILLA_GIT_TOKEN');
  let out = text.replace(/(https?:\/\/)[^/@\s]+@/g, '$1***@');
  if (token) out = out.split(token).join('***');
  return redact(out);
}

/** The shared store could not be reached or refused: retryable, and never the agent's doing. */
export class SharedStoreError extends Error {
  name = 'SharedStoreError';
}

export type PushOutcome =
  { outcome: 'pushed'; remoteSha: string } | { outcome: 'raced'; remoteSha: string | null; message: string };

export class StagingRepo {
  /** For commands that stay on the host (no remote, so no credential). */
  private readonly git: SimpleGit;
  /** For the shared store; git:// is allowed here only, for the operator's own URL (never a request's). */
  private readonly sharedGit?: SimpleGit;

  /** `shared`: the URL of the shared store (validated by config.stagingUrl), when there is one. */
  private constructor(
    readonly dir: string,
    readonly shared?: string,
  ) {
    this.git = StagingRepo.gitWith(dir, remoteEnv(''));
    if (shared) this.sharedGit = StagingRepo.gitWith(dir, remoteEnv(shared, 'file:https:ssh:git'));
  }

  /** Git for commands that reach `url`, with the credential that URL may have. */
  private remote(url: string): SimpleGit {
    return StagingRepo.gitWith(this.dir, remoteEnv(url));
  }

  private static gitWith(dir: string, env: Record<string, string>): SimpleGit {
    // simple-git refuses GIT_* variables unless they are named here; these are ours on purpose.
    // GIT_CONFIG_COUNT carries only our http.extraHeader (the token) and GIT_SSH_COMMAND is the
    // operator's own setting from the worker's environment; neither comes from a request.
    const allowEnvironment = Object.keys(env).filter((k) => k.startsWith('GIT_'));
    return simpleGit({
      baseDir: dir,
      allowEnvironment,
      unsafe: { allowUnsafeConfigEnvCount: true, allowUnsafeSshCommand: true },
    }).env(env);
  }

  /** Opens (or creates, private to this user) the staging repository under `dataDir`. */
  static async open(dataDir: string, shared?: string): Promise<StagingRepo> {
    const dir = path.join(dataDir, 'staging.git');
    if (!existsSync(path.join(dir, 'HEAD'))) {
      await mkdir(dir, { recursive: true, mode: 0o700 });
      await simpleGit({ baseDir: dir }).init(true, ['--shared=0600']);
    }
    return new StagingRepo(dir, shared);
  }

  /**
   * Brings the refs of run `runKey` from the shared store into this cache (a no-op without one).
   * No --prune: a ref written here a moment ago may not be published yet, and a deletion is
   * applied on both sides by deleteRef.
   */
  async pull(runKey: string): Promise<void> {
    if (!this.shared) return;
    if (!/^[A-Za-z0-9_-]+$/.test(runKey)) throw permanent('InvalidRequest', `not a run key: ${runKey.slice(0, 100)}`);
    const refs = `refs/flotilla/${runKey}/*`;
    await this.onShared('fetch', [
      'fetch',
      '--no-tags',
      '--quiet',
      '--no-write-fetch-head',
      '--',
      this.shared,
      `+${refs}:${refs}`,
    ]);
  }

  /**
   * Makes `sha` (a commit of this cache that no ref names yet, such as a merge computed here)
   * reachable in the shared store for the activities of `runKey` that come next, wherever they
   * run. Without a shared store nothing is written.
   */
  async share(runKey: string, sha: string): Promise<void> {
    await this.publish(runRef(runKey, `commits/${sha}`), sha);
  }

  /** Removes `ref` here and from the shared store. */
  async deleteRef(ref: string): Promise<void> {
    await this.deleteRefs([ref]);
  }

  /** Removes `refs` here (in one transaction) and from the shared store (a push per thousand, to stay under the argument limit). */
  async deleteRefs(refs: string[]): Promise<void> {
    if (refs.length === 0) return;
    const r = await runGit(
      this.dir,
      ['update-ref', '--stdin'],
      Buffer.from(refs.map((ref) => `delete ${ref}\n`).join('')),
    );
    if (r.code !== 0) throw new Error(`git update-ref failed in ${this.dir}: ${r.stderr.trim()}`);
    // Deleting a ref the shared store does not have is a warning, not an error.
    for (let i = 0; this.shared && i < refs.length; i += 1000) {
      await this.onShared('push', [
        'push',
        '--quiet',
        '--',
        this.shared,
        ...refs.slice(i, i + 1000).map((ref) => `:${ref}`),
      ]);
    }
  }

  /** The refs under `prefix` in the shared store (empty without one). */
  async sharedRefs(prefix: string): Promise<string[]> {
    if (!this.shared) return [];
    const out = await this.onShared('list', ['ls-remote', '--refs', '--', this.shared, `${prefix}*`]);
    return out
      .split('\n')
      .filter(Boolean)
      .map((line) => line.split('\t')[1]);
  }

  /** Publishes `file` as the blob `ref` names in the shared store; git reads the file, this process never does. */
  async publishBlob(ref: string, file: string): Promise<void> {
    if (!this.shared) return;
    const sha = (await this.git.raw(['hash-object', '-w', '--', file])).trim();
    await this.publish(ref, sha);
  }

  /**
   * Streams the blob `ref` names in the shared store to `file`; false when the store has no such
   * ref. The fetch goes to a ref of its own, removed afterwards, so concurrent readers do not
   * meet and the cache keeps no reference to the copy.
   */
  async fetchBlob(ref: string, file: string): Promise<boolean> {
    if (!this.shared) return false;
    const temp = `refs/flotilla-fetch/${process.pid}-${Math.random().toString(36).slice(2)}`;
    try {
      await this.onShared('fetch', [
        'fetch',
        '--no-tags',
        '--quiet',
        '--no-write-fetch-head',
        '--',
        this.shared,
        `+${ref}:${temp}`,
      ]);
    } catch (err) {
      if (/couldn't find remote ref/.test(String(err))) return false;
      throw err;
    }
    try {
      const child = spawn('git', ['cat-file', 'blob', temp], {
        cwd: this.dir,
        env: remoteEnv(''),
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stderr = '';
      child.stderr.on('data', (b: Buffer) => (stderr = (stderr + b.toString()).slice(-1000)));
      const exited = new Promise<number | null>((resolve, reject) => child.on('error', reject).on('close', resolve));
      await pipeline(child.stdout, createWriteStream(file, { mode: 0o600 }));
      const code = await exited;
      if (code !== 0) throw new Error(`git cat-file failed for ${ref}: ${stderr.trim()}`);
    } finally {
      await runGit(this.dir, ['update-ref', '-d', temp], Buffer.alloc(0));
    }
    return true;
  }

  /** Forced push of `sha` to `ref` in the shared store (by SHA: a concurrent pull cannot change what is published). */
  private async publish(ref: string, sha: string): Promise<void> {
    if (!this.shared) return;
    try {
      await this.onShared('push', ['push', '--quiet', '--no-verify', '--', this.shared, `+${sha}:${ref}`]);
    } catch (err) {
      // Two hosts publishing one ref at once (the same log, stored by two workers) race for the
      // store's ref lock; the loser finds the ref already where it wanted it.
      const listed = await this.onShared('list', ['ls-remote', '--', this.shared, ref]);
      if (listed.split('\n').some((line) => line === `${sha}\t${ref}`)) return;
      throw err;
    }
  }

  /** Runs git against the shared store; a failure says so, with any credential masked. */
  private async onShared(what: 'fetch' | 'push' | 'list', args: string[]): Promise<string> {
    try {
      return await this.sharedGit!.raw(args);
    } catch (err) {
      const why = scrubSecrets(err instanceof Error ? err.message : String(err))
        .trim()
        .split('\n')
        .slice(-3)
        .join('; ');
      throw new SharedStoreError(
        `cannot ${what} ${what === 'push' ? 'to' : 'from'} the shared store (FLOTILLA_STAGING_URL ${scrubSecrets(this.shared!)}): ${why.slice(0, 500)}`,
      );
    }
  }

  /** Runs git on the staging repository for host-side checks; see src/git/verify.ts. */
  raw(args: string[]): Promise<string> {
    return this.git.raw(args);
  }

  /**
   * Runs git and hands each `sep`-terminated record of its output to `onRecord` as it arrives,
   * with no cap on how much there is; `onRecord` returning false stops git early. Resolves
   * when git ends; a failure (other than being stopped) rejects with its stderr.
   */
  stream(args: string[], sep: '\n' | '\0', onRecord: (record: string) => boolean | void): Promise<void> {
    return new Promise((resolve, reject) => {
      const child = spawn('git', args, { cwd: this.dir, env: remoteEnv(''), stdio: ['ignore', 'pipe', 'pipe'] });
      let rest = '';
      let stderr = '';
      let stopped = false;
      child.stdout.setEncoding('utf8');
      child.stdout.on('data', (chunk: string) => {
        if (stopped) return;
        const parts = (rest + chunk).split(sep);
        rest = parts.pop() ?? '';
        for (const part of parts) {
          if (onRecord(part) === false) {
            stopped = true;
            child.kill();
            return;
          }
        }
      });
      child.stderr.on('data', (b: Buffer) => {
        stderr = (stderr + b.toString()).slice(-2000);
      });
      child.on('error', reject);
      child.on('close', (code) => {
        if (!stopped && rest) onRecord(rest);
        if (code === 0 || stopped) resolve();
        else reject(new Error(`git ${args[0]} failed (exit ${code}): ${stderr.trim()}`));
      });
    });
  }

  /** The content of a blob (a symlink's target); small objects only. */
  async blob(sha: string): Promise<string> {
    return this.git.raw(['cat-file', 'blob', sha]);
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
    const out = await this.remote(url).raw(['ls-remote', '--', url, `refs/heads/${branch}`]);
    const line = out.split('\n').find((l) => l.endsWith(`\trefs/heads/${branch}`));
    return line ? line.split('\t')[0] : null;
  }

  /** Fetches `branch` from the remote into `ref` and returns its SHA. */
  async fetchBranch(url: string, branch: string, ref: string): Promise<string> {
    await this.remote(url).raw(['fetch', '--no-tags', '--quiet', '--', url, `+refs/heads/${branch}:${ref}`]);
    const sha = await this.revParse(ref);
    if (!sha) throw new Error(`fetched ${branch} but ${ref} is missing`);
    await this.publish(ref, sha);
    return sha;
  }

  /**
   * Runs `fn` with a path for a bundle in a fresh private directory of the data directory (not
   * /tmp, which may be memory), removed afterwards. Bundles travel between the host and a sandbox
   * as files, streamed, never whole in memory: see Sandbox.copyIn and copyOut.
   */
  async withBundleFile<T>(fn: (file: string) => Promise<T>): Promise<T> {
    const parent = path.join(path.dirname(this.dir), 'transfer');
    await mkdir(parent, { recursive: true, mode: 0o700 });
    const tmp = await mkdtemp(path.join(parent, 'bundle-'));
    try {
      return await fn(path.join(tmp, 'transfer.bundle'));
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
  }

  /** Writes to `file` a bundle of `ref` (minus history reachable from `exclude`); readers fetch it by the same name. */
  async createBundle(file: string, ref: string, exclude?: string): Promise<void> {
    const args = ['bundle', 'create', '--quiet', file, ref];
    if (exclude) args.push(`^${exclude}`);
    await this.git.raw(args);
  }

  /**
   * Writes to `file` a bundle of `ref`'s commit alone, for a seed that needs no history (a cloud
   * sandbox): made in a temporary shallow repository, since a bundle of the staging repository
   * always names the commit's parents. The reader records `sha` in .git/shallow before fetching it.
   */
  async createShallowBundle(file: string, ref: string): Promise<void> {
    const tmp = await mkdtemp(`${file}.shallow-`);
    try {
      const git = StagingRepo.gitWith(tmp, remoteEnv(''));
      await git.init(true);
      await git.raw(['fetch', '--quiet', '--no-tags', '--depth=1', `file://${this.dir}`, `+${ref}:${ref}`]);
      await git.raw(['bundle', 'create', '--quiet', file, ref]);
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
  }

  /**
   * Stores the commits of a bundle file made by a sandbox (carrying BUNDLE_REF) under `ref`;
   * returns the head SHA. The bundle is untrusted: its pack goes through `git index-pack
   * --strict`, which refuses malformed objects and broken links (a bundle fetch in git 2.39 does
   * not fsck). The pack is streamed from the file.
   */
  async importBundle(file: string, ref: string): Promise<string> {
    const { head, packOffset } = await readBundleHeader(file);
    const r = await runGit(
      this.dir,
      ['index-pack', '--stdin', '--fix-thin', '--strict'],
      createReadStream(file, { start: packOffset }),
    );
    if (r.code !== 0) {
      throw permanent(
        'CorruptObjects',
        `the worker's commits failed git's integrity check: ${r.stderr.trim().split('\n').slice(-3).join('; ').slice(0, 500)}`,
      );
    }
    await this.git.raw(['update-ref', ref, head]);
    const sha = await this.revParse(ref);
    if (sha !== head) throw permanent('CorruptObjects', `the imported bundle names ${head}, which is not a commit`);
    await this.publish(ref, sha);
    return sha;
  }

  async setRef(ref: string, sha: string): Promise<void> {
    await this.git.raw(['update-ref', ref, sha]);
    await this.publish(ref, sha);
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
      await this.remote(url).raw([
        'push',
        '--quiet',
        '--porcelain',
        `--force-with-lease=refs/heads/${branch}:${expected ?? ''}`,
        '--',
        url,
        `${sha}:refs/heads/${branch}`,
      ]);
    } catch (err) {
      const after = await this.remoteBranchSha(url, branch);
      if (after === sha) return { outcome: 'pushed', remoteSha: sha };
      if (after !== expected) {
        return {
          outcome: 'raced',
          remoteSha: after,
          message: `${branch} moved on the remote during the push (now ${after ?? 'absent'})`,
        };
      }
      throw new Error(scrubSecrets(err instanceof Error ? err.message : String(err)));
    }
    return { outcome: 'pushed', remoteSha: sha };
  }
}

/** The most a bundle's header (its refs and prerequisites) may take; a sandbox's has a handful of lines. */
const MAX_BUNDLE_HEADER = 1024 * 1024;

/**
 * Reads a bundle's (v2 or v3) header: the commit it names for BUNDLE_REF and where its pack
 * starts. The header ends at the first empty line.
 */
async function readBundleHeader(file: string): Promise<{ head: string; packOffset: number }> {
  let text = Buffer.alloc(0);
  for await (const chunk of createReadStream(file, { end: MAX_BUNDLE_HEADER - 1, highWaterMark: 64 * 1024 })) {
    text = Buffer.concat([text, chunk as Buffer]);
    if (text.includes('\n\n')) break;
  }
  const end = text.indexOf('\n\n');
  const header = end > 0 ? text.subarray(0, end).toString('utf8').split('\n') : [];
  if (!/^# v[23] git bundle$/.test(header[0] ?? ''))
    throw permanent('CorruptObjects', "the worker's bundle is not a git bundle");
  const line = header.find((l) => /^[0-9a-f]{40} /.test(l) && l.slice(41) === BUNDLE_REF);
  if (!line) throw permanent('CorruptObjects', `the worker's bundle does not carry ${BUNDLE_REF}`);
  return { head: line.slice(0, 40), packOffset: end + 2 };
}

/** Runs git with `input` on its stdin, a stream piped as it is read (simple-git cannot feed stdin). */
function runGit(dir: string, args: string[], input: Buffer | Readable): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('git', args, { cwd: dir, env: remoteEnv(''), stdio: ['pipe', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (b: Buffer) => {
      stderr = (stderr + b.toString()).slice(-4000);
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? -1, stderr }));
    child.stdin.on('error', () => undefined); // git may exit before reading it all; its exit code says why
    if (Buffer.isBuffer(input)) {
      child.stdin.end(input);
      return;
    }
    input.on('error', (err) => {
      child.kill();
      reject(err);
    });
    input.pipe(child.stdin);
  });
}
