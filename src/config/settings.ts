/** Where Flotilla keeps its state, and which Temporal it talks to; all from the environment. */
import { chmodSync, mkdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { repoUrlProblem } from '../contracts/names';

/** Sandboxes, the staging repository, artifacts and the embedded server's database live here. */
export function dataDir(): string {
  return path.resolve(process.env.FLOTILLA_HOME ?? path.join(os.homedir(), '.flotilla'));
}

/**
 * Creates `dir` if needed and makes it private to this user: it holds logs of whatever agents
 * printed, every worker's commits and the server's database.
 */
export function makePrivateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
}

export const DEFAULT_TASK_QUEUE = 'flotilla';

export function taskQueue(): string {
  return process.env.FLOTILLA_TASK_QUEUE ?? DEFAULT_TASK_QUEUE;
}

/** A host id: it names a task queue and shows in every status, so letters, digits, ".", "_" and "-" only. */
const HOST_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

/**
 * Which host this worker process is: FLOTILLA_HOST_ID, or the hostname. It must stay the same
 * across restarts, so that a worker restarted with its data directory serves the sandboxes there
 * again, and differ between hosts, so that each host's sandboxes are reached only on it.
 */
export function hostId(env: NodeJS.ProcessEnv = process.env): string {
  const raw = env.FLOTILLA_HOST_ID || os.hostname();
  if (!HOST_ID.test(raw)) {
    const from = env.FLOTILLA_HOST_ID ? 'FLOTILLA_HOST_ID' : `the hostname (set FLOTILLA_HOST_ID instead)`;
    throw new ConfigError(
      `${from} must be 1-63 letters, digits, ".", "_" or "-" (starting with a letter or digit), not "${raw}"`,
    );
  }
  return raw;
}

/** The task queue only the workers of `host` poll: activities that need that host's sandboxes go there. */
export function hostTaskQueue(queue: string, host: string): string {
  return `${queue}@${host}`;
}

export function namespace(): string {
  return process.env.TEMPORAL_NAMESPACE ?? 'default';
}

/**
 * Hosts (host or host:port) that may receive FLOTILLA_GIT_TOKEN, from FLOTILLA_GIT_TOKEN_HOSTS
 * (comma-separated); by default github.com only. The token never goes to any other host.
 */
export function tokenHosts(): string[] {
  const list = process.env.FLOTILLA_GIT_TOKEN_HOSTS ?? 'github.com';
  return list
    .split(',')
    .map((h) => h.trim().toLowerCase())
    .filter(Boolean);
}

/**
 * FLOTILLA_STAGING_URL: the bare repository every worker host reaches, where run state that
 * outlives a sandbox lives (see StagingRepo); unset, the data directory's own staging repository
 * is the store. Besides the transports of repo.url it may be git:// (a daemon on a private
 * network), never with credentials in it: FLOTILLA_GIT_TOKEN reaches an allowed https host itself.
 */
export function stagingUrl(): string | undefined {
  const url = process.env.FLOTILLA_STAGING_URL;
  if (!url) return undefined;
  const problem = repoUrlProblem(url, ['git']);
  if (problem) throw new ConfigError(`FLOTILLA_STAGING_URL ${problem}`);
  return url;
}

/** A variable with a value Flotilla cannot use. */
export class ConfigError extends Error {
  name = 'ConfigError';
}

export const DEFAULT_PORT = 7233;

/** FLOTILLA_TEMPORAL_PORT, checked: the Web UI takes port + 1000, so that must be a port too. */
export function embeddedPort(): number {
  const raw = process.env.FLOTILLA_TEMPORAL_PORT;
  if (raw === undefined || raw === '') return DEFAULT_PORT;
  const port = Number(raw);
  if (!Number.isInteger(port) || port < 1 || port > 65535 - 1000) {
    throw new ConfigError(
      `FLOTILLA_TEMPORAL_PORT must be a port number from 1 to 64535 (the Web UI uses port + 1000), not "${raw}"`,
    );
  }
  return port;
}

/** Flotilla's own version, from its package.json (next to src/ and dist/ alike). */
export function packageVersion(): string {
  return (JSON.parse(readFileSync(path.join(__dirname, '..', '..', 'package.json'), 'utf8')) as { version: string })
    .version;
}

/** The worker deployment version a worker polls as: its runs stay on it until they end. */
export interface DeploymentVersion {
  deploymentName: string;
  buildId: string;
}

// Temporal joins the two into "<deployment>:<build>" (in search attributes too; older servers
// used a dot), so a name holds neither, a build ID no colon (dots: the package version), and
// neither anything a shell command in the README would need to quote.
const DEPLOYMENT_NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$/;
const BUILD_ID = /^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$/;

/**
 * FLOTILLA_DEPLOYMENT (and optionally FLOTILLA_BUILD_ID): poll as that version of a worker
 * deployment, every run pinned to the version that started it. Unset: an unversioned worker, which
 * takes any task of its queue. A missing build ID is left to the worker, which names the workflow
 * code it runs (see defaultBuildId).
 */
export function deploymentSetting(): { deploymentName: string; buildId?: string } | undefined {
  const name = process.env.FLOTILLA_DEPLOYMENT || undefined;
  const buildId = process.env.FLOTILLA_BUILD_ID || undefined;
  if (!name) {
    if (buildId)
      throw new ConfigError(
        'FLOTILLA_BUILD_ID is set but FLOTILLA_DEPLOYMENT is not: a build ID names a version of a deployment; set both, or neither for an unversioned worker',
      );
    return undefined;
  }
  if (!DEPLOYMENT_NAME.test(name)) {
    throw new ConfigError(
      `FLOTILLA_DEPLOYMENT must be 1-100 letters, digits, "-" or "_" (starting with a letter or digit), not "${name}"`,
    );
  }
  if (buildId !== undefined && !BUILD_ID.test(buildId)) {
    throw new ConfigError(
      `FLOTILLA_BUILD_ID must be 1-100 letters, digits, ".", "-", "_" or "+" (starting with a letter or digit), not "${buildId}"`,
    );
  }
  return { deploymentName: name, buildId };
}
