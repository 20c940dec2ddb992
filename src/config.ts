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

export function taskQueue(): string {
  return process.env.FLOTILLA_TASK_QUEUE ?? 'flotilla';
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
