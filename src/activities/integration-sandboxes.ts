/**
 * The integration's sandboxes on their host: made ready while the agents run (the test sandbox's
 * files set to the base by the host, so the first test run writes only what the merges changed),
 * and destroyed by their keeper (src/workflows/integration/keeper.ts) once the integration is
 * done with them or its leader is gone.
 *
 * Every activity that works in one of them (the test runs, the fixer rounds, the warming) is
 * counted while it runs, and the keeper's destruction waits for those to end: a leader that is
 * terminated leaves its activities running until their next heartbeat finds it gone, and one
 * still writing a checkout would otherwise leave files behind in a sandbox already removed. One
 * worker process per data directory (see git/run-mirror.ts), so this process sees every one.
 */
import { Context } from '@temporalio/activity';
import { WorkflowNotFoundError } from '@temporalio/client';
import { type ActivityDeps, type SandboxRef, openWorkspace } from './deps';
import { sandboxActivities } from './sandbox';
import { setHostTree } from '../git/host-tree';
import { baseObjects } from '../git/seeding';
import { removeRunObjects } from '../git/run-mirror';

/**
 * Whether the leader has closed. A keeper is also released while its run goes on (a review round
 * may need the run mirror again), so the mirror goes only with a leader that ended without
 * removing it itself: terminated, or timed out. Unknown (no client, the server unreachable) is
 * "not closed": `flotilla gc` removes what is left.
 */
async function leaderClosed(leaderId: string): Promise<boolean> {
  try {
    const { status } = await Context.current().client.workflow.getHandle(leaderId).describe();
    return status.name !== 'RUNNING';
  } catch (err) {
    return err instanceof WorkflowNotFoundError;
  }
}

/** The activities working in each of this host's integration sandboxes now, by sandbox key. */
export class SandboxUse {
  private readonly uses = new Map<string, Set<Promise<unknown>>>();

  /** Runs `work` counted as a use of the sandbox `key`. */
  during<T>(key: string, work: () => Promise<T>): Promise<T> {
    const running = work();
    const uses = this.uses.get(key) ?? new Set();
    this.uses.set(key, uses.add(running));
    const settled = () => {
      uses.delete(running);
      if (!uses.size && this.uses.get(key) === uses) this.uses.delete(key);
    };
    running.then(settled, settled);
    return running;
  }

  /** Resolves once no activity uses the sandbox `key` any longer. */
  async idle(key: string): Promise<void> {
    for (let uses = this.uses.get(key); uses?.size; uses = this.uses.get(key)) await Promise.allSettled([...uses]);
  }
}

const registries = new WeakMap<ActivityDeps, SandboxUse>();

/** This host's record of which integration sandboxes are in use. */
export function sandboxUse(deps: ActivityDeps): SandboxUse {
  let use = registries.get(deps);
  if (!use) registries.set(deps, (use = new SandboxUse()));
  return use;
}

export function integrationSandboxActivities(deps: ActivityDeps) {
  const { destroySandbox } = sandboxActivities(deps);
  return {
    /**
     * Sets a local sandbox's files to `sha` (the integration head while the agents run: the
     * base), so that its first checkout after the merges writes only what they changed. A cloud
     * sandbox, whose checkouts are made inside it whole, is left as it is. Says whether it set them.
     */
    async warmSandbox(input: {
      sandbox: SandboxRef;
      runKey: string;
      baseSha: string;
      sha: string;
    }): Promise<{ warmed: boolean }> {
      return sandboxUse(deps).during(input.sandbox.key, async () => {
        const ws = await openWorkspace(deps, input.sandbox);
        if (!ws.sb.host) return { warmed: false };
        const staging = await deps.staging(input.runKey);
        // The run mirror, for the checkouts to come: made now, while nothing waits for it.
        await baseObjects(ws.sb, staging, deps.dataDir, { ...input, sandboxKey: input.sandbox.key });
        await setHostTree(ws.sb.host, staging.dir, input.sha);
        return { warmed: true };
      });
    },

    /**
     * Destroys the integration's sandboxes, each once every activity still working in it here
     * has ended (their leader is gone: they end at their next heartbeat, if they do not finish first).
     */
    async retireSandboxes(input: { sandboxes: SandboxRef[]; runKey?: string; leaderId?: string }): Promise<void> {
      for (const sandbox of input.sandboxes) {
        await sandboxUse(deps).idle(sandbox.key);
        await destroySandbox(sandbox);
      }
      if (input.runKey && input.leaderId && (await leaderClosed(input.leaderId)))
        await removeRunObjects(deps.dataDir, input.runKey);
    },
  };
}
