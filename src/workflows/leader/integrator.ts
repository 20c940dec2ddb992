/**
 * A living plan's integrator: one lane that merges finished sub-tasks onto the integration head
 * in the order they finished, runs the tests after each merge with limits.testEachMerge (a merge
 * whose tests fail is not kept), and names the head after each merge, while the other sub-tasks
 * keep running. It decides nothing: each merge's end goes to the plan's loop (plan-run.ts).
 */
import { condition } from '@temporalio/workflow';
import type { SubTaskStatus } from '../../contracts/messages';
import type { ConflictReport, SubTaskReport } from '../../contracts/reports';
import type { EndAttempt } from '../integration/attempts';
import type { Integration } from '../integration/integration';
import type { Run } from './run';
import type { Entry } from './schedule';

/** A finished attempt, on its way onto the integration head. */
export interface MergeItem {
  entry: Entry;
  report: SubTaskReport;
  line: SubTaskStatus;
  attempt: number;
  /** Where its report is in the run's result, to say so when its merge fails. */
  resultIndex: number;
  /** Settles the integration attempt that redoes a conflicting sub-task, when this is one. */
  redispatch?: EndAttempt;
}

/** Why a finished sub-task was not kept on the integration head. */
export interface MergeFailure {
  reason: string;
  outcome: 'conflict' | 'tests-failed';
  conflict?: ConflictReport;
  /** The failing tests' last lines, for its next attempt. */
  output?: string;
}

export class Integrator {
  /** Finished sub-tasks waiting to be merged, in the order they finished. */
  readonly queue: MergeItem[] = [];
  /** The sub-task being merged now. */
  merging?: string;

  constructor(
    private readonly integration: Integration,
    private readonly run: Run,
    private readonly testEachMerge: boolean,
    /** False once the plan stops taking merges: the lane ends when its queue is empty. */
    private readonly open: () => boolean,
    private readonly merged: (item: MergeItem, failure?: MergeFailure) => void,
  ) {}

  async lane(): Promise<void> {
    for (;;) {
      await condition(() => this.queue.length > 0 || !this.open());
      const item = this.queue[0];
      if (!item && !this.open()) return;
      if (!item) continue; // a person cancelled it as the lane woke
      this.merging = item.entry.task.id;
      try {
        this.merged(item, await this.merge(item));
      } finally {
        this.queue.splice(this.queue.indexOf(item), 1);
        this.merging = undefined;
      }
    }
  }

  /** Takes a finished sub-task out of the queue before its merge starts (a person cancelled it). */
  withdraw(entry: Entry): void {
    const at = this.queue.findIndex((item) => item.entry === entry);
    if (at >= 0 && this.merging !== entry.task.id) this.queue.splice(at, 1);
  }

  private async merge({ entry, report, attempt }: MergeItem): Promise<MergeFailure | undefined> {
    if (!report.headSha || report.commits === 0) return undefined;
    const { integration, run } = this;
    const before = integration.headSha;
    const conflicted = await integration.mergeOne(entry.task, report.headSha, attempt);
    if (conflicted) return { outcome: 'conflict', reason: conflicted.reason, conflict: conflicted.conflict };
    if (this.testEachMerge) {
      const failed = await integration.testMerge(entry.task.id, before);
      if (failed) return { outcome: 'tests-failed', ...failed };
    }
    const head = await integration.recordHead();
    run.status.head = head;
    run.result.head = { ...head, integrated: [...(run.result.head?.integrated ?? []), entry.task.id] };
    return undefined;
  }
}
