/**
 * Which sub-tasks of a living plan may start, and why the others wait. A sub-task starts once
 * every sub-task it depends on is integrated and every earlier sub-task (in the plan's order,
 * contracts/plan.ts) whose owned paths overlap its own has settled: integrated, or ended for
 * good. Since both kinds of wait follow one order, they never form a cycle.
 *
 * Pure: no workflow APIs, so the unit tests drive it directly. The leader (plan-run.ts) owns one
 * and moves its sub-tasks through their states.
 */
import { earlierOverlaps, overlapOf, planOrder } from '../../contracts/plan';
import type { SubTask } from '../../contracts/request';
import { clip } from '../../contracts/text';

/**
 * waiting: not started (or between attempts). running: an attempt's sub-task workflow runs.
 * merging: finished, queued for the integrator or being merged. integrated: its commits are on
 * the integration head (or it had none). The rest end it for good.
 */
export type EntryState = 'waiting' | 'running' | 'merging' | 'integrated' | 'failed' | 'cancelled' | 'dropped';

export interface Entry {
  task: SubTask;
  state: EntryState;
  /** Attempts started so far. */
  attempts: number;
  /** Attempts it may still start before it fails for good. */
  allowance: number;
  /** Why it failed, was cancelled or dropped. */
  reason?: string;
  /** The sub-task whose end dropped it: retrying that one brings it back. */
  droppedFor?: string;
}

const SETTLED: EntryState[] = ['integrated', 'failed', 'cancelled', 'dropped'];
const ENDED: EntryState[] = ['failed', 'cancelled', 'dropped'];

export class Schedule {
  private readonly entries = new Map<string, Entry>();
  private order: string[] = [];
  /** Each sub-task's earlier overlapping sub-tasks (earlier): made once per plan, not per event. */
  private overlaps = new Map<string, string[]>();

  /** `attempts`: how many attempts each sub-task may take (1 + limits.retries). */
  constructor(
    tasks: SubTask[],
    private readonly attempts: number,
  ) {
    for (const t of tasks) this.entries.set(t.id, this.fresh(t));
    this.reorder();
  }

  /** Attempts a sub-task may take unless a person allowed it more (1 + limits.retries). */
  get attemptsEach(): number {
    return this.attempts;
  }

  /** Every sub-task in plan order. */
  all(): Entry[] {
    return [...this.entries.values()];
  }

  get(id: string): Entry | undefined {
    return this.entries.get(id);
  }

  /** Adds a sub-task to the plan: it comes after every sub-task already planned. */
  add(task: SubTask): Entry {
    const entry = this.fresh(task);
    this.entries.set(task.id, entry);
    this.reorder();
    return entry;
  }

  /** Waiting sub-tasks that may start now, in the plan's order. */
  ready(): Entry[] {
    return this.order.map((id) => this.entries.get(id)!).filter((e) => this.startable(e));
  }

  /** The first of ready(), without looking further: the leader asks on every workflow activation. */
  firstReady(): Entry | undefined {
    for (const id of this.order) {
      const e = this.entries.get(id)!;
      if (this.startable(e)) return e;
    }
    return undefined;
  }

  /** Waiting, and waits for nothing: the same test as waits(), without making its sentence. */
  private startable(e: Entry): boolean {
    if (e.state !== 'waiting') return false;
    if ((e.task.dependsOn ?? []).some((d) => this.entries.get(d)?.state !== 'integrated')) return false;
    return this.earlier(e).every((o) => SETTLED.includes(o.state));
  }

  /**
   * Why a waiting sub-task cannot start yet: "waits for schema (dependency)", "waits for api:
   * overlapping src/routes.ts"; undefined when it can.
   */
  waits(entry: Entry): string | undefined {
    const deps = (entry.task.dependsOn ?? []).filter((d) => this.entries.get(d)?.state !== 'integrated');
    if (deps.length) {
      // A hundred long ids on every waiting line would outgrow the status; the line's dependsOn has them all.
      const named = deps.length > 5 ? `${deps.slice(0, 5).join(', ')} and ${deps.length - 5} more` : deps.join(', ');
      return `waits for ${named} (${deps.length > 1 ? 'dependencies' : 'dependency'})`;
    }
    for (const earlier of this.earlier(entry)) {
      if (SETTLED.includes(earlier.state)) continue;
      return `waits for ${earlier.task.id}: overlapping ${clip(overlapOf(earlier.task, entry.task)!, 200)}`;
    }
    return undefined;
  }

  /**
   * What a sub-task builds on once it starts: its dependencies, and the earlier sub-tasks whose
   * owned paths overlap its own, that are integrated. Any of them means it starts from the
   * integration head, not the base.
   */
  predecessors(entry: Entry): { entry: Entry; because: string }[] {
    const deps = new Set(entry.task.dependsOn ?? []);
    const found = [...deps].map((id) => ({ entry: this.entries.get(id)!, because: 'a dependency' }));
    for (const earlier of this.earlier(entry)) {
      if (!deps.has(earlier.task.id))
        found.push({ entry: earlier, because: `it also owns ${overlapOf(earlier.task, entry.task)}` });
    }
    return found.filter((p) => p.entry.state === 'integrated');
  }

  /** Whether a sub-task waited for others (or is retried), and so starts from the integration head. */
  startsFromHead(entry: Entry): boolean {
    return entry.attempts > 0 || (entry.task.dependsOn?.length ?? 0) > 0 || this.earlier(entry).length > 0;
  }

  /** Every sub-task has settled: nothing runs, waits or is left to merge. */
  settled(): boolean {
    return this.all().every((e) => SETTLED.includes(e.state));
  }

  /**
   * Drops every waiting sub-task that depends, directly or not, on `id`, which has ended for
   * good; returns them.
   */
  dropDependents(id: string, reason: string): Entry[] {
    const dropped: Entry[] = [];
    const visit = (of: string) => {
      for (const e of this.all()) {
        if (e.state !== 'waiting' || !(e.task.dependsOn ?? []).includes(of)) continue;
        Object.assign(e, { state: 'dropped', reason, droppedFor: id });
        dropped.push(e);
        visit(e.task.id);
      }
    };
    visit(id);
    return dropped;
  }

  /**
   * Brings back what was dropped for `id` (which is tried again), in plan order, unless another
   * of its dependencies has ended too: that one stays dropped, now for it (it would otherwise wait
   * for good). Returns both.
   */
  restoreDependents(id: string): { back: Entry[]; still: Entry[] } {
    const found = this.order
      .map((i) => this.entries.get(i)!)
      .filter((e) => e.state === 'dropped' && e.droppedFor === id);
    const back: Entry[] = [];
    const still: Entry[] = [];
    for (const e of found) {
      const blocker = (e.task.dependsOn ?? []).map((d) => this.entries.get(d)!).find((d) => ENDED.includes(d.state));
      if (!blocker) {
        Object.assign(e, { state: 'waiting', reason: undefined, droppedFor: undefined });
        back.push(e);
        continue;
      }
      const how = blocker.state === 'failed' ? 'failed' : `was ${blocker.state}`;
      const droppedFor = blocker.state === 'dropped' ? blocker.droppedFor : blocker.task.id;
      Object.assign(e, { reason: `its dependency ${blocker.task.id} ${how}`, droppedFor });
      still.push(e);
    }
    return { back, still };
  }

  /** A failed attempt: true when the sub-task may try again, false when it has failed for good. */
  attemptFailed(entry: Entry, reason: string): boolean {
    entry.reason = reason;
    if (entry.attempts < entry.allowance) {
      entry.state = 'waiting';
      return true;
    }
    entry.state = 'failed';
    return false;
  }

  /** A person asks for one more attempt of a failed sub-task. */
  retry(entry: Entry): { back: Entry[]; still: Entry[] } {
    Object.assign(entry, { state: 'waiting', allowance: entry.attempts + 1 });
    return this.restoreDependents(entry.task.id);
  }

  /** Sub-tasks ended for good (failed, cancelled, dropped). */
  ended(): Entry[] {
    return this.all().filter((e) => ENDED.includes(e.state));
  }

  /** The earlier sub-tasks (in the plan's order) whose owned paths overlap `entry`'s. */
  private earlier(entry: Entry): Entry[] {
    return (this.overlaps.get(entry.task.id) ?? []).map((id) => this.entries.get(id)!);
  }

  private fresh(task: SubTask): Entry {
    return { task, state: 'waiting', attempts: 0, allowance: this.attempts };
  }

  private reorder(): void {
    const tasks = this.all().map((e) => e.task);
    this.order = planOrder(tasks);
    this.overlaps = earlierOverlaps(tasks, this.order);
  }
}
