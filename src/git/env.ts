/**
 * The environment of every git Flotilla starts, one policy per trust context. No git inherits the
 * worker's environment: each policy names every variable its git gets, so nothing the worker was
 * started with (a `GIT_DIR`, a `GIT_CONFIG_PARAMETERS`, an `~/.gitconfig`) takes part unless it is
 * listed here on purpose.
 */
import os from 'node:os';
import { setting, tokenHosts } from '../config/settings';

/** The whole environment of one git process. */
export type GitEnv = Readonly<Record<string, string>>;

/** Settings passed as GIT_CONFIG_COUNT/KEY/VALUE: the highest-priority config, no file involved. */
function configVars(settings: readonly (readonly [string, string])[]): Record<string, string> {
  if (settings.length === 0) return {};
  return {
    GIT_CONFIG_COUNT: String(settings.length),
    ...Object.fromEntries(
      settings.flatMap(([key, value], i) => [
        [`GIT_CONFIG_KEY_${i}`, key],
        [`GIT_CONFIG_VALUE_${i}`, value],
      ]),
    ),
  };
}

/** What makes git behave the same on every host: no configuration, attributes or replacements but ours. */
const FIXED: Record<string, string> = {
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_ATTR_NOSYSTEM: '1',
  // refs/replace/* would make git see a different history than the one the refs name.
  GIT_NO_REPLACE_OBJECTS: '1',
  GIT_TERMINAL_PROMPT: '0',
  // Messages in English on every host: callers match a few of them.
  LC_ALL: 'C',
};

/** The user's global attributes (~/.config/git/attributes) would otherwise still apply: merge drivers, eol. */
const HOST_SETTINGS: [string, string][] = [['core.attributesFile', '/dev/null']];

function path(): string {
  return process.env.PATH ?? '/usr/bin:/bin';
}

/**
 * Git on Flotilla's own repositories on the host (the staging repository, run mirrors, the
 * scratch repositories made from them). Nothing of the worker's user takes part: no system or
 * global config and no HOME (so no user attributes), so a user's ~/.gitconfig cannot change a
 * merge and every host computes the same commits. Only local repositories can be reached.
 */
export function hostGitEnv(): GitEnv {
  return { PATH: path(), ...FIXED, GIT_ALLOW_PROTOCOL: 'file', ...configVars(HOST_SETTINGS) };
}

/** The operator's own transport settings from the worker's environment, passed to git that reaches a remote. */
const TRANSPORT_VARIABLES = ['SSH_AUTH_SOCK', 'GIT_SSH_COMMAND', 'GIT_SSL_CAINFO'];

/**
 * Git that reaches `url` (the user's remote, the oracle's, the shared store): the host policy,
 * plus HOME (ssh finds its keys and known hosts there), the operator's transport settings, only
 * transports that cannot execute programs (`protocols`), and the credential. The token
 * (FLOTILLA_GIT_TOKEN) travels as an HTTP header through GIT_CONFIG_* variables, so it is never
 * part of a URL, an argument list or a log line; and only to an https URL whose host the worker
 * allows (tokenHosts), as a header scoped to that origin (`http.https://host/.extraHeader`), so a
 * request for any other URL, a redirect to another host included, does not carry it.
 */
export function remoteGitEnv(url: string, protocols = 'file:https:ssh'): GitEnv {
  const settings = [...HOST_SETTINGS];
  const token = setting('FLOTILLA_GIT_TOKEN');
  const origin = tokenOrigin(url);
  if (token && origin) {
    const basic = Buffer.from(`x-access-token:${token}`).toString('base64');
    settings.push([`http.${origin}/.extraHeader`, `Authorization: Basic ${basic}`]);
  }
  const env: Record<string, string> = {
    PATH: path(),
    HOME: process.env.HOME ?? os.homedir(),
    ...FIXED,
    GIT_ALLOW_PROTOCOL: protocols,
    ...configVars(settings),
  };
  for (const name of TRANSPORT_VARIABLES) {
    const value = process.env[name];
    if (value) env[name] = value;
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

/**
 * What git in a workspace must never do there: the agent controls the workspace, `.git` included,
 * so nothing in it may make our git run a program. These settings outrank the repository's config;
 * and since Flotilla's scripts replace that config with one of their own (workspace.ts; all but a
 * checkpoint's, which uses none), filter, diff and merge drivers an agent defined, `include.path`,
 * aliases and `core.sshCommand` are gone too, and attributes naming such drivers name nothing.
 */
const SANDBOX_SETTINGS: [string, string][] = [
  ['core.hooksPath', '/dev/null'],
  ['core.fsmonitor', 'false'],
  ['core.attributesFile', '/dev/null'],
  ['core.untrackedCache', 'false'],
  // No `git maintenance run --auto` after each commit and fetch: a process per step, for a
  // repository that lives as long as its sandbox.
  ['maintenance.auto', 'false'],
];

const SANDBOX_ENV: GitEnv = {
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_ATTR_NOSYSTEM: '1',
  GIT_TERMINAL_PROMPT: '0',
  // refs/replace/* would let the agent show our git a different history than the one exported.
  GIT_NO_REPLACE_OBJECTS: '1',
  ...configVars(SANDBOX_SETTINGS),
};

/**
 * The variables Flotilla's git scripts in a sandbox run with, on top of the sandbox's own (its
 * PATH and HOME: the sandbox provider sets those). No system or global config (a command may have
 * planted one in the sandbox's HOME), no hooks, no fsmonitor, no attributes but the repository's.
 */
export function sandboxGitEnv(): GitEnv {
  return SANDBOX_ENV;
}
