/**
 * One run's state, shared by the leader's steps and by its message handlers: the status (what
 * the `status` query returns), the result, and what every agent has spent. It is made before
 * the leader's first await, so every handler is registered then.
 */
import {
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  ChildWorkflowFailure,
  TemporalFailure,
  allHandlersFinished,
  condition,
  isCancellation,
  patched,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import {
  type RunStatus,
  type SubTaskStatus,
  pageOfLines,
  pageOfPlanRows,
  reportsQuery,
  statusQuery,
} from '../../contracts/messages';
import { runKeyOf } from '../../contracts/names';
import type { RunOutcome, RunResult } from '../../contracts/reports';
import type { LeaderRequest, NotifyEvent, SubTask } from '../../contracts/request';
import type { Rollover } from '../../contracts/rollover';
import { rootMessage } from '../../contracts/failures';
import { clip } from '../../contracts/text';
import { PATCHES } from '../patches';
import { type Crew, openInbox } from './inbox';
import { Notifier } from './notifier';
import type { PlanParts } from './plan-parts';
import { boundedResult, pageOfReports } from './reports';
import { keepSearchAttributesCurrent } from './visibility';

/** How a run ends well: it pushed, had nothing to push, or opened its pull request. */
export type Success = Extract<RunOutcome, 'pushed' | 'unchanged' | 'pr-opened'>;
/** How a run ends short of a push. */
export type Ending = Exclude<RunOutcome, Success>;

export class Run {
  /** The run's id: its workflow id. */
  readonly id: string;
  /** The run's name in refs, branches and sandbox keys. */
  readonly key: string;
  readonly status: RunStatus;
  readonly result: RunResult;
  /** What the inbox shares with the steps: the open gate's decision, the sub-task workflows, their tokens. */
  readonly crew: Crew;
  private readonly publishSearchAttributes: () => void;
  /** The request's webhooks (request.notify), on runs that know them. */
  private notifier?: Notifier;

  /**
   * `living`: a living plan, whose sub-tasks people can add, cancel and retry while it runs.
   * `planParts`: the parts of a plan sent in parts, which the inbox takes from the first activation on.
   */
  constructor({ living = false, planParts }: { living?: boolean; planParts?: PlanParts } = {}) {
    const info = workflowInfo();
    this.id = info.workflowId;
    // The chain's first run names it: a run that rolled over keeps its refs, mirrors and branch.
    this.key = runKeyOf(info.workflowId, info.firstExecutionRunId);
    this.status = {
      phase: 'resolving',
      objective: '',
      repo: '',
      targetRef: '',
      workers: [],
      decisions: [],
      refusals: [],
      refusedCount: 0,
      startedAt: Date.now(),
      totals: { costUsd: 0, turns: 0, workersDone: 0, workersFailed: 0 },
    };
    // Runs started before search attributes existed do not upsert them (their namespace may lack them).
    this.publishSearchAttributes = patched(PATCHES.searchAttributes.id)
      ? keepSearchAttributesCurrent(this.status, () => this.spent())
      : () => undefined;
    setHandler(statusQuery, (page) => this.statusNow(page));
    setHandler(reportsQuery, (page) => pageOfReports(this.result.workers, page));
    // People and sub-tasks: every message goes through the inbox.
    this.crew = { status: this.status, children: new Map(), tokens: new Map(), over: false, living, planParts };
    openInbox(this.crew);
    this.result = {
      outcome: 'failed',
      message: '',
      baseSha: '',
      targetRef: '',
      workers: [],
      costUsd: 0,
      decisions: [],
      refusals: [],
      refusedCount: 0,
    };
  }

  /** The request is parsed: the status and the result say what the run is for. */
  begin(req: LeaderRequest): void {
    const targetRef = req.repo.targetRef ?? req.repo.baseRef;
    Object.assign(this.status, {
      objective: req.objective,
      repo: req.repo.url,
      targetRef,
      workers: queued(req.subTasks ?? []),
      ...(req.continues && { continues: req.continues.runId }),
    });
    this.result.targetRef = targetRef;
    if (req.continues) this.result.continues = req.continues.runId;
    if (req.notify?.length && patched(PATCHES.reviewRounds.id)) {
      this.notifier = new Notifier(this.id, req.notify, this.status);
      this.crew.notify = (event, title, commands) => this.notify(event, title, commands);
    }
  }

  /**
   * The run continues one that rolled over: the status and result as that one left them (their
   * lines and reports are read back next), its start and so its deadline.
   */
  resume(carry: Rollover): void {
    Object.assign(this.status, carry.status);
    Object.assign(this.result, carry.result);
  }

  /** The run rolls over: webhooks' deliveries and every handler finish in this history (close() without the end). */
  async handOver(): Promise<void> {
    if (this.notifier) await CancellationScope.nonCancellable(() => this.notifier!.drain());
    this.crew.over = true;
    await CancellationScope.nonCancellable(() => condition(allHandlersFinished));
  }

  /** Tells the request's webhooks, when it has any: what happened, and the exact commands that answer it. */
  notify(event: NotifyEvent, title: string, commands: string[] = []): void {
    this.notifier?.send(event, title, commands);
  }

  /**
   * The request was refused, before the run began: the status says so, with the refusal and what
   * the input named, and the workflow fails with the refusal itself (`err`, rethrown).
   */
  refuse(input: unknown, err: unknown): never {
    const given = input as { objective?: unknown; repo?: { url?: unknown } } | null | undefined;
    const text = (value: unknown) => (typeof value === 'string' ? clip(value, 500) : '');
    if (isCancellation(err)) throw err;
    Object.assign(this.status, {
      phase: 'failed',
      outcome: 'failed',
      message: clip(refusalLine(err), 5_000),
      endedAt: Date.now(),
      objective: text(given?.objective),
      repo: text(given?.repo?.url),
    });
    throw err;
  }

  /** Dollars spent by every agent of the run: planner, sub-tasks, resolvers and repairers. */
  spent(): number {
    const { status } = this;
    return (
      (status.planning?.costUsd ?? 0) +
      status.workers.reduce((sum, w) => sum + w.costUsd, 0) +
      (status.integration?.costUsd ?? 0)
    );
  }

  /** Ends the run having pushed (or opened its PR), or with nothing to push: its result. */
  succeed(outcome: Success, message: string): RunResult {
    this.settle(outcome, message);
    return boundedResult(this.result);
  }

  /** Ends the run short of a push: the workflow fails with the result attached, so the Web UI shows red and clients still get the report. */
  fail(outcome: Ending, message: string): never {
    this.settle(outcome, message);
    throw ApplicationFailure.create({
      type: outcome,
      message: this.result.message,
      nonRetryable: true,
      details: [boundedResult(this.result)],
    });
  }

  /** How a step's failure ends the run. Always throws. */
  failed(err: unknown): never {
    const { status } = this;
    if (status.endedAt !== undefined) throw err; // fail() already ended the run
    if (isCancellation(err)) {
      Object.assign(status, {
        phase: 'cancelled',
        gate: undefined,
        endedAt: Date.now(),
        message: 'cancelled; nothing was pushed',
      });
      for (const w of status.workers)
        if (w.state !== 'done' && w.state !== 'failed' && w.state !== 'dropped') w.state = 'cancelled';
      throw err;
    }
    // An activity that failed for good (a permanent failure, or retries spent): the run ends, saying
    // why in one line. Anything else is a bug in this code: it fails the task, to be fixed and replayed.
    if (!(err instanceof TemporalFailure)) throw err;
    return this.fail('failed', `${phaseName(status.phase)} failed: ${failureLine(err)}`);
  }

  /** However the run ended: its search attributes say so, and every handler has finished. */
  async close(): Promise<void> {
    this.publishSearchAttributes(); // the run's end, before it closes
    if (this.notifier) {
      this.notify(
        'run-ended',
        `the run ended ${this.status.outcome ?? this.status.phase}: ${this.status.message ?? ''}`,
      );
      await CancellationScope.nonCancellable(() => this.notifier!.drain());
    }
    // Handlers waiting on a sub-task stop waiting; every handler finishes before the run returns.
    this.crew.over = true;
    await CancellationScope.nonCancellable(() => condition(allHandlersFinished));
  }

  private settle(outcome: RunOutcome, message: string): void {
    // Sandboxes that ran unisolated (the worker's FLOTILLA_ISOLATION=none) are said in the result itself.
    if (this.result.isolation === 'none') message += ' (WARNING: the sandboxes were not isolated: isolation none)';
    Object.assign(this.result, {
      outcome,
      message,
      costUsd: this.spent(),
      refusals: this.status.refusals,
      refusedCount: this.status.refusedCount,
    });
    Object.assign(this.status, {
      outcome,
      message,
      endedAt: Date.now(),
      phase: outcome === 'pushed' || outcome === 'unchanged' || outcome === 'pr-opened' ? 'done' : 'failed',
    });
  }

  /** Pure: a query must not change the state it reports. Durations are the client's to compute. */
  private statusNow(page?: unknown): RunStatus {
    const { status } = this;
    const shown = pageOfLines(status.workers, page);
    return {
      ...status,
      ...shown,
      ...(shown.workersPage && { workersByState: countByState(status.workers) }),
      ...(status.gate && { gate: pageOfPlanRows(status.gate, page) }),
      totals: {
        costUsd: this.spent(),
        turns: status.workers.reduce((sum, w) => sum + w.turns, 0),
        workersDone: status.workers.filter((w) => w.state === 'done').length,
        workersFailed: status.workers.filter((w) => w.state === 'failed').length,
      },
    };
  }
}

/** How many lines are in each state. */
function countByState(lines: SubTaskStatus[]): NonNullable<RunStatus['workersByState']> {
  const counts: NonNullable<RunStatus['workersByState']> = {};
  for (const w of lines) counts[w.state] = (counts[w.state] ?? 0) + 1;
  return counts;
}

/** A refusal of the request on one line: its problems joined, when the failure lists them. */
function refusalLine(err: unknown): string {
  const details = err instanceof ApplicationFailure ? (err.details?.[0] as { problems?: unknown }) : undefined;
  const problems = details?.problems;
  return Array.isArray(problems) ? `invalid request: ${problems.join('; ')}` : rootMessage(err);
}

/** A status line per sub-task, none started yet. */
export function queued(subTasks: SubTask[]): SubTaskStatus[] {
  return subTasks.map((t) => queuedLine(t));
}

/** A sub-task's status line before it starts, with what it depends on. */
export function queuedLine(t: SubTask): SubTaskStatus {
  return { id: t.id, state: 'queued', costUsd: 0, turns: 0, ...(t.dependsOn?.length && { dependsOn: t.dependsOn }) };
}

function phaseName(phase: RunStatus['phase']): string {
  return phase === 'resolving' ? 'resolving the base' : phase;
}

/** The innermost cause of a failure, with its type: "RemoteRefused: branch nope does not exist". */
export function failureLine(err: unknown): string {
  let e: unknown = err;
  while ((e instanceof ActivityFailure || e instanceof ChildWorkflowFailure) && e.cause) e = e.cause;
  const line = (text: string) => clip(text.trim().split('\n')[0], 500);
  if (e instanceof ApplicationFailure) return `${e.type ? `${e.type}: ` : ''}${line(e.message)}`;
  return line(e instanceof Error ? e.message : String(e));
}
