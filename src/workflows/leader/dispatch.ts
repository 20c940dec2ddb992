/**
 * One attempt of a sub-task in a living plan: the sub-task workflow's input, the workflow itself,
 * and its line in the status. (Runs started before the living plan start theirs in fan-out.ts.)
 */
import {
  CancellationScope,
  ChildWorkflowFailure,
  ParentClosePolicy,
  isCancellation,
  startChild,
  uuid4,
} from '@temporalio/workflow';
import type { SubTaskSeed } from '../../activities/integration';
import { otherSubTaskLines } from '../../contracts/brief';
import { rootMessage } from '../../contracts/failures';
import type { SubTaskStatus } from '../../contracts/messages';
import type { SubTaskReport } from '../../contracts/reports';
import {
  type AgentSpec,
  type PlannedRequest,
  type SubTask,
  agentOf,
  limitsOfSubTask,
  subTaskLimitsLine,
} from '../../contracts/request';
import { firstLine } from '../../contracts/text';
import { msOfMinutes, msOfSeconds } from '../durations';
import { type SubTaskInput, subTaskWorkflowId, workerWorkflow } from '../subtask/subtask';
import { failedReport, settledLine } from './reports';
import type { Run } from './run';

/** What one attempt is: its id (`<sub-task>` first, then `<sub-task>.attempt<n>`), its prompt and where it starts. */
export interface AttemptSpec {
  id: string;
  number: number;
  /** The sub-task's prompt with what it builds on and why its last attempt failed. */
  prompt: string;
  /** The integration head it starts from; absent: the base. */
  seed?: SubTaskSeed;
  /** Dollars its agent may spend. */
  budgetUsd?: number;
  /** The agent it runs instead of the sub-task's own (a review round's reviser, a CI-fix round's fixer). */
  agent?: AgentSpec;
  /** A CI-fix round's attempt: the failing checks its agent must map. */
  ciFix?: string[];
}

/** The id of attempt `n` of a sub-task: deterministic, and never a sub-task's own (ids have no dots). */
export function attemptId(taskId: string, n: number): string {
  return n === 1 ? taskId : `${taskId}.attempt${n}`;
}

/** The sub-task workflow's input for an attempt of `task`. */
export function attemptInput(run: Run, plan: PlannedRequest, baseSha: string, task: SubTask, a: AttemptSpec) {
  const { limits } = plan;
  const own = limitsOfSubTask(limits, task);
  const given: SubTaskInput = {
    runKey: run.key,
    objective: plan.objective,
    task: { id: a.id, prompt: a.prompt, ownedPaths: task.ownedPaths, sharedPaths: plan.sharedPaths },
    agent: a.agent ?? agentOf(plan, task),
    baseSha,
    ...(a.seed && { seed: a.seed }),
    sandbox: plan.sandbox,
    setupCmd: plan.setupCmd,
    workerTimeoutMs: msOfMinutes(own.agentTimeoutMinutes),
    commandTimeoutMs: msOfMinutes(limits.commandTimeoutMinutes),
    heartbeatTimeoutMs: msOfSeconds(limits.heartbeatTimeoutSeconds),
    budgetUsd: a.budgetUsd,
    maxTurns: own.maxTurns,
    suspendTimeoutMs: msOfMinutes(limits.suspendTimeoutMinutes),
    policy: plan.policy,
    progressToken: uuid4(),
    hostTimeoutMs: msOfSeconds(limits.hostTimeoutSeconds),
    checkpointIntervalMs: msOfSeconds(limits.checkpointIntervalSeconds),
    ...(a.number > 1 && { attemptOf: task.id }),
    others: otherSubTaskLines(plan.subTasks, task.id),
    ...(limits.idleMinutes !== undefined && { idleMs: msOfMinutes(limits.idleMinutes) }),
    ...(limits.stallCheckpoints !== undefined && { stallCheckpoints: limits.stallCheckpoints }),
    ...(a.ciFix && { ciFix: { checks: a.ciFix } }),
  };
  return given;
}

/**
 * Runs an attempt's sub-task workflow and keeps its status line current; a failed workflow
 * becomes a failed report. Cancelled with its scope (a person cancelled the sub-task, or the run
 * is ending), it rejects with the cancellation, once the workflow has destroyed its sandbox.
 */
export async function runAttempt(run: Run, task: SubTask, given: SubTaskInput, line: SubTaskStatus) {
  Object.assign(line, { state: 'running', startedAt: Date.now(), waits: undefined });
  run.crew.tokens.set(given.progressToken, line);
  let report: SubTaskReport;
  const own = subTaskLimitsLine(task.limits);
  try {
    // REQUEST_CANCEL: a leader that is terminated still lets its sub-tasks destroy their sandboxes.
    const child = await startChild(workerWorkflow, {
      workflowId: subTaskWorkflowId(run.id, given.task.id),
      args: [given],
      parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
      // The Web UI has always shown "worker <id>" here.
      staticSummary: `worker ${given.task.id}: ${firstLine(task.prompt)}`,
      staticDetails: [
        `**Sub-task** ${task.id} of run ${run.id}${given.task.id === task.id ? '' : ` (${given.task.id})`}`,
        `**Agent**: ${given.agent.kind}`,
        `**Owns**: ${task.ownedPaths.join(', ')}`,
        ...(task.dependsOn?.length ? [`**Depends on**: ${task.dependsOn.join(', ')}`] : []),
        ...(own ? [`**Limits**: ${own}`] : []),
        `**Starts from**: ${given.seed ? `the integration head ${given.seed.sha}` : `the base ${given.baseSha}`}`,
        '',
        task.prompt,
      ].join('\n'),
    });
    run.crew.children.set(given.task.id, child);
    report = await child.result();
  } catch (err) {
    // Cancelled by its own scope: the caller knows why. Cancelled from outside: a failed attempt.
    if (isCancellation(err) && CancellationScope.current().consideredCancelled) throw err;
    if (!(err instanceof ChildWorkflowFailure)) throw err;
    report = failedReport(given.task.id, rootMessage(err), {
      durationMs: Date.now() - (line.startedAt ?? Date.now()),
      costUsd: line.costUsd,
      turns: line.turns,
    });
  }
  Object.assign(line, settledLine(report));
  return report;
}
