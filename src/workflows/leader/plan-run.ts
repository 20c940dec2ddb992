/**
 * A living plan: the leader's fan-out and integration as one loop. Sub-tasks start as soon as
 * what they wait for allows (schedule.ts), at most maxParallel at once, from the base when they
 * wait for nothing and from the integration head otherwise. Each one that finishes is merged onto
 * the head right away by the integrator, one at a time, while the others keep running. A failed
 * one is tried again from the head, told why, and then the request's onFailure decides. People
 * amend the plan while it runs (amendments.ts). The loop ends once every sub-task has settled;
 * the tests then run on the final tree.
 *
 * Every decision is taken by the loop, one event at a time (an attempt ended, a merge ended), so
 * that the state the handlers and the status read only ever changes between awaits.
 */
import {
  CancellationScope,
  condition,
  isCancellation,
  patched,
  setCurrentDetails,
  uuid4,
  workflowInfo,
} from '@temporalio/workflow';
import type { SubTaskStatus } from '../../contracts/messages';
import type { FailingCheck } from '../../contracts/checks';
import { ciFixNote, predecessorsNote, retryNote, reviewNote } from '../../contracts/prompts';
import type { ConflictReport, SubTaskReport } from '../../contracts/reports';
import { DEFAULT_HISTORY_EVENTS, MAX_SUB_TASKS, type PlannedRequest, type SubTask } from '../../contracts/request';
import type { CarriedNote, Rollover } from '../../contracts/rollover';
import { clip } from '../../contracts/text';
import { msOfMinutes, msOfSeconds } from '../durations';
import { type EndAttempt, track } from '../integration/attempts';
import { Integration, type IntegrationOutcome } from '../integration/integration';
import { PATCHES } from '../patches';
import { subTaskWorkflowId } from '../subtask/subtask';
import { PlanAmendments } from './amendments';
import { BestOf, candidatesOf, widthOf } from './best-of';
import { type Adopted, reuse } from './continuation';
import { type AttemptSpec, attemptId, attemptInput, runAttempt } from './dispatch';
import { Integrator, type MergeFailure, type MergeItem } from './integrator';
import { planDetails } from './plan-details';
import { Predecessors } from './predecessors';
import { Replanner } from './replan';
import { RolloverDue, carryFits, carryOf, restore } from './rollover';
import { briefReport, budgetSpent, failedReport, failedSubTasksLine, subTaskBudget } from './reports';
import { type Run, queuedLine } from './run';
import { type Entry, Schedule } from './schedule';
import { hostless } from './steps';

interface Attempt {
  spec: AttemptSpec;
  entry: Entry;
  /** It runs as several candidates (subTasks[].attempts), of which the best is kept. */
  bestOf: boolean;
  /** Slots of maxParallel it takes: its candidates running at once, else one. */
  width: number;
  line: SubTaskStatus;
  scope: CancellationScope;
  ended: Promise<void>;
  redispatch?: EndAttempt;
}

/** A sub-task whose merge conflicted: what its redo (its next attempts) started from. */
interface Conflicted {
  conflict: ConflictReport;
  /** The conflict, and what the resolver tried. */
  reason: string;
  /** The attempt whose commits conflicted. */
  attempt: number;
}

/** Characters the reasons of what was left out take together, at most (each at least 80). */
const DROPPED_CHARS = 6 * 1024;

type Event =
  | { kind: 'ended'; attempt: Attempt; report?: SubTaskReport; final?: boolean }
  | { kind: 'merged'; item: MergeItem; failure?: MergeFailure }
  | { kind: 'error'; err: unknown };

/** What the next attempt of a sub-task is told about the last one. */
export interface Note extends CarriedNote {
  /** A CI-fix round's failing checks (checks.ts), which the agent must map. */
  checks?: FailingCheck[];
}

export class PlanRun {
  readonly schedule: Schedule;
  readonly integration: Integration;
  /** Each sub-task's latest line in the status. */
  readonly lines = new Map<string, SubTaskStatus>();
  /** Sub-tasks whose attempt runs, by sub-task id. */
  readonly running = new Map<string, Attempt>();
  readonly integrator: Integrator;
  /** What the next attempt of a sub-task is told about its last one. */
  readonly notes = new Map<string, Note>();
  /** Sub-tasks whose merge conflicted, being redone. */
  readonly conflicts = new Map<string, Conflicted>();
  /** running: amendments are accepted. stopping: a failure ends the run. closed: the plan has settled. */
  phase: 'running' | 'stopping' | 'closed' = 'running';
  /**
   * While a replan round runs (its planner, its plan gate): what it replans. Amendments wait for
   * it, since its proposal is checked against the plan as the round began.
   */
  replanning?: string;
  /** Set by an amendment, so that the loop looks again. */
  changed = false;
  private readonly events: Event[] = [];
  readonly predecessors: Predecessors;
  private readonly replanner: Replanner;
  private integratorScope = new CancellationScope();
  private readonly bestOf: BestOf;
  /** While a review round runs (review.ts): a failed attempt leaves its sub-task's earlier commits integrated. */
  revising = false;
  /** Set once the history is past limits.historyEvents: nothing starts, and once nothing runs the run rolls over. */
  private rolling = false;
  /** A rollover was given up (what it would carry is too large for one payload): the run stays in this history. */
  private staysInHistory = false;
  /** Sub-tasks this run (this history) integrated: a run rolls over only after it has made progress. */
  private integratedHere = 0;
  /** The most sub-tasks an amendment may bring the plan to: the request's cap, or the 100 of runs started before it rose. */
  readonly maxSubTasks = patched(PATCHES.thousandSubTasks.id) ? MAX_SUB_TASKS : 100;

  constructor(
    readonly run: Run,
    readonly plan: PlannedRequest,
    readonly ctx: {
      baseSha: string;
      targetSha?: string | null;
      oracleSha?: string;
      adopted?: Adopted;
      /** What the run this one continues carried, when it rolled over (its lines and reports already read back). */
      restored?: Rollover;
    },
  ) {
    this.schedule = new Schedule(plan.subTasks, 1 + plan.limits.retries);
    this.integration = new Integration({
      req: plan,
      runKey: run.key,
      baseSha: ctx.baseSha,
      startSha: ctx.adopted?.head?.sha ?? ctx.restored?.headSha,
      resumed: ctx.restored && { report: run.status.integration!, spent: ctx.restored.fixersSpent },
      oracleSha: ctx.oracleSha,
      status: run.status,
      result: run.result,
      commandTimeoutMs: msOfMinutes(plan.limits.commandTimeoutMinutes),
      heartbeatTimeoutMs: msOfSeconds(plan.limits.heartbeatTimeoutSeconds),
    });
    this.integrator = new Integrator(
      this.integration,
      run,
      plan.limits.testEachMerge,
      () => this.phase === 'running',
      (item, failure) => void this.events.push({ kind: 'merged', item, failure }),
    );
    for (const line of run.status.workers) this.lines.set(line.id, line);
    this.bestOf = new BestOf(run, plan, this.integration, ctx.baseSha);
    this.predecessors = new Predecessors(this);
    this.replanner = new Replanner(this);
    if (ctx.adopted) reuse(this, ctx.adopted);
    if (ctx.restored) restore(this, ctx.restored);
    run.crew.plan = new PlanAmendments(this);
  }

  /** Runs the plan to its end, then tests the final tree: the integrated commit, or why there is none. */
  async settle(): Promise<IntegrationOutcome> {
    const { status } = this.run;
    status.phase = 'running';
    this.integration.prepareSandboxes();
    // A review round settles the plan again: the last settle cancelled its integrator's scope.
    if (this.integratorScope.consideredCancelled) this.integratorScope = new CancellationScope();
    const integrator = this.integratorScope
      .run(() => this.integrator.lane())
      .catch((err: unknown) => {
        if (!isCancellation(err)) this.events.push({ kind: 'error', err });
      });
    try {
      await this.loop();
      this.phase = 'closed';
      await integrator;
      this.ensureSomethingLanded();
      const tests = await this.integration.testAndRepair();
      if ('ok' in tests) return tests;
      return await this.integration.record(tests);
    } finally {
      this.phase = 'closed';
      setCurrentDetails('');
      await CancellationScope.nonCancellable(() => this.stopEverything());
      await this.integration.destroySandboxes();
    }
  }

  /** Starts what may start, and takes the next event, until every sub-task has settled. */
  private async loop(): Promise<void> {
    for (;;) {
      this.startReady();
      this.show();
      if (this.over()) return;
      if (this.rolling && this.drained()) this.rollOver();
      this.changed = false;
      await condition(() => this.events.length > 0 || this.changed || this.canStart() || this.over() || this.drained());
      const event = this.events.shift();
      if (event) await this.handle(event);
    }
  }

  private over(): boolean {
    return (
      this.schedule.settled() &&
      this.running.size === 0 &&
      this.events.length === 0 &&
      this.integrator.queue.length === 0
    );
  }

  /** Drained: the run continues as new, unless what it would carry is too large to (then it goes on here, for good). */
  private rollOver(): void {
    const carry = carryOf(this);
    if (carryFits(this.plan, carry)) throw new RolloverDue(carry);
    Object.assign(this, { rolling: false, staysInHistory: true });
  }

  /** Rolling over, nothing runs or waits to be merged: the run may continue as new. */
  private drained(): boolean {
    const { running, events, integrator } = this;
    const idle = running.size === 0 && events.length === 0 && integrator.queue.length === 0;
    return this.rolling && idle && integrator.merging.length === 0 && this.replanning === undefined;
  }

  /**
   * Whether the run is to roll over (rollover.ts): its history is past limits.historyEvents, this
   * history has integrated something (so a chain of runs always moves on), and sub-tasks wait.
   */
  private rolloverDue(): boolean {
    if (this.rolling) return true;
    if (this.phase !== 'running' || this.revising || this.integratedHere === 0 || this.staysInHistory) return false;
    const bound = this.plan.limits.historyEvents ?? DEFAULT_HISTORY_EVENTS;
    if (workflowInfo().historyLength < bound || !this.schedule.all().some((e) => e.state === 'waiting')) return false;
    this.rolling = patched(PATCHES.rollover.id);
    return this.rolling;
  }

  /** Whether the next ready sub-task fits under maxParallel (startReady starts them in plan order). */
  private canStart(): boolean {
    if (this.rolling) return false;
    const next = this.schedule.firstReady();
    return next !== undefined && this.fits(next);
  }

  private fits(entry: Entry): boolean {
    const { maxParallel } = this.plan.limits;
    const used = [...this.running.values()].reduce((sum, a) => sum + a.width, 0);
    return used + widthOf(entry.task, maxParallel) <= maxParallel;
  }

  private async handle(event: Event): Promise<void> {
    if (event.kind === 'error') throw event.err;
    if (event.kind === 'merged') return this.merged(event.item, event.failure);
    const { attempt, report, final } = event;
    const { entry, redispatch } = attempt;
    // Cancelled by a person (or its scope by the run's end): nothing of it is kept.
    if (!report || entry.state === 'cancelled') return redispatch?.('failed', { reason: 'cancelled' });
    const resultIndex = this.run.result.workers.push(briefReport(report, this.plan.subTasks.length)) - 1;
    if (report.status === 'done') {
      entry.state = 'merging';
      attempt.line.integrated = false;
      const item = { entry, report, line: attempt.line, attempt: attempt.spec.number, resultIndex, redispatch };
      this.integrator.queue.push(item);
      return;
    }
    const reason = report.reason ?? `the sub-task ended ${report.status}`;
    redispatch?.('failed', { reason, costUsd: report.costUsd });
    await this.attemptFailed(entry, reason, { final: final || report.unanswered });
  }

  /** A merge ended: the sub-task is integrated, or its attempt failed. */
  private async merged(item: MergeItem, failure?: MergeFailure): Promise<void> {
    const { entry, line, report, redispatch } = item;
    if (entry.state === 'cancelled') return redispatch?.('failed', { reason: 'cancelled', costUsd: report.costUsd });
    redispatch?.(failure ? 'failed' : 'succeeded', { reason: failure?.reason, costUsd: report.costUsd });
    if (!failure) {
      this.integratedHere++;
      entry.state = 'integrated';
      line.integrated = true;
      this.conflicts.delete(entry.task.id);
      this.predecessors.integrated(entry.task.id, report);
      return;
    }
    Object.assign(line, { state: 'failed', reason: clip(failure.reason, 1000) });
    this.run.result.workers[item.resultIndex] = { ...this.run.result.workers[item.resultIndex], ...failedOf(failure) };
    await this.attemptFailed(entry, failure.reason, failure);
  }

  /**
   * An attempt failed: another one from the integration head, told why, while the sub-task has
   * attempts left; then the request's onFailure.
   */
  async attemptFailed(
    entry: Entry,
    reason: string,
    more: { final?: boolean; conflict?: ConflictReport; output?: string; outcome?: MergeFailure['outcome'] } = {},
  ): Promise<void> {
    const id = entry.task.id;
    if (more.conflict && !this.conflicts.has(id))
      this.conflicts.set(id, { conflict: more.conflict, reason, attempt: entry.attempts });
    const told = more.output ? `${reason}\n${more.output}` : reason;
    if (!more.final && this.schedule.attemptFailed(entry, told)) {
      const heading = `This is attempt ${entry.attempts + 1} of this sub-task, in a fresh checkout of the integration head. Its last attempt failed; the reason follows. Do the sub-task again, avoiding that failure.`;
      this.notes.set(id, { heading, reason: told, conflict: more.conflict });
      return;
    }
    // A revision that failed changes nothing: what the sub-task pushed before stays integrated.
    if (this.revising) {
      this.conflicts.delete(id);
      return void Object.assign(entry, { state: 'integrated', reason: told });
    }
    // A sub-task whose trouble began with a conflict ends the run as one, saying what was tried.
    const conflicted = this.conflicts.get(id);
    const redone = conflicted && conflicted.attempt < entry.attempts;
    const why = redone ? `${conflicted.reason}, then redoing ${id} on the integrated tree (${reason})` : reason;
    Object.assign(entry, { state: 'failed', reason: why });
    if (conflicted) this.run.result.conflict = conflicted.conflict;
    if (this.plan.onFailure === 'continue') return void this.drop(entry, `its dependency ${id} failed`);
    if (this.plan.onFailure === 'replan' && this.replanner.roundsLeft()) return this.replanner.replan(entry);
    await this.stop(conflicted ? 'conflict' : (more.outcome ?? 'failed'));
  }

  /** Drops every sub-task that waits on `entry`, which has ended for good; returns their ids. */
  drop(entry: Entry, why: string): string[] {
    const dropped = this.schedule.dropDependents(entry.task.id, why);
    for (const e of dropped)
      Object.assign(this.lines.get(e.task.id)!, { state: 'dropped', reason: why, waits: undefined });
    return dropped.map((e) => e.task.id);
  }

  /** The first lines of an integrated sub-task's agent's final message. */
  summaryOf(id: string): string | undefined {
    return this.predecessors.summaryOf(id);
  }

  /**
   * onFailure: fail (or no replan left): cancels what runs and ends the run; nothing is pushed.
   * `also` says what else went wrong.
   */
  async stop(outcome: 'failed' | 'conflict' | 'tests-failed', also?: string): Promise<never> {
    this.phase = 'stopping';
    const running = [...this.running.values()];
    await this.stopEverything();
    // Named by their status lines (a retry's is `<id>.attempt2`), and only those the lines say were
    // cancelled: an attempt that ended on its own as it was cancelled says how it ended.
    const cancelled = running.filter((a) => a.line.state === 'cancelled').map((a) => a.line.id);
    const failed = this.schedule
      .all()
      .filter((e) => e.state === 'failed')
      .map((e) => failedReport(e.task.id, e.reason ?? 'failed'));
    const parts = [failedSubTasksLine(failed, this.plan.subTasks.length)!, ...(also ? [also] : [])];
    if (cancelled.length) parts.push(`cancelled: ${cancelled.join(', ')}`);
    return this.run.fail(outcome, parts.join('; '));
  }

  /** Cancels every running attempt and the integrator, and waits for them (their sandboxes go first). */
  private async stopEverything(): Promise<void> {
    const attempts = [...this.running.values()];
    for (const a of attempts) {
      a.scope.cancel();
      Object.assign(a.line, { state: 'cancelled', reason: a.line.reason ?? 'cancelled: the run ended' });
    }
    this.integratorScope.cancel();
    await Promise.all(attempts.map((a) => a.ended));
  }

  // ---- Starting attempts ----

  /** Starts every ready sub-task that fits under maxParallel (and the run's budget). */
  private startReady(): void {
    if (this.phase !== 'running' || this.rolloverDue()) return;
    for (const entry of this.schedule.ready()) {
      if (!this.fits(entry)) return;
      this.start(entry);
    }
  }

  private start(entry: Entry): void {
    const { run, plan } = this;
    entry.state = 'running';
    entry.attempts++;
    const spec: AttemptSpec = {
      id: attemptId(entry.task.id, entry.attempts),
      number: entry.attempts,
      prompt: entry.task.prompt,
      budgetUsd: subTaskBudget(plan.limits, plan.subTasks.length, entry.task),
    };
    const line = this.lineFor(entry, spec);
    const bestOf = candidatesOf(entry.task) > 1 && patched(PATCHES.bestOf.id);
    const width = bestOf ? widthOf(entry.task, plan.limits.maxParallel) : 1;
    const scope = new CancellationScope();
    const attempt: Attempt = { spec, entry, bestOf, width, line, scope, ended: Promise.resolve() };
    attempt.redispatch = this.trackRedo(entry, spec);
    const reason = budgetSpent(plan.limits, run.spent());
    if (reason) {
      Object.assign(line, { state: 'failed', reason, waits: undefined });
      attempt.redispatch?.('failed', { reason });
      this.events.push({ kind: 'ended', attempt, report: failedReport(spec.id, reason), final: true });
      return;
    }
    this.running.set(entry.task.id, attempt);
    attempt.ended = attempt.scope
      .run(() => this.attempt(attempt))
      .then(
        (report) => void this.events.push({ kind: 'ended', attempt, report }),
        (err: unknown) =>
          void this.events.push(isCancellation(err) ? { kind: 'ended', attempt } : { kind: 'error', err }),
      )
      .finally(() => this.running.delete(entry.task.id));
  }

  /** An attempt that redoes a conflicting sub-task shows in the integration's attempts, as a redo always has. */
  private trackRedo(entry: Entry, spec: AttemptSpec): EndAttempt | undefined {
    const conflicted = this.conflicts.get(entry.task.id);
    if (!conflicted) return undefined;
    const { attempt, end } = track(this.run.status.integration!, {
      kind: 'redispatch',
      workerId: entry.task.id,
      round: spec.number - conflicted.attempt,
      files: conflicted.conflict.files,
    });
    attempt.workflowId = subTaskWorkflowId(this.run.id, spec.id);
    return end;
  }

  /** The attempt's line: the sub-task's queued line for its first, a line of its own for each after. */
  private lineFor(entry: Entry, spec: AttemptSpec): SubTaskStatus {
    if (spec.number === 1) return this.lines.get(entry.task.id)!;
    const line: SubTaskStatus = { id: spec.id, state: 'queued', costUsd: 0, turns: 0, attempt: spec.number };
    this.run.status.workers.push(line);
    this.lines.set(entry.task.id, line);
    return line;
  }

  /** Where the attempt starts and what its agent is told, then its sub-task workflow. */
  private async attempt(a: Attempt): Promise<SubTaskReport> {
    const { entry, spec } = a;
    const { baseSha } = this.ctx;
    const fromHead = this.schedule.startsFromHead(entry) && this.integration.headSha !== baseSha;
    const before = this.schedule.predecessors(entry);
    if (before.length) spec.prompt += predecessorsNote(await this.predecessors.describe(before), uuid4());
    const note = this.notes.get(entry.task.id);
    if (note) spec.prompt += this.noteText(note);
    if (note?.agent) spec.agent = note.agent;
    if (note?.checks) spec.ciFix = note.checks.map((c) => c.name);
    if (fromHead) spec.seed = await this.seedAt(spec.id);
    const given = attemptInput(this.run, this.plan, baseSha, entry.task, spec);
    const report = a.bestOf
      ? await this.bestOf.attempt(entry.task, given, a.line, a.width)
      : await runAttempt(this.run, entry.task, given, a.line);
    return { ...report, ...(spec.seed && { seedSha: spec.seed.sha }) };
  }

  /** What an attempt is told of its note: a review round's comments, a CI-fix round's checks, or why the last attempt failed. */
  private noteText(note: Note): string {
    if (note.comments) return reviewNote(note.heading, note.comments, uuid4());
    if (note.checks) return ciFixNote(note.heading, note.checks, uuid4());
    return retryNote(note, uuid4());
  }

  /**
   * The integration head as it is now, named for an attempt (or a replan's planner) to start
   * from. Like the head, a seed is not checked against the hidden test paths: the test gate is.
   */
  async seedAt(id: string) {
    const { run, plan, ctx } = this;
    const seed = await hostless(plan).recordIntegrated({
      runKey: run.key,
      baseSha: ctx.baseSha,
      sha: this.integration.headSha,
      name: `seeds/${id}`,
    });
    return { ref: seed.ref, sha: seed.sha };
  }

  /**
   * A review round (review.ts): each sub-task given comments takes one more attempt from the
   * integration head (the pushed commit), told the comments; then the plan settles again and the
   * final tree is tested. `reviser`: the agent of the sub-tasks given comments on no path they own.
   */
  async revise(routed: Map<string, Pick<Note, 'comments' | 'checks' | 'agent'>>, heading: string) {
    for (const [id, given] of routed) {
      this.notes.set(id, { heading, reason: '', ...given });
      this.schedule.retry(this.schedule.get(id)!);
    }
    Object.assign(this, { revising: true, phase: 'running' });
    try {
      return await this.settle();
    } finally {
      this.revising = false;
    }
  }

  // ---- Amending ----

  /** Adds a sub-task to the plan (an amendment or a replan): a queued line, after what it overlaps. */
  addTask(task: SubTask): Entry {
    this.plan.subTasks.push(task);
    this.integration.planChanged(this.plan);
    const line = queuedLine(task);
    this.run.status.workers.push(line);
    this.lines.set(task.id, line);
    this.changed = true;
    return this.schedule.add(task);
  }

  // ---- What people see ----

  /**
   * The plan as it stands (the `plan` query, which `flotilla continue` reads): every sub-task but
   * those a person cancelled and those dropped with them.
   */
  standingPlan(): SubTask[] {
    const removed = (e: Entry) =>
      e.state === 'cancelled' || (e.state === 'dropped' && this.schedule.get(e.droppedFor!)?.state === 'cancelled');
    return this.schedule
      .all()
      .filter((e) => !removed(e))
      .map((e) => e.task);
  }

  /** What the pushed commit holds, in the run's last message: how many sub-tasks, and which were left out. */
  landed(): string {
    const integrated = this.schedule.all().filter((e) => e.state === 'integrated').length;
    const out = this.schedule.ended().map((e) => e.task.id);
    const more = out.length > 5 ? `, and ${out.length - 5} more` : '';
    return `${integrated} sub-task(s) integrated${out.length ? `, ${out.length} left out (${out.slice(0, 5).join(', ')}${more}; see dropped)` : ''}`;
  }

  /** The status lines' reasons to wait, what was left out, and the Web UI's current details. */
  private show(): void {
    const { status } = this.run;
    for (const entry of this.schedule.all()) {
      const line = this.lines.get(entry.task.id)!;
      if (entry.state !== 'waiting' || line.state !== 'queued') continue;
      line.waits = this.schedule.waits(entry) ?? 'waits for a free slot';
    }
    const ended = this.schedule.ended();
    // Each reason's share shrinks with their number, so that a hundred still fit one payload.
    const share = Math.min(1000, Math.max(80, Math.floor(DROPPED_CHARS / Math.max(1, ended.length))));
    status.dropped = this.run.result.dropped = ended.map((e) => ({
      id: e.task.id,
      reason: clip(e.reason ?? e.state, share),
    }));
    if (!status.gate) setCurrentDetails(planDetails(status));
  }

  /** A run where nothing landed because everything failed or was dropped says so, rather than "unchanged". */
  private ensureSomethingLanded(): void {
    const all = this.schedule.all();
    if (all.some((e) => e.state === 'integrated')) return;
    const why = all.map((e) => `${e.task.id}: ${e.reason ?? e.state}`).slice(0, 3);
    this.run.fail('failed', `no sub-task was integrated: ${why.join('; ')}${all.length > 3 ? '; …' : ''}`);
  }
}

/** A finished attempt's report once its merge failed: it counts as failed, with the reason. */
function failedOf(failure: MergeFailure): Partial<SubTaskReport> {
  return { status: 'failed', reason: clip(failure.reason, 1000) };
}
