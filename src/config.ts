/** Where Flotilla keeps its state, and which Temporal it talks to; all from the environment. */
import { chmodSync, mkdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

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

export function namespace(): string {
  return process.env.TEMPORAL_NAMESPACE ?? 'default';
}

/**
 * Hosts (host or host:port) that may receive FLOTILLA_GIT_TOKEN, from FLOTILLA_GIT_TOKEN_HOSTS
 * (comma-separated); by default github.com only. The token never goes to any other host.
 */
export function tokenHosts(): string[] {
  const list = process.env.FLOTILLA_GIT_TOKEN_HOSTS ?? 'github.com';
  return list.split(',').map((h) => h.trim().toLowerCase()).filter(Boolean);
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
    throw new ConfigError(`FLOTILLA_TEMPORAL_PORT must be a port number from 1 to 64535 (the Web UI uses port + 1000), not "${raw}"`);
  }
  return port;
}
