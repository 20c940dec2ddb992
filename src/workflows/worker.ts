/**
 * One sub-task: a sandbox of its own, the agent run in it, its commits collected and checked
 * against the paths it owns. The sandbox is destroyed however the worker ends.
 */
import { CancellationScope, proxyActivities } from '@temporalio/workflow';
import type { Activities, CommandReport, SandboxRef } from '../activities';
import type { AgentSpec, Isolation, WorkerReport } from '../spec';
import { activityOptions, commandOptions } from './options';

export interface WorkerInput {
  runKey: string;
  objective: string;
  task: { id: string; prompt: string; ownedPaths: string[]; sharedPaths: string[] };
  agent: AgentSpec;
  baseSha: string;
  sandbox: { provider: 'local'; network: boolean };
  setupCmd?: string;
  workerTimeoutMs: number;
  commandTimeoutMs: number;
}

export async function workerWorkflow(input: WorkerInput): Promise<WorkerReport> {
  const { provisionSandbox, seedWorkspace, collectWork, destroySandbox } = proxyActivities<Activities>(activityOptions);
  const { runCommand } = proxyActivities<Activities>(commandOptions(input.commandTimeoutMs));
  const { runAgent } = proxyActivities<Activities>(commandOptions(input.workerTimeoutMs));
  const { task } = input;
  const sandbox: SandboxRef = { key: `${input.runKey}/worker/${task.id}`, ...input.sandbox };
  const started = Date.now();
  let isolation: Isolation = 'none';
  const report = (fields: Partial<WorkerReport> & Pick<WorkerReport, 'status'>): WorkerReport => ({
    workerId: task.id,
    commits: 0,
    filesChanged: 0,
    isolation,
    durationMs: Date.now() - started,
    ...fields,
  });
  const failedCommand = (what: string, run: CommandReport): WorkerReport =>
    report({
      status: 'failed',
      reason: run.timedOut ? `${what} timed out` : `${what} exited with code ${run.exitCode}`,
      exitCode: run.exitCode,
      tail: run.tail,
      logRef: run.logRef,
    });

  try {
    ({ isolation } = await provisionSandbox(sandbox));
    await seedWorkspace({
      sandbox,
      runKey: input.runKey,
      baseSha: input.baseSha,
      branch: `flotilla/${input.runKey}/${task.id}`,
      author: `Flotilla worker ${task.id}`,
    });
    if (input.setupCmd) {
      const setup = await runCommand({ sandbox, command: input.setupCmd, timeoutMs: input.commandTimeoutMs, label: 'setup' });
      if (setup.exitCode !== 0 || setup.timedOut) return failedCommand('the setup command', setup);
    }
    const run = await runAgent({
      sandbox,
      agent: input.agent,
      workerId: task.id,
      objective: input.objective,
      prompt: task.prompt,
      timeoutMs: input.workerTimeoutMs,
    });
    if (run.exitCode !== 0 || run.timedOut) return failedCommand('the agent', run);
    const work = await collectWork({
      sandbox,
      runKey: input.runKey,
      workerId: task.id,
      baseSha: input.baseSha,
      allowedPaths: [...task.ownedPaths, ...task.sharedPaths],
    });
    const common = {
      ref: work.ref,
      headSha: work.headSha,
      commits: work.commits,
      filesChanged: work.filesChanged,
      exitCode: run.exitCode,
      tail: run.tail,
      logRef: run.logRef,
    };
    if (work.outOfScopeCount > 0) {
      const more = work.outOfScopeCount > work.outOfScope.length ? ` and ${work.outOfScopeCount - work.outOfScope.length} more` : '';
      return report({
        ...common,
        status: 'failed',
        reason: `changed ${work.outOfScopeCount} path(s) outside its ownedPaths (${task.ownedPaths.join(', ')}): ${work.outOfScope.join(', ')}${more}`,
        outOfScope: work.outOfScope,
      });
    }
    return report({ ...common, status: 'done' });
  } finally {
    await CancellationScope.nonCancellable(() => destroySandbox(sandbox));
  }
}

/** Child workflow id of a sub-task: deterministic, so a replayed leader finds its children. */
export function workerWorkflowId(leaderId: string, taskId: string): string {
  return `${leaderId}/${taskId}`;
}

