/**
 * Where Flotilla keeps its state and which Temporal it talks to: the settings more than one part
 * reads, from the environment (every variable is in ./variables.ts).
 */
import { chmodSync, mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { ConfigError } from './error';
import { VARIABLES, type VariableName, readersOf, setting } from './variables';

export { ConfigError } from './error';
export { DEFAULT_TASK_QUEUE, setting } from './variables';

/** Sandboxes, the staging repository, artifacts and the embedded server's database live here. */
export function dataDir(): string {
  return setting('FLOTILLA_HOME');
}

/**
 * Creates `dir` if needed and makes it private to this user: it holds logs of whatever agents
 * printed, every sub-task's commits and the server's database.
 */
export function makePrivateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
}

export function taskQueue(): string {
  return setting('FLOTILLA_TASK_QUEUE');
}

/** Which host this worker process is: FLOTILLA_HOST_ID, or the hostname. */
export function hostId(env: NodeJS.ProcessEnv = process.env): string {
  return setting('FLOTILLA_HOST_ID', env);
}

export { hostTaskQueue } from '../contracts/names';

export function namespace(): string {
  return setting('TEMPORAL_NAMESPACE');
}

/**
 * Hosts (host or host:port) that may receive FLOTILLA_GIT_TOKEN, from FLOTILLA_GIT_TOKEN_HOSTS
 * (comma-separated); by default github.com only. The token never goes to any other host.
 */
export function tokenHosts(): string[] {
  return setting('FLOTILLA_GIT_TOKEN_HOSTS');
}

/**
 * FLOTILLA_STAGING_URL: the bare repository every worker host reaches, where run state that
 * outlives a sandbox lives (see StagingRepo); unset, the data directory's own staging repository
 * is the store. Besides the transports of repo.url it may be git:// (a daemon on a private
 * network), never with credentials in it: FLOTILLA_GIT_TOKEN reaches an allowed https host itself.
 */
export function stagingUrl(): string | undefined {
  return setting('FLOTILLA_STAGING_URL');
}

/** FLOTILLA_TEMPORAL_PORT, checked: the Web UI takes port + 1000, so that must be a port too. */
export function embeddedPort(): number {
  return setting('FLOTILLA_TEMPORAL_PORT');
}

/**
 * The embedded dev server's HTTP API port: its gRPC port + 10, as Temporal's own defaults are
 * (7233 and 7243).
 */
export function embeddedHttpPort(port = embeddedPort()): number {
  return port + 10;
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

/**
 * FLOTILLA_DEPLOYMENT (and optionally FLOTILLA_BUILD_ID): poll as that version of a worker
 * deployment, every run pinned to the version that started it. Unset: an unversioned worker, which
 * takes any task of its queue. A missing build ID is left to the worker, which names the workflow
 * code it runs (see defaultBuildId). Temporal joins the two into "<deployment>:<build>" (in search
 * attributes too; older servers used a dot), so a name holds neither, a build ID no colon (dots:
 * the package version), and neither anything a shell command in the README would need to quote.
 */
export function deploymentSetting(
  env: NodeJS.ProcessEnv = process.env,
): { deploymentName: string; buildId?: string } | undefined {
  // A build ID names a version of a deployment: said first, whatever the build ID looks like.
  if (!env.FLOTILLA_DEPLOYMENT && env.FLOTILLA_BUILD_ID)
    throw new ConfigError(
      'FLOTILLA_BUILD_ID is set but FLOTILLA_DEPLOYMENT is not: a build ID names a version of a deployment; set both, or neither for an unversioned worker',
    );
  const deploymentName = setting('FLOTILLA_DEPLOYMENT', env);
  return deploymentName ? { deploymentName, buildId: setting('FLOTILLA_BUILD_ID', env) } : undefined;
}

/**
 * Every setting `reader` uses, parsed by the table's parsers when it starts: a value it cannot
 * use stops it there, with one line naming the variable (a ConfigError: exit 2), rather than
 * later, in the middle of a run, or never (a token host that matches nothing).
 */
export function checkSettings(reader: 'worker' | 'cli', env: NodeJS.ProcessEnv = process.env): void {
  for (const name of Object.keys(VARIABLES) as VariableName[]) if (readersOf(name).includes(reader)) setting(name, env);
  if (reader === 'worker') deploymentSetting(env);
}
