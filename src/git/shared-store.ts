/**
 * The shared store (FLOTILLA_STAGING_URL): a bare repository every host reaches. Each host's
 * staging repository is a cache of it: an activity pulls its run's refs before it reads them, and
 * every ref written on a host is published here at once, so whatever a later activity needs is
 * here wherever that activity runs. Artifacts (logs) are kept here too, as blobs.
 */
import { createWriteStream } from 'node:fs';
import type { SimpleGit } from 'simple-git';
import { permanent } from '../contracts/failures';
import { hostGitEnv } from './env';
import { remoteGit, scrubSecrets } from './remote';
import { GitError, gitInto, gitText, runGit } from './spawn';

/** The shared store could not be reached or refused: retryable, and never the agent's doing. */
export class SharedStoreError extends Error {
  name = 'SharedStoreError';
}

/** A push deletes at most this many refs, to stay under the argument limit. */
const REFS_PER_PUSH = 1000;

export class SharedStore {
  /** git:// is allowed here only, for the operator's own URL (never a request's). */
  private readonly git: SimpleGit;

  /**
   * `dir`: this host's staging repository, the cache. `url`: the shared store's (validated by
   * config.stagingUrl).
   */
  constructor(
    private readonly dir: string,
    readonly url: string,
  ) {
    this.git = remoteGit(dir, url, 'file:https:ssh:git');
  }

  /**
   * Brings the refs of run `runKey` into the cache. No --prune: a ref written there a moment ago
   * may not be published yet, and a deletion is applied on both sides by deleteRefs. Checkpoints
   * are left out: only the host that restores one needs it (pullRef), and pulling every new
   * checkpoint of every sub-task into every host would pile them up there.
   */
  async pull(runKey: string): Promise<void> {
    if (!/^[A-Za-z0-9_-]+$/.test(runKey)) throw permanent('InvalidRequest', `not a run key: ${runKey.slice(0, 100)}`);
    const refs = `refs/flotilla/${runKey}/*`;
    await this.fetch([`+${refs}:${refs}`, `^refs/flotilla/${runKey}/checkpoints/*`]);
  }

  /** Brings one ref into the cache, when the store has it. */
  async pullRef(ref: string): Promise<void> {
    try {
      await this.fetch([`+${ref}:${ref}`]);
    } catch (err) {
      if (!/couldn't find remote ref/.test(String(err))) throw err;
    }
  }

  private async fetch(refspecs: string[]): Promise<void> {
    await this.run('fetch', ['fetch', '--no-tags', '--quiet', '--no-write-fetch-head', '--', this.url, ...refspecs]);
  }

  /** Forced push of `sha` to `ref` (by SHA: a concurrent pull cannot change what is published). */
  async publish(ref: string, sha: string): Promise<void> {
    try {
      await this.run('push', ['push', '--quiet', '--no-verify', '--', this.url, `+${sha}:${ref}`]);
    } catch (err) {
      // Two hosts publishing one ref at once (the same log, stored by two workers) race for the
      // store's ref lock; the loser finds the ref already where it wanted it.
      const listed = await this.run('list', ['ls-remote', '--', this.url, ref]);
      if (listed.split('\n').some((line) => line === `${sha}\t${ref}`)) return;
      throw err;
    }
  }

  /** Removes `refs` from the store; deleting a ref it does not have is a warning, not an error. */
  async deleteRefs(refs: string[]): Promise<void> {
    for (let i = 0; i < refs.length; i += REFS_PER_PUSH) {
      const batch = refs.slice(i, i + REFS_PER_PUSH).map((ref) => `:${ref}`);
      await this.run('push', ['push', '--quiet', '--', this.url, ...batch]);
    }
  }

  /** The refs under `prefix` in the store. */
  async refs(prefix: string): Promise<string[]> {
    const out = await this.run('list', ['ls-remote', '--refs', '--', this.url, `${prefix}*`]);
    return out
      .split('\n')
      .filter(Boolean)
      .map((line) => line.split('\t')[1]);
  }

  /** Publishes `file` as the blob `ref` names; git reads the file, this process never does. */
  async publishBlob(ref: string, file: string): Promise<void> {
    const sha = (await gitText(['hash-object', '-w', '--', file], { repo: this.dir, env: hostGitEnv() })).trim();
    await this.publish(ref, sha);
  }

  /**
   * Streams the blob `ref` names to `file`; false when the store has no such ref. The fetch goes
   * to a ref of its own, removed afterwards, so concurrent readers do not meet and the cache keeps
   * no reference to the copy.
   */
  async fetchBlob(ref: string, file: string): Promise<boolean> {
    const temp = `refs/flotilla-fetch/${process.pid}-${Math.random().toString(36).slice(2)}`;
    try {
      await this.fetch([`+${ref}:${temp}`]);
    } catch (err) {
      if (/couldn't find remote ref/.test(String(err))) return false;
      throw err;
    }
    const opts = { repo: this.dir, env: hostGitEnv() };
    try {
      await gitInto(['cat-file', 'blob', temp], opts, createWriteStream(file, { mode: 0o600 }));
    } catch (err) {
      if (err instanceof GitError) throw new Error(`git cat-file failed for ${ref}: ${err.stderr.trim()}`);
      throw err;
    } finally {
      await runGit(['update-ref', '-d', temp], opts);
    }
    return true;
  }

  /** Runs git against the store; a failure says so, with any credential masked. */
  private async run(what: 'fetch' | 'push' | 'list', args: string[]): Promise<string> {
    try {
      return await this.git.raw(args);
    } catch (err) {
      const why = scrubSecrets(err instanceof Error ? err.message : String(err))
        .trim()
        .split('\n')
        .slice(-3)
        .join('; ');
      throw new SharedStoreError(
        `cannot ${what} ${what === 'push' ? 'to' : 'from'} the shared store (FLOTILLA_STAGING_URL ${scrubSecrets(this.url)}): ${why.slice(0, 500)}`,
      );
    }
  }
}
