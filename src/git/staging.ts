/**
 * The staging repository: one bare repository under the data directory that holds, per run, the
 * resolved base, every sub-task's commits and the integrated result as refs. Workflow history only
 * ever names these refs and SHAs. Every commit a sandbox hands back is imported and checked here,
 * and the push starts here (see remote.ts: the credential never leaves the host process).
 *
 * With a shared store (FLOTILLA_STAGING_URL, shared-store.ts) consecutive activities of a run may
 * run on different hosts: this repository is then this host's cache of the shared one, every ref
 * written here is published there at once, and an activity pulls its run's refs before it reads
 * them.
 */
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { permanent } from '../contracts/failures';
import { createBundle, createShallowBundle, withBundleFile } from './bundles';
import { type ImportOf, type ImportedPack, importBundleInto } from './import';
import { hostGitEnv } from './env';
import { type PushOutcome, fetchBranchInto, pushWithLease, remoteBranchSha } from './remote';
import { SharedStore } from './shared-store';
import { stagingDirOf } from './staging-dir';
import { type GitOptions, git, gitRecords, gitText, runGit } from './spawn';

export { stagingDirOf };

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

export class StagingRepo {
  private readonly store?: SharedStore;
  /** Git on this repository: the host policy. */
  private readonly local: GitOptions;

  /** `shared`: the URL of the shared store (validated by config.stagingUrl), when there is one. */
  private constructor(
    readonly dir: string,
    readonly shared?: string,
  ) {
    this.local = { repo: dir, env: hostGitEnv() };
    if (shared) this.store = new SharedStore(dir, shared);
  }

  /** Opens (or creates, private to this user) the staging repository under `dataDir`. */
  static async open(dataDir: string, shared?: string): Promise<StagingRepo> {
    const dir = stagingDirOf(dataDir);
    if (!existsSync(path.join(dir, 'HEAD'))) {
      await mkdir(dir, { recursive: true, mode: 0o700 });
      await git(['init', '--quiet', '--bare', '--shared=0600'], { repo: dir, env: hostGitEnv() });
    }
    return new StagingRepo(dir, shared);
  }

  /** Brings the refs of run `runKey` from the shared store into this cache (a no-op without one). */
  async pull(runKey: string): Promise<void> {
    await this.store?.pull(runKey);
  }

  /** Brings `ref` from the shared store into this cache, when the store has it (a no-op without one). */
  async pullRef(ref: string): Promise<void> {
    await this.store?.pullRef(ref);
  }

  /**
   * Makes `sha` (a commit of this cache that no ref names yet, such as a merge computed here)
   * reachable in the shared store for the activities of `runKey` that come next, wherever they
   * run. Without a shared store nothing is written.
   */
  async share(runKey: string, sha: string): Promise<void> {
    await this.store?.publish(runRef(runKey, `commits/${sha}`), sha);
  }

  async setRef(ref: string, sha: string): Promise<void> {
    await git(['update-ref', ref, sha], this.local);
    await this.store?.publish(ref, sha);
  }

  /** Removes `ref` here and from the shared store. */
  async deleteRef(ref: string): Promise<void> {
    await this.deleteRefs([ref]);
  }

  /** Removes `refs` here (in one transaction) and from the shared store. */
  async deleteRefs(refs: string[]): Promise<void> {
    if (refs.length === 0) return;
    await deleteLocalRefs(this.dir, refs);
    await this.store?.deleteRefs(refs);
  }

  /** The refs under `prefix` in the shared store (empty without one). */
  async sharedRefs(prefix: string): Promise<string[]> {
    return this.store ? this.store.refs(prefix) : [];
  }

  /** Publishes `file` as the blob `ref` names in the shared store (a no-op without one). */
  async publishBlob(ref: string, file: string): Promise<void> {
    await this.store?.publishBlob(ref, file);
  }

  /** Streams the blob `ref` names in the shared store to `file`; false when there is none. */
  async fetchBlob(ref: string, file: string): Promise<boolean> {
    return this.store ? this.store.fetchBlob(ref, file) : false;
  }

  /** Runs git on the staging repository for host-side checks (see verify.ts); a non-zero exit throws. */
  raw(args: string[]): Promise<string> {
    return gitText(args, this.local);
  }

  /**
   * Runs git and hands each `sep`-terminated record of its output to `onRecord` as it arrives,
   * with no cap on how much there is; `onRecord` returning false stops git early.
   */
  stream(args: string[], sep: '\n' | '\0', onRecord: (record: string) => boolean | void): Promise<void> {
    return gitRecords(args, this.local, sep, onRecord);
  }

  /** The content of a blob (a symlink's target); small objects only. */
  async blob(sha: string): Promise<string> {
    return this.raw(['cat-file', 'blob', sha]);
  }

  async revParse(ref: string): Promise<string | null> {
    try {
      return (await this.raw(['rev-parse', '--verify', '--quiet', `${ref}^{commit}`])).trim() || null;
    } catch {
      return null;
    }
  }

  /** The SHA `branch` has on the remote, or null when it does not exist there. */
  async remoteBranchSha(url: string, branch: string): Promise<string | null> {
    return remoteBranchSha(this.dir, url, branch);
  }

  /** Fetches `branch` from the remote into `ref` and returns its SHA. */
  async fetchBranch(url: string, branch: string, ref: string): Promise<string> {
    await fetchBranchInto(this.dir, url, branch, ref);
    const sha = await this.revParse(ref);
    if (!sha) throw new Error(`fetched ${branch} but ${ref} is missing`);
    await this.store?.publish(ref, sha);
    return sha;
  }

  /** Compare-and-swap push of `sha` to `branch` (see pushWithLease). */
  async push(url: string, branch: string, sha: string, expected: string | null): Promise<PushOutcome> {
    return pushWithLease(this.dir, url, { branch, sha, expected });
  }

  /** Runs `fn` with a path for a bundle, removed afterwards (see bundles.ts). */
  async withBundleFile<T>(fn: (file: string) => Promise<T>): Promise<T> {
    return withBundleFile(this.dir, fn);
  }

  /** Writes to `file` a bundle of `ref` (minus history reachable from `exclude`); readers fetch it by the same name. */
  async createBundle(file: string, ref: string, exclude?: string): Promise<void> {
    await createBundle(this.dir, file, ref, exclude);
  }

  /** Writes to `file` a bundle of `ref`'s commit alone (see createShallowBundle in bundles.ts). */
  async createShallowBundle(file: string, ref: string): Promise<void> {
    await createShallowBundle(this.dir, file, ref);
  }

  /**
   * Stores the commits of a bundle file made by a sandbox (carrying BUNDLE_REF) under `ref`, once
   * its quarantine has passed (see import.ts); returns the head SHA and the pack that brought it.
   */
  async importBundle(file: string, ref: string, of: ImportOf): Promise<ImportedPack> {
    const imported = await importBundleInto(this.dir, file, of);
    const { head, walked } = imported;
    // The walk met the head as a commit, unless it brings nothing new (the head is the seed's own history).
    if (!walked.headIsCommit && (await this.revParse(head)) !== head)
      throw permanent('CorruptObjects', `${of.what}: the bundle names ${head.slice(0, 12)}, which is not a commit`);
    await git(['update-ref', ref, head], this.local);
    await this.store?.publish(ref, head);
    return imported;
  }
}

/** Every ref under `prefix` in the repository `dir`. */
export async function listRefs(dir: string, prefix: string): Promise<string[]> {
  const out = await gitText(['for-each-ref', '--format=%(refname)', prefix], { repo: dir, env: hostGitEnv() });
  return out.split('\n').filter(Boolean);
}

/** Removes `refs` from the repository `dir`, in one transaction. */
export async function deleteLocalRefs(dir: string, refs: string[]): Promise<void> {
  const input = Buffer.from(refs.map((ref) => `delete ${ref}\n`).join(''));
  const r = await runGit(['update-ref', '--stdin'], { repo: dir, env: hostGitEnv(), input });
  if (r.code !== 0) throw new Error(`git update-ref failed in ${dir}: ${r.stderr.trim()}`);
}

/** Expires the reflogs of the repository `dir` and removes its unreachable objects, so their space comes back. */
export async function compact(dir: string): Promise<void> {
  await git(['reflog', 'expire', '--expire=now', '--all'], { repo: dir, env: hostGitEnv() });
  await git(['gc', '--quiet', '--prune=now'], { repo: dir, env: hostGitEnv() });
}
