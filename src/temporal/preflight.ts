/**
 * What a worker process checks before it polls: better no worker, saying why, than runs that
 * hang or agents that run bare.
 */
import { realpathSync } from 'node:fs';
import type { NativeConnection } from '@temporalio/worker';
import { setting } from '../config/variables';
import { readOnlyDirs, unreadableInstall } from '../sandbox/local/install';
import { probeBubblewrap } from '../sandbox/local/probe';
import { checkMessage, checkSearchAttributes, registerSearchAttributes } from './search-attributes';
import { credentialFiles } from './server';

/** Says loudly, once, when agents will run without isolation, or when local sandboxes will be refused. */
export function warnIfUnisolated(log: (line: string) => void = console.error): void {
  if (setting('FLOTILLA_ISOLATION') === 'none') {
    log('WARNING: FLOTILLA_ISOLATION=none: local sandboxes are NOT isolated. Agents, and the code they write,');
    log("         run as plain processes with this worker's user and access. Every report says isolation none.");
    return;
  }
  const probe = probeBubblewrap();
  if (probe.isolation === 'none') {
    log(`WARNING: local sandboxes will be refused: ${probe.reason}.`);
    log(
      '         Install bubblewrap (apt-get install bubblewrap), or set FLOTILLA_ISOLATION=none to run agents unisolated.',
    );
  }
}

/** A deployment (the Docker image) sets FLOTILLA_REQUIRE_ISOLATION=1: better no worker than bare agents. */
export function requireIsolationIfAsked(): void {
  if (!setting('FLOTILLA_REQUIRE_ISOLATION')) return;
  const probe = probeBubblewrap();
  if (probe.isolation === 'none') {
    throw new Error(
      `refusing to start: FLOTILLA_REQUIRE_ISOLATION=1, but sandboxes would not be isolated (${probe.reason})`,
    );
  }
}

/**
 * Sandboxes mount Node and the agent CLIs from the worker's install: when their uids cannot read
 * it, every seed would fail ("bwrap: Can't find source path ...: Permission denied") and be
 * retried for many minutes. Better no worker, naming the path and the fix.
 */
export function refuseUnreadableInstall(): void {
  if (setting('FLOTILLA_ISOLATION') === 'none') return;
  const problem = unreadableInstall();
  if (problem) throw new Error(`refusing to start: ${problem}`);
}

/** Sandboxes mount some host directories read-only (/etc, /opt...): Temporal credentials must not be in them. */
export function refuseCredentialsVisibleToAgents(): void {
  const visible = readOnlyDirs().map((d) => realpathSync(d));
  for (const file of credentialFiles()) {
    const real = realpathSync(file);
    const dir = visible.find((d) => real === d || real.startsWith(`${d}/`));
    if (dir)
      throw new Error(
        `refusing to start: ${file} holds Temporal credentials, and every sandbox can read it (${dir} is mounted into sandboxes); move it elsewhere`,
      );
  }
}

/**
 * Leaders upsert Flotilla's search attributes, and an upsert the namespace cannot take fails the
 * workflow task again and again: better no worker, saying how to fix it, than runs that hang.
 * A deployment that owns its cluster (docker-compose.yml) lets the worker register them instead.
 */
export async function requireSearchAttributes(
  connection: NativeConnection,
  namespace: string,
  log: (line: string) => void,
): Promise<void> {
  if (setting('FLOTILLA_REGISTER_SEARCH_ATTRIBUTES')) {
    const added = await registerSearchAttributes(connection.operatorService, namespace);
    if (added.length) log(`Registered search attributes in namespace "${namespace}": ${added.join(', ')}`);
    return;
  }
  const problem = checkMessage(namespace, await checkSearchAttributes(connection.operatorService, namespace));
  if (problem) throw new Error(`refusing to start: ${problem}`);
}
