/**
 * Git that reaches another repository: the user's remote, the oracle's, the shared store. It runs
 * on the host only, with the remote policy (env.ts), so the git credential never leaves the host
 * process; this is the one place that uses simple-git.
 */
import { simpleGit, type SimpleGit } from 'simple-git';
import { setting } from '../config/settings';
import { redact } from '../store/secrets';
import { type GitEnv, remoteGitEnv } from './env';

/** Error text safe to show: a credential that git echoed back is masked. */
export function scrubSecrets(text: string): string {
  const token = setting('FLOTILLA_GIT_TOKEN');
  let out = text.replace(/(https?:\/\/)[^/@\s]+@/g, '$1***@');
  if (token) out = out.split(token).join('***');
  return redact(out);
}

/**
 * Git's words for a remote that no retry can make work: it is not a repository, does not exist,
 * or refuses us (credentials, permissions, an address git blocks). Anything else, such as a reset
 * connection, a server error or a name that does not resolve yet, may pass and is retried.
 */
const PERMANENT_REMOTE_ERRORS = [
  /does not appear to be a git repository/,
  /repository '.*' not found/i,
  /Repository not found/i,
  /access denied or repository not exported/,
  /could not read (Username|Password) for/,
  /Authentication failed for/,
  /The requested URL returned error: (401|403|404|410)\b/,
  /Permission denied \(/,
  /Host key verification failed/,
  /strange (hostname|username|pathname|port) .* blocked/,
  /transport '.*' not allowed/,
];

/** The line of git's error `text` that says a remote can never work, without "fatal:"; undefined when a retry may help. */
export function permanentRemoteProblem(text: string): string | undefined {
  const line = text.split('\n').find((l) => PERMANENT_REMOTE_ERRORS.some((p) => p.test(l)));
  return line?.replace(/^\s*(fatal|error|remote): /, '').trim();
}

/**
 * simple-git for the repository `dir`, running git with exactly `env`. simple-git refuses GIT_*
 * variables unless they are named, and some unless an unsafe option allows them; these are ours on
 * purpose: GIT_CONFIG_GLOBAL (/dev/null) and GIT_CONFIG_COUNT carry only the policy's settings and
 * our http.extraHeader (the token), and GIT_SSH_COMMAND is the operator's own setting from the
 * worker's environment; none comes from a request.
 */
export function gitWith(dir: string, env: GitEnv): SimpleGit {
  return simpleGit({
    baseDir: dir,
    allowEnvironment: Object.keys(env),
    unsafe: { allowUnsafeConfigEnvCount: true, allowUnsafeSshCommand: true, allowUnsafeConfigPaths: true },
  }).env({ ...env });
}

/** Git in the repository `dir` for commands that reach `url`, with the credential that URL may have. */
export function remoteGit(dir: string, url: string, protocols?: string): SimpleGit {
  return gitWith(dir, remoteGitEnv(url, protocols));
}

/** The SHA `branch` has at `url`, or null when it does not exist there. */
export async function remoteBranchSha(dir: string, url: string, branch: string): Promise<string | null> {
  const out = await remoteGit(dir, url).raw(['ls-remote', '--', url, `refs/heads/${branch}`]);
  const line = out.split('\n').find((l) => l.endsWith(`\trefs/heads/${branch}`));
  return line ? line.split('\t')[0] : null;
}

/** Fetches `branch` from `url` into `ref` of the repository `dir`. */
export async function fetchBranchInto(dir: string, url: string, branch: string, ref: string): Promise<void> {
  await remoteGit(dir, url).raw(['fetch', '--no-tags', '--quiet', '--', url, `+refs/heads/${branch}:${ref}`]);
}

export type PushOutcome =
  { outcome: 'pushed'; remoteSha: string } | { outcome: 'raced'; remoteSha: string | null; message: string };

/**
 * Compare-and-swap push of `sha` (a commit of `dir`) to `branch`. With `expected` null the lease
 * is create-only: the push fails if the branch appeared meanwhile. Pushing a SHA the remote
 * already has at that branch is a success, so a retried push never pushes twice.
 */
export async function pushWithLease(
  dir: string,
  url: string,
  push: { branch: string; sha: string; expected: string | null },
): Promise<PushOutcome> {
  const { branch, sha, expected } = push;
  const current = await remoteBranchSha(dir, url, branch);
  if (current === sha) return { outcome: 'pushed', remoteSha: sha };
  if (current !== expected) {
    return {
      outcome: 'raced',
      remoteSha: current,
      message: `${branch} moved on the remote: expected ${expected ?? '(absent)'}, found ${current ?? '(absent)'}`,
    };
  }
  try {
    await remoteGit(dir, url).raw([
      'push',
      '--quiet',
      '--porcelain',
      `--force-with-lease=refs/heads/${branch}:${expected ?? ''}`,
      '--',
      url,
      `${sha}:refs/heads/${branch}`,
    ]);
  } catch (err) {
    const after = await remoteBranchSha(dir, url, branch);
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
