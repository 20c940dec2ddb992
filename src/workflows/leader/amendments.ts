/**
 * Amendments of a living plan while it runs: a sub-task added, a queued or running one cancelled,
 * a failed one retried. The inbox (inbox.ts) parses each message; here the plan says whether it
 * accepts it (pure, since it is the update's validator too) and applies it. Each one applied is
 * recorded with who sent it, in the status and the result.
 */
import { condition } from '@temporalio/workflow';
import {
  AMENDMENTS_KEPT,
  type AddSubTaskInput,
  type CancelSubTaskInput,
  type RetrySubTaskInput,
} from '../../contracts/messages';
import type { Amendment } from '../../contracts/reports';
import { additionProblems } from '../../contracts/request';
import { clip } from '../../contracts/text';
import type { PlanRun } from './plan-run';
import type { Entry } from './schedule';

/** What the inbox asks of a plan that can be amended. */
export interface Amendable {
  addProblem(a: AddSubTaskInput): string | undefined;
  add(a: AddSubTaskInput): string;
  cancelProblem(c: CancelSubTaskInput): string | undefined;
  cancel(c: CancelSubTaskInput): Promise<string>;
  retryProblem(r: RetrySubTaskInput): string | undefined;
  retry(r: RetrySubTaskInput): string;
}

const ENDED = ['failed', 'cancelled', 'dropped'];
/** The longest note or cancellation reason an amendment keeps. */
const NOTE_MAX_CHARS = 300;

export class PlanAmendments implements Amendable {
  constructor(private readonly p: PlanRun) {}

  addProblem({ subTask }: AddSubTaskInput): string | undefined {
    const { length } = this.p.plan.subTasks;
    if (length >= this.p.maxSubTasks) return `subTask: the plan has ${length} sub-tasks, the most a run takes`;
    const problems = this.openProblem() ?? additionProblems(this.p.plan, subTask).join('; ');
    if (problems) return problems;
    for (const dep of subTask.dependsOn ?? []) {
      const state = this.p.schedule.get(dep)!.state;
      if (ENDED.includes(state)) return `subTask.dependsOn: "${dep}" is ${state}; it will never be integrated`;
    }
    return undefined;
  }

  add({ subTask, by }: AddSubTaskInput): string {
    const entry = this.p.addTask(subTask);
    this.record('add', subTask.id, by);
    return `added sub-task ${subTask.id}; it ${this.p.schedule.waits(entry) ?? 'starts as soon as a slot is free'}`;
  }

  cancelProblem({ subTaskId }: CancelSubTaskInput): string | undefined {
    const found = this.find(subTaskId);
    if (typeof found === 'string') return found;
    if (this.p.integrator.merging.includes(subTaskId))
      return `sub-task ${subTaskId} is being merged onto the integration head; it can no longer be cancelled`;
    if (found.state === 'integrated')
      return `sub-task ${subTaskId} is integrated: its commits are on the integration head`;
    if (ENDED.includes(found.state)) return `sub-task ${subTaskId} is ${found.state}; nothing to cancel`;
    return undefined;
  }

  /** Stops its agent and destroys its sandbox before answering; what depends on it is dropped. */
  async cancel({ subTaskId, by, reason }: CancelSubTaskInput): Promise<string> {
    const { p } = this;
    const entry = p.schedule.get(subTaskId)!;
    const who = `cancelled by ${by ?? 'unknown'}`;
    // The reason is kept once, on the cancelled line, bounded like a note: a long one repeated on
    // every dependent would outgrow the status and the result.
    const why = clip(`${who}: ${reason}`, NOTE_MAX_CHARS);
    const attempt = p.running.get(subTaskId);
    Object.assign(entry, { state: 'cancelled', reason: why });
    Object.assign(p.lines.get(subTaskId)!, { state: 'cancelled', reason: why, waits: undefined });
    p.integrator.withdraw(entry);
    const dropped = p.schedule.all().filter((e) => e.state === 'waiting');
    p.drop(entry, `its dependency ${subTaskId} was ${who}`);
    const gone = dropped.filter((e) => e.state === 'dropped').map((e) => e.task.id);
    this.record('cancel', subTaskId, by, reason);
    if (attempt) {
      attempt.scope.cancel();
      await condition(() => !p.running.has(subTaskId));
    }
    const stopped = attempt ? ': its agent was stopped and its sandbox destroyed' : '';
    return `cancelled sub-task ${subTaskId}${stopped}${gone.length ? `; dropped ${gone.join(', ')}, which depend on it` : ''}`;
  }

  retryProblem({ subTaskId }: RetrySubTaskInput): string | undefined {
    const found = this.find(subTaskId);
    if (typeof found === 'string') return found;
    if (found.state !== 'failed')
      return `sub-task ${subTaskId} is ${found.state}; only a failed sub-task can be retried`;
    return undefined;
  }

  retry({ subTaskId, by, message }: RetrySubTaskInput): string {
    const { p } = this;
    const entry = p.schedule.get(subTaskId)!;
    const heading = `This is attempt ${entry.attempts + 1} of this sub-task, asked for by ${by ?? 'a person'}, in a fresh checkout of the integration head. Its last attempt failed; the reason follows. Do the sub-task again, avoiding that failure.`;
    p.notes.set(subTaskId, { heading, reason: entry.reason ?? 'it failed', by, message });
    const { back, still } = p.schedule.retry(entry);
    for (const e of back) Object.assign(p.lines.get(e.task.id)!, { state: 'queued', reason: undefined });
    for (const e of still) p.lines.get(e.task.id)!.reason = e.reason;
    this.record('retry', subTaskId, by, message);
    p.changed = true;
    const restored = back.length ? `; ${back.map((e) => e.task.id).join(', ')} no longer dropped` : '';
    return `retrying sub-task ${subTaskId} (attempt ${entry.attempts + 1}) from the integration head${restored}`;
  }

  /** Why the plan takes no amendment now, or undefined while it runs. */
  private openProblem(): string | undefined {
    if (this.p.revising) return 'a review round is under way; its plan is the pushed one and cannot be amended';
    if (this.p.phase === 'running')
      return this.p.replanning
        ? `a replan is under way (${this.p.replanning}); amend the plan once the planner's proposal is settled`
        : undefined;
    if (this.p.phase === 'stopping') return 'the run is ending (a sub-task failed, and onFailure is fail)';
    return `the plan has settled (phase: ${this.p.run.status.phase}); it can no longer be amended`;
  }

  private find(id: string): Entry | string {
    const open = this.openProblem();
    if (open) return open;
    const entry = this.p.schedule.get(id);
    if (entry) return entry;
    const ids = this.p.schedule.all().map((e) => e.task.id);
    const shown = ids.length > 10 ? `${ids.slice(0, 10).join(', ')}, …` : ids.join(', ');
    return `no sub-task "${clip(id, 100)}" in this plan (sub-tasks: ${shown})`;
  }

  private record(kind: Amendment['kind'], subTaskId: string, by: string | undefined, note?: string): void {
    const { status, result } = this.p.run;
    const amendment: Amendment = { kind, subTaskId, by: by ?? 'unknown', at: Date.now() };
    if (note) amendment.note = clip(note, NOTE_MAX_CHARS);
    status.amendments = result.amendments = [...(status.amendments ?? []), amendment].slice(-AMENDMENTS_KEPT);
    status.amendedCount = (status.amendedCount ?? 0) + 1;
    this.p.changed = true;
  }
}
