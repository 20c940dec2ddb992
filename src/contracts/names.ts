/**
 * Names and paths that cross Flotilla's edges: run keys, branch names, repository paths and
 * URLs, checked without running git. Pure: workflow code imports it.
 */

/**
 * A name for refs, branches and sandbox keys: readable, valid in a git ref, and distinct for
 * every run even when a workflow id is reused.
 */
export function runKeyOf(workflowId: string, runId: string): string {
  const readable =
    workflowId
      .replace(/[^A-Za-z0-9_-]+/g, '-')
      .replace(/^-+|-+$/g, '')
      .slice(0, 60) || 'run';
  return `${readable}-${runId.slice(0, 8)}`;
}

/**
 * The sub-task an attempt's report belongs to: `api.attempt2`, `api.redo` and the best-of-N
 * candidates `api.candidate2`, `api.attempt2.candidate1` are attempts of `api`.
 */
export function subTaskOf(workerId: string): string {
  return workerId.replace(/(\.attempt\d+)?(\.candidate\d+)?$|\.redo$/, '');
}

/** The task queue only the workers of `host` poll: activities that need that host's sandboxes go there. */
export function hostTaskQueue(queue: string, host: string): string {
  return `${queue}@${host}`;
}

/** Names git resolves to refs of its own before any branch: a branch so named is shadowed, or refused. */
const GIT_OWN_REFS = [
  'HEAD',
  'FETCH_HEAD',
  'ORIG_HEAD',
  'MERGE_HEAD',
  'CHERRY_PICK_HEAD',
  'REVERT_HEAD',
  'REBASE_HEAD',
  'BISECT_HEAD',
  'AUTO_MERGE',
];

/** Rules of `git check-ref-format`, applied without running git so workflows can use them too. */
export function refNameProblem(name: string): string | undefined {
  if (name.length === 0) return 'is empty';
  if (name.length > 200) return 'is longer than 200 characters';
  if (name.includes('..')) return 'contains ".."';
  if (name.includes('@{')) return 'contains "@{"';
  if (name === '@') return 'is "@"';
  if (/[\x00-\x20\x7f~^:?*[\\]/.test(name)) return 'contains a space, control character or one of ~ ^ : ? * [ \\';
  if (name.startsWith('/') || name.endsWith('/') || name.includes('//')) return 'has an empty path component';
  if (name.endsWith('.')) return 'ends with "."';
  if (name.startsWith('-')) return 'starts with "-"';
  for (const part of name.split('/')) {
    if (part.startsWith('.')) return `has a component starting with "." (${part})`;
    if (part.endsWith('.lock')) return `has a component ending with ".lock" (${part})`;
  }
  if (name.startsWith('refs/')) return 'must be a branch name such as "main", not a full ref';
  if (GIT_OWN_REFS.includes(name)) return `is "${name}", a name git keeps for a ref of its own, not a branch`;
  return undefined;
}

/** Why a repository-relative path is unsafe, or undefined when it is fine. */
export function repoPathProblem(path: string): string | undefined {
  if (path.length === 0) return 'is empty';
  if (path.startsWith('/') || /^[A-Za-z]:[\\/]/.test(path))
    return 'must be relative to the repository root, not absolute';
  if (path.includes('\\')) return 'must use "/" as separator';
  if (/[\x00-\x1f]/.test(path)) return 'contains a control character';
  const parts = path.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.includes('..')) return 'must not contain ".."';
  if (parts.some((p) => p.toLowerCase() === '.git')) return 'must not reach into .git/';
  return undefined;
}

/** "src//a/./b/" → "src/a/b"; "." and "" → "" (the whole repository). */
export function normalizeRepoPath(path: string): string {
  return path
    .split('/')
    .filter((p) => p !== '' && p !== '.')
    .join('/');
}

/** True when `path` is `owner` itself or lies below it. The empty owner is the whole repository. */
export function pathIsUnder(path: string, owner: string): boolean {
  return owner === '' || path === owner || path.startsWith(owner + '/');
}

/**
 * Why a repository location is refused, or undefined when it is allowed. Only transports that
 * cannot run arbitrary commands are accepted: `ext::` and other `<helper>::` forms can execute
 * programs on the host, so they never reach git.
 */
export function repoUrlProblem(url: string, extraSchemes: string[] = []): string | undefined {
  if (url.length === 0) return 'is empty';
  if (/^[A-Za-z][A-Za-z0-9+.-]*::/.test(url))
    return `uses the transport helper "${url.split('::')[0]}::", which is not allowed`;
  if (/[\x00-\x1f\s]/.test(url)) return 'contains whitespace or a control character';
  if (url.startsWith('-')) return 'must not start with "-"';
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(url)?.[1]?.toLowerCase();
  // Never repeat the URL here: it may hold the very credential this refuses.
  const userinfo = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/([^/]*)@/.exec(url)?.[1];
  if (userinfo !== undefined && (scheme !== 'ssh' || userinfo.includes(':'))) {
    return 'must not contain credentials (user:password@); the worker sends FLOTILLA_GIT_TOKEN to allowed hosts itself';
  }
  if (/^(ssh:\/\/|[^/:]*@)-|^ssh:\/\/[^/]*@-/i.test(url))
    return 'names a user or host starting with "-", which ssh would read as an option';
  if (scheme !== undefined) {
    if (scheme === 'https' || scheme === 'ssh' || scheme === 'file' || extraSchemes.includes(scheme)) return undefined;
    if (scheme === 'http') return 'uses plain http; use https';
    return `uses the unsupported scheme "${scheme}://" (allowed: https://, ssh://, user@host:path, or an absolute local path)`;
  }
  if (url.startsWith('/')) return undefined;
  // scp-like syntax: [user@]host:path, where host has no slash before the colon.
  if (
    /^([A-Za-z0-9._-]+@)?[A-Za-z0-9.-]+:[^/\\].*|^([A-Za-z0-9._-]+@)?[A-Za-z0-9.-]+:\/.+/.test(url) &&
    !url.includes('::')
  )
    return undefined;
  return 'must be an https:// or ssh:// URL, a user@host:path address, or an absolute local path';
}

/**
 * The id of a sub-task workflow as it appears in sandbox keys and file names: a sub-task's id, or
 * one of its later attempts (`<id>.attempt<n>`, see workflows/leader/dispatch.ts), or one
 * candidate of a best-of-N attempt (`<id>.candidate<k>`, `<id>.attempt<n>.candidate<k>`, see
 * workflows/leader/best-of.ts). No slash, no leading dot: safe as a file name.
 */
export const SUB_TASK_WORKFLOW_ID = /[A-Za-z0-9_-]{1,100}(?:\.attempt[0-9]{1,4})?(?:\.candidate[0-9]{1,2})?/;

/** Whether `id` is a sub-task workflow's id, exactly. */
export function isSubTaskWorkflowId(id: string): boolean {
  return new RegExp(`^${SUB_TASK_WORKFLOW_ID.source}$`).test(id);
}
