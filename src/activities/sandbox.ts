/** Sandbox lifecycle and workspace seeding. */
import { Context } from '@temporalio/activity';
import type { Isolation } from '../contracts/reports';
import { dropCheckpoints } from '../git/checkpoint';
import { removeRunObjects } from '../git/run-mirror';
import { seedWorkspace } from '../git/seeding';
import { type ActivityDeps, type SandboxRef, openSandbox, openWorkspace, runOfSandbox, sandboxOptions } from './deps';
import { type AgentKind, refuseAgentsWorkerLacks } from './agent-preflight';
import { type CommandReport, execTracked } from './exec';
import { SUB_TASK_WORKFLOW_ID } from '../contracts/names';

export function sandboxActivities(deps: ActivityDeps) {
  return {
    /** Keyed: a retry, or a later attempt after a crash, gets the same sandbox back. */
    async provisionSandbox(ref: SandboxRef): Promise<{ isolation: Isolation }> {
      const sb = await deps.provider(ref).provision(ref.key, sandboxOptions(ref));
      return { isolation: sb.isolation };
    },

    /**
     * Before a run starts: how its sandboxes would be isolated, or IsolationUnavailable when they
     * would not be; and AgentUnavailable when this worker lacks what the run's agents need
     * (`agents`, absent in runs that started before it was checked).
     */
    async checkIsolation(ref: SandboxRef & { agents?: AgentKind[] }): Promise<{ isolation: Isolation }> {
      const isolation = deps.provider(ref).checkIsolation();
      refuseAgentsWorkerLacks(ref.agents ?? [], ref.provider, deps.host?.host);
      return { isolation };
    },

    /**
     * A sub-task's checkpoints go with its sandbox: the sub-task has ended. The run mirror stays
     * for the run's other sandboxes on this host (removeRunMirror).
     */
    async destroySandbox(ref: SandboxRef): Promise<void> {
      await deps.provider(ref).destroy(ref.key);
      const subTask = new RegExp(`^([A-Za-z0-9_-]+)/worker/(${SUB_TASK_WORKFLOW_ID.source})$`).exec(ref.key);
      if (!subTask) return;
      const left = await dropCheckpoints(await deps.stagingHere(), subTask[1], subTask[2]);
      if (left) Context.current().log.warn(`${left}; \`flotilla gc\` removes it with the run`);
    },

    /** The run has ended: its mirror on this host goes (see src/git/run-mirror.ts). */
    async removeRunMirror(input: { runKey: string }): Promise<void> {
      await removeRunObjects(deps.dataDir, input.runKey);
    },

    /** While its sub-task is suspended, a cloud sandbox is paused (files kept, nothing billed). */
    async pauseSandbox(ref: SandboxRef): Promise<void> {
      await deps.provider(ref).pause?.(ref.key);
    },

    async resumeSandbox(ref: SandboxRef): Promise<void> {
      await deps.provider(ref).resume?.(ref.key);
    },

    /**
     * Checks out the run's base commit on `branch`; a workspace seeded before is left as it is,
     * since it may hold the agent's progress (see src/git/seeding.ts).
     */
    async seedWorkspace(input: {
      sandbox: SandboxRef;
      runKey: string;
      baseSha: string;
      branch: string;
      /** Identity for commits made in this workspace. */
      author: string;
    }): Promise<{ reused: boolean }> {
      const ws = await openWorkspace(deps, input.sandbox);
      const staging = await deps.staging(input.runKey);
      return seedWorkspace(ws, staging, deps.dataDir, { ...input, sandboxKey: input.sandbox.key });
    },

    /** Runs a setup or test command in the workspace and reports its outcome by reference. */
    async runCommand(input: {
      sandbox: SandboxRef;
      command: string;
      timeoutMs: number;
      label: string;
    }): Promise<CommandReport> {
      const sb = await openSandbox(deps, input.sandbox);
      return execTracked(deps, sb, input.command, {
        timeoutMs: input.timeoutMs,
        label: input.label,
        run: runOfSandbox(input.sandbox),
      });
    },
  };
}
