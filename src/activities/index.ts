/** Every activity of Flotilla, bound to the host's dependencies. Workflows import only its type. */
import { agentActivities } from './agent';
import type { ActivityDeps } from './deps';
import { integrateActivities } from './integrate';
import { remoteActivities } from './remote';
import { sandboxActivities } from './sandbox';

export function createActivities(deps: ActivityDeps) {
  return {
    ...sandboxActivities(deps),
    ...agentActivities(deps),
    ...integrateActivities(deps),
    ...remoteActivities(deps),
  };
}

export type Activities = ReturnType<typeof createActivities>;
export type { SandboxRef } from './deps';
export type { CommandReport } from './exec';
export type { AgentRunReport } from './agent';
