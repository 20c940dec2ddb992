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
  /** The sub-tasks being merged now. */
  merging: string[] = [];

  constructor(
    private readonly integration: Integration,
    private readonly run: Run,
    private readonly testEachMerge: boolean,
    /** False once the plan stops taking merges: the lane ends when its queue is empty. */
    private readonly open: () => boolean,
    private readonly merged: (item: MergeItem, failure?: MergeFailure) => void,
  ) {}

  /**
   * Merges what has finished, as it finishes. Sub-tasks that finished while a merge ran are merged
   * together, in one activity and one move of the head (one at a time with testEachMerge, whose
   * tests must say which merge broke them): a plan of independent sub-tasks costs no more
   * activities than one merge of them all at the end did.
   */
  async lane(): Promise<void> {
    for (;;) {
      await condition(() => this.queue.length > 0 || !this.open());
      if (!this.queue.length) {
        if (!this.open()) return;
        continue; // a person cancelled it as the lane woke
      }
      const batch = this.testEachMerge ? this.queue.slice(0, 1) : [...this.queue];
      this.merging = batch.map((item) => item.entry.task.id);
      let ended: [MergeItem, MergeFailure?][] = batch.map((item) => [item]);
      try {
        ended = await this.merge(batch);
      } finally {
        this.merging = [];
        // What was merged or failed leaves the queue (all of the batch when the merge itself threw).
        for (const [item] of ended) this.queue.splice(this.queue.indexOf(item), 1);
      }
      for (const [item, failure] of ended) this.merged(item, failure);
    }
  }

  /** Takes a finished sub-task out of the queue before its merge starts (a person cancelled it). */
  withdraw(entry: Entry): void {
    const at = this.queue.findIndex((item) => item.entry === entry);
    if (at >= 0 && !this.merging.includes(entry.task.id)) this.queue.splice(at, 1);
  }

  /** The items of `batch` that were merged or failed, in order, each with why it failed; the rest stay queued. */
  private async merge(batch: MergeItem[]): Promise<[MergeItem, MergeFailure?][]> {
    const { integration, run } = this;
    const before = integration.headSha;
    // Nothing to merge: on the head already.
    const empty = (item: MergeItem) => !item.report.headSha || item.report.commits === 0;
    const work = batch.filter((item) => !empty(item));
    const done: [MergeItem, MergeFailure?][] = batch.filter(empty).map((item) => [item]);
    if (!work.length) return done;
    // The merge names the head itself, unless tests must pass first.
    const {
      merged,
      conflicted,
      head: named,
    } = await integration.mergeEach(
      work.map(({ entry, report, attempt }) => ({ task: entry.task, headSha: report.headSha!, attempt })),
      !this.testEachMerge,
    );
    const kept = work.slice(0, merged);
    if (kept.length && this.testEachMerge) {
      const failed = await integration.testMerge(kept[0].entry.task.id, before);
      if (failed) return [...done, [kept[0], { outcome: 'tests-failed', ...failed }]];
    }
    if (kept.length) {
      const head = named ?? (await integration.recordHead());
      run.status.head = head;
      const integrated = [...(run.result.head?.integrated ?? []), ...kept.map((item) => item.entry.task.id)];
      run.result.head = { ...head, integrated };
    }
    done.push(...kept.map((item): [MergeItem] => [item]));
    if (conflicted) done.push([work[merged], { outcome: 'conflict', ...conflicted }]);
    return done;
  }
}
