/**
 * Where a forge is, from what a request says: a remote URL, an issue URL, or an explicit
 * `forge:` field. Pure (no I/O): the request's validation and workflows use it.
 */
/** Which forge and repository, as a request names it or its remote URL implies. No credential. */
export interface ForgeAddress {
  kind: 'github';
  /** owner/name */
  repo: string;
  /** The REST API's base URL; absent: https://api.github.com. GitHub Enterprise: https://host/api/v3. */
  baseUrl?: string;
}

export const GITHUB_API = 'https://api.github.com';

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;

/** Why `repo` is not an owner/name pair, or undefined when it is. */
export function repoNameProblem(repo: string): string | undefined {
  const parts = repo.split('/');
  if (parts.length !== 2 || !parts.every((p) => NAME.test(p) && p !== '.' && p !== '..'))
    return `"${repo}" is not owner/name (letters, digits, ".", "-" or "_")`;
  return undefined;
}

/** An https URL's host and path segments, or undefined when it is not one. */
function httpsParts(url: string): { host: string; segments: string[] } | undefined {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return undefined;
  }
  if (parsed.protocol !== 'https:' || parsed.username || parsed.password) return undefined;
  return { host: parsed.host.toLowerCase(), segments: parsed.pathname.split('/').filter(Boolean) };
}

/** The REST API of a forge whose pages are at `host`: GitHub's own, or GitHub Enterprise's. */
function apiOf(host: string): string | undefined {
  return host === 'github.com' ? undefined : `https://${host}/api/v3`;
}

/**
 * The forge of a remote URL `https://<host>/<owner>/<name>(.git)`: github.com, or a GitHub
 * Enterprise host; undefined for any other URL (ssh, file, a deeper path).
 */
export function forgeOfRemote(url: string): ForgeAddress | undefined {
  const parts = httpsParts(url);
  if (!parts || parts.segments.length !== 2) return undefined;
  const repo = `${parts.segments[0]}/${parts.segments[1].replace(/\.git$/, '')}`;
  return repoNameProblem(repo) ? undefined : forgeOfHost(parts.host, repo);
}

/**
 * An issue's page `http(s)://<host>/<owner>/<name>/issues/<n>`: the host its forge must be on,
 * its repository and number; undefined for anything else.
 */
export function issueOfUrl(url: string): { host: string; repo: string; number: number } | undefined {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return undefined;
  }
  if (!/^https?:$/.test(parsed.protocol) || parsed.username || parsed.password || parsed.search) return undefined;
  const segments = parsed.pathname.split('/').filter(Boolean);
  if (segments.length !== 4 || segments[2] !== 'issues' || !/^[1-9]\d{0,9}$/.test(segments[3])) return undefined;
  const repo = `${segments[0]}/${segments[1]}`;
  if (repoNameProblem(repo)) return undefined;
  return { host: parsed.host.toLowerCase(), repo, number: Number(segments[3]) };
}

/** The forge whose pages are at `host` (https): github.com's, or a GitHub Enterprise host's. */
export function forgeOfHost(host: string, repo: string): ForgeAddress {
  const baseUrl = apiOf(host);
  return { kind: 'github', repo, ...(baseUrl && { baseUrl }) };
}

/** The host whose allowance (FLOTILLA_GIT_TOKEN_HOSTS) a forge's API inherits: github.com for api.github.com. */
export function forgeHost(forge: ForgeAddress): string {
  const url = new URL(forge.baseUrl ?? GITHUB_API);
  const host = url.host.toLowerCase();
  return host === 'api.github.com' ? 'github.com' : host;
}
