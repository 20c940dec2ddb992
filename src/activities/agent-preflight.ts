/**
 * Whether this worker can run the agents a run names, checked before the run spends anything:
 * an agent started without its CLI or its key does not fail, it hangs (Codex retries for ever).
 * What each kind needs is its harness's own function (agents/, REQUIREMENTS).
 */
import { accessSync, constants } from 'node:fs';
import { REQUIREMENTS } from '../agents';
import { VARIABLES, type VariableName, setting } from '../config/variables';
import { permanent } from '../contracts/failures';
import type { AgentSpec } from '../contracts/request';

export type AgentKind = AgentSpec['kind'];

/** One line per thing this worker lacks to run agents of `kinds` in `provider`'s sandboxes; none when it can. */
export function missingForAgents(
  kinds: readonly AgentKind[],
  provider: 'local' | 'e2b',
  env: NodeJS.ProcessEnv = process.env,
): string[] {
  return [...new Set(kinds)].flatMap((kind) => {
    const needs = REQUIREMENTS[kind]();
    const missing: string[] = [];
    // An E2B template brings its own agent CLIs; a local sandbox mounts the worker's.
    const binary = provider === 'local' && needs.binary && binaryProblem(needs.binary);
    if (binary) missing.push(`${kind}: ${binary}`);
    if (needs.credentials.length && !needs.credentials.some((name) => isSet(name, env)))
      missing.push(`${kind}: ${needs.credentials.join(' or ')} is not set on this worker`);
    return missing;
  });
}

/** Refuses, for good, a run whose agents this worker (on `host`) cannot run, saying what is missing. */
export function refuseAgentsWorkerLacks(kinds: readonly AgentKind[], provider: 'local' | 'e2b', host?: string): void {
  const missing = missingForAgents(kinds, provider);
  if (!missing.length) return;
  const worker = host ? `this worker (host ${host})` : 'this worker';
  throw permanent('AgentUnavailable', `${worker} cannot run the run's agents: ${missing.join('; ')}`);
}

function binaryProblem(binary: () => string): string | undefined {
  let file: string;
  try {
    file = binary();
  } catch (err) {
    return `its CLI is not installed on this worker (${(err as Error).message.split('\n')[0]})`;
  }
  try {
    accessSync(file, constants.X_OK);
    return undefined;
  } catch {
    return `its CLI is not installed on this worker (${file} is not an executable file)`;
  }
}

function isSet(name: string, env: NodeJS.ProcessEnv): boolean {
  return name in VARIABLES && !!setting(name as VariableName, env);
}
