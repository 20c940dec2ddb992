/**
 * The fan-out: one sub-task workflow per sub-task of the plan, at most maxParallel at once, each
 * with its line in the status; and the same for a sub-task that integration redoes.
 */
import { ChildWorkflowFailure, ParentClosePolicy, isCancellation, startChild, uuid4 } from '@temporalio/workflow';
import { otherSubTaskLines } from '../../contracts/brief';
import { rootMessage } from '../../contracts/failures';
import type { SubTaskStatus } from '../../contracts/messages';
import type { SubTaskReport } from '../../contracts/reports';
import { type PlannedRequest, type SubTask, agentOf } from '../../contracts/request';
import { firstLine } from '../../contracts/text';
import { msOfMinutes, msOfSeconds } from '../durations';
import { type SubTaskInput, subTaskWorkflowId, workerWorkflow } from '../subtask/subtask';
import { pool } from './pool';
import { briefReport, budgetSpent, failedReport, failedSubTasksLine, settledLine, subTaskBudget } from './reports';
import type { Run } from './run';

export class FanOut {
  /** Sub-tasks redone during integration; their reports join the result's once integration is over. */
  readonly redone: SubTaskReport[] = [];
  private readonly budgetUsd: number | undefined;

  constructor(
    private readonly run: Run,
    private readonly plan: PlannedRequest,
    private readonly baseSha: string,
  ) {
    this.budgetUsd = subTaskBudget(plan.limits, plan.subTasks.length);
  }

  /** Every sub-task of the plan; the run ends when any of them failed. */
  async all(): Promise<void> {
    const { run, plan } = this;
    run.status.phase = 'running';
    run.result.workers = await pool(plan.subTasks, plan.limits.maxParallel, (task, i) =>
      this.runSubTask(this.input(task), run.status.workers[i]),
    );
    const failed = failedSubTasksLine(run.result.workers, plan.subTasks.length);
    if (failed) run.fail('failed', failed);
  }

  /**
   * A sub-task redone on the integrated tree: one like the others, in the status, pausable and
   * counted in the budget.
   */
  async redo(given: SubTaskInput): Promise<SubTaskReport> {
    const line: SubTaskStatus = { id: given.task.id, state: 'queued', costUsd: 0, turns: 0 };
    this.run.status.workers.push(line);
    const report = await this.runSubTask(given, line);
    this.redone.push(report);
    return report;
  }

  /** What the sub-task workflow of `task` is given. */
  input(task: SubTask): SubTaskInput {
    const { plan, run } = this;
    const { limits } = plan;
    return {
      runKey: run.key,
      objective: plan.objective,
      task: { id: task.id, prompt: task.prompt, ownedPaths: task.ownedPaths, sharedPaths: plan.sharedPaths },
      agent: agentOf(plan, task),
      baseSha: this.baseSha,
      sandbox: plan.sandbox,
      setupCmd: plan.setupCmd,
      workerTimeoutMs: msOfMinutes(limits.agentTimeoutMinutes),
      commandTimeoutMs: msOfMinutes(limits.commandTimeoutMinutes),
      heartbeatTimeoutMs: msOfSeconds(limits.heartbeatTimeoutSeconds),
      budgetUsd: this.budgetUsd,
      maxTurns: limits.maxTurns,
      suspendTimeoutMs: msOfMinutes(limits.suspendTimeoutMinutes),
      policy: plan.policy,
      progressToken: uuid4(),
      // Absent from requests parsed before these limits existed: the sub-task then takes the defaults.
      hostTimeoutMs: msOfSeconds(limits.hostTimeoutSeconds),
      checkpointIntervalMs: msOfSeconds(limits.checkpointIntervalSeconds),
      others: otherSubTaskLines(plan.subTasks, task.id),
    };
  }

  /**
   * Runs one sub-task workflow and keeps its status line current; a failed child becomes a
   * failed report. No sub-task starts, first or redone, once the run's budget is spent.
   */
  private async runSubTask(given: SubTaskInput, line: SubTaskStatus): Promise<SubTaskReport> {
    const { run } = this;
    const reason = budgetSpent(this.plan.limits, run.spent());
    if (reason) {
      Object.assign(line, { state: 'failed', reason });
      return failedReport(given.task.id, reason);
    }
    Object.assign(line, { state: 'running', startedAt: Date.now() });
    run.crew.tokens.set(given.progressToken, line);
    const report = await this.child(given, line);
    Object.assign(line, settledLine(report));
    return briefReport(report, run.status.workers.length);
  }

  private async child(given: SubTaskInput, line: SubTaskStatus): Promise<SubTaskReport> {
    const { run } = this;
    const { task } = given;
    try {
      // REQUEST_CANCEL: a leader that is terminated still lets its sub-tasks destroy their sandboxes.
      const child = await startChild(workerWorkflow, {
        workflowId: subTaskWorkflowId(run.id, task.id),
        args: [given],
        parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
        // The Web UI has always shown "worker <id>" here.
        staticSummary: `worker ${task.id}: ${firstLine(task.prompt)}`,
        staticDetails: `**Sub-task** ${task.id} of run ${run.id}\n**Agent**: ${given.agent.kind}\n**Owns**: ${task.ownedPaths.join(', ')}\n\n${task.prompt}`,
      });
      run.crew.children.set(task.id, child);
      return await child.result();
    } catch (err) {
      if (isCancellation(err) || !(err instanceof ChildWorkflowFailure)) throw err;
      return failedReport(task.id, rootMessage(err), {
        durationMs: Date.now() - (line.startedAt ?? Date.now()),
        costUsd: line.costUsd,
        turns: line.turns,
      });
    }
  }
}
