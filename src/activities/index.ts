/** Every activity of Flotilla, bound to the host's dependencies. Workflows import only its type. */
import { Context } from '@temporalio/activity';
import { agentActivities } from './agent';
import { checkpointActivities } from './checkpoint';
import { continueActivities } from './continue';
import type { ActivityDeps, HostPlacement } from './deps';
import { fixerActivities } from './fixers';
import { forgeActivities } from './forge';
import { integrateActivities } from './integration';
import { integrationSandboxActivities } from './integration-sandboxes';
import { notifyActivities } from './notify';
import { planActivities } from './plan';
import { remoteActivities } from './remote';
import { requestActivities } from './request';
import { sandboxActivities } from './sandbox';
import { testActivities } from './tests';

const HEARTBEAT_MS = 2_000;

/**
 * Heartbeats for the whole of an activity that does not report progress itself, so a worker
 * process that dies in the middle of a git operation is noticed within the heartbeat timeout
 * rather than at the activity's much longer start-to-close timeout.
 */
function withHeartbeats<A extends unknown[], R>(fn: (...args: A) => Promise<R>): (...args: A) => Promise<R> {
  return async (...args: A) => {
    const ctx = Context.current();
    ctx.heartbeat();
    const timer = setInterval(() => ctx.heartbeat(), HEARTBEAT_MS);
    try {
      return await fn(...args);
    } finally {
      clearInterval(timer);
    }
  };
}

/**
 * Runs on the shared task queue, so whichever worker process is free takes it: the sandbox that
 * follows lives on that worker's host, and every activity that needs it goes to that host's queue.
 */
function hostActivities(deps: ActivityDeps) {
  return {
    async claimHost(): Promise<HostPlacement> {
      // Retryable: another worker process, one that serves a host queue, takes it.
      if (!deps.host) throw new Error('this worker process serves no host task queue');
      return deps.host;
    },
  };
}

export function createActivities(deps: ActivityDeps) {
  const { runCommand, ...sandbox } = sandboxActivities(deps);
  const { runAgent, ...agent } = agentActivities(deps);
  const { proposePlan } = planActivities(deps);
  // These heartbeat with progress details of their own. The resolver and repair activities stay
  // wrapped: their git steps around the invocation must heartbeat too, and nobody watches their details.
  const tracked = { runCommand, runAgent, proposePlan };
  const plain = {
    ...sandbox,
    ...agent,
    ...checkpointActivities(deps),
    ...hostActivities(deps),
    ...integrateActivities(deps),
    ...continueActivities(deps),
    ...testActivities(deps),
    ...integrationSandboxActivities(deps),
    ...fixerActivities(deps),
    ...remoteActivities(deps),
    ...forgeActivities(deps),
    ...requestActivities(),
    ...notifyActivities(deps),
  };
  const beating = Object.fromEntries(
    Object.entries(plain).map(([name, fn]) => [name, withHeartbeats(fn as (...args: unknown[]) => Promise<unknown>)]),
  ) as unknown as typeof plain;
  return { ...beating, ...tracked };
}

export type Activities = ReturnType<typeof createActivities>;
export type { HostPlacement, SandboxRef } from './deps';
export type { CheckpointMark } from '../git/checkpoint';
export type { CommandReport } from './exec';
export type { AgentRunReport } from './invocation';
