/**
 * A rollover (contracts/rollover.ts): once the leader's history passes limits.historyEvents, the
 * plan run stops starting sub-tasks, lets what runs end and be merged, and the run continues as
 * new with what it must not lose. The new run keeps the run key (Run.key follows the chain's
 * first run), so the integration head, the sub-tasks' refs and the run mirrors are where they
 * were; it reads every status line and report back from the run it continues, a page at a time,
 * and goes on where that one stopped: no sub-task runs twice, no gate is passed twice.
 */
import { ApplicationFailure, setHandler, workflowInfo } from '@temporalio/workflow';
import { handOverQuery } from '../../contracts/messages';
import { subTaskOf } from '../../contracts/names';
import { PART_BYTES, planPartsProblem } from '../../contracts/plan-parts';
import type { SubTaskReport } from '../../contracts/reports';
import type { LeaderRequest, PlannedRequest, SubTask } from '../../contracts/request';
import type { CarriedEntry, HandOver, LeaderInput, Rollover, RolloverRef } from '../../contracts/rollover';
import { clip, pieces } from '../../contracts/text';
import type { PlanParts } from './plan-parts';
import type { PlanRun } from './plan-run';
import type { Run } from './run';
import { hostless } from './steps';

/**
 * Thrown by the plan run once it has drained, past the deadline's scope to the leader, which
 * continues as new with `carry` (completed on the way with the plan and the issue).
 */
export class RolloverDue extends Error {
  name = 'RolloverDue';
  constructor(readonly carry: Rollover) {
    super('the run rolls over');
  }
}

/** Characters a carried note's reason keeps (a retry's reason can hold a test's output), and all of them together. */
const NOTE_CHARS = 4_000;
const NOTES_CHARS = 64 * 1024;
/** Characters a carried sub-task's reason keeps (the status line shows fewer). */
const REASON_CHARS = 1_000;
/** The most a rollover hands on: 1.5 MiB, under the server's 2 MiB for one payload (see carryFits). */
const CARRY_MAX_CHARS = 1.5 * 1024 * 1024;

/**
 * The request and, when this run continues one that rolled over, what it carried (or where to
 * read it). Only Temporal can say a run continues another (a client cannot set
 * continuedFromExecutionRunId), so a `rollover` in a request a client started is refused, naming
 * the field; so is a `planParts` that does not name parts (contracts/plan-parts.ts).
 */
export function splitInput(run: Run, input: LeaderInput): { request: LeaderInput; carried?: Rollover | RolloverRef } {
  const { rollover, ...request } = (input ?? {}) as LeaderInput;
  const parts = planPartsProblem(request);
  if (parts) return run.refuse(input, refusal(parts));
  if (rollover === undefined) return { request: input };
  const from = workflowInfo().continuedFromExecutionRunId;
  if (from && typeof rollover === 'object' && rollover !== null && rollover.from === from)
    return { request, carried: rollover };
  return run.refuse(input, refusal('rollover: set only by a run that continues as new, never by a request'));
}

function refusal(problem: string): ApplicationFailure {
  return ApplicationFailure.create({
    type: 'InvalidRequest',
    message: problem,
    nonRetryable: true,
    details: [{ problems: [problem] }],
  });
}

/** Pages of the handOver query: a query of a closed run replays it, once per page, so they are large. */
const HAND_OVER_PAGE_BYTES = 1024 * 1024;

/**
 * The carry as the next run's input names it (PATCHES.carryByReference): this run answers the
 * handOver query with what it hands on (the carry, its status lines and reports, its plan's
 * parts), also once it has closed (a query replays it).
 */
export function lend(run: Run, carry: Rollover, parts?: PlanParts): RolloverRef {
  const handOver: HandOver = {
    carry,
    lines: run.status.workers,
    reports: run.result.workers,
    parts: parts?.texts() ?? [],
  };
  const texts = pieces(JSON.stringify(handOver), HAND_OVER_PAGE_BYTES);
  setHandler(handOverQuery, (input) => {
    const page = typeof input?.page === 'number' ? input.page : 1;
    return { text: texts[page - 1] ?? '', pages: texts.length };
  });
  return { from: carry.from, count: carry.count, pages: pieces(JSON.stringify(carry), PART_BYTES).length };
}

/** What the run this one continues carried: its input's, or read back a page at a time from that run. */
export async function takeCarry(req: LeaderRequest, carried: Rollover | RolloverRef): Promise<Rollover> {
  if (!('pages' in carried)) return carried;
  const json = (await pagesOf(req, carried.from, 'carry', true)).map((p) => p.text ?? '').join('');
  let carry: Rollover | undefined;
  try {
    carry = JSON.parse(json) as Rollover;
  } catch {
    carry = undefined;
  }
  if (carry?.from === carried.from && carry.count === carried.count) return { ...carry, handedOver: true };
  throw ApplicationFailure.create({
    type: 'RolloverLost',
    nonRetryable: true,
    message: `read back ${json.length} characters of what run ${carried.from} carried, and they are not its carry`,
  });
}

/** What a plan run carries into the run that continues it, once nothing runs. */
export function carryOf(p: PlanRun): Rollover {
  const { run, ctx, schedule, integration } = p;
  const { workers: lines, totals: _totals, ...status } = run.status;
  const { workers: reports, ...result } = run.result;
  const entries: CarriedEntry[] = [];
  for (const e of schedule.all()) {
    if (e.state === 'running' || e.state === 'merging') throw new Error(`rollover while ${e.task.id} is ${e.state}`);
    if (e.state === 'waiting' && e.attempts === 0 && e.allowance === schedule.attemptsEach) continue;
    const { droppedFor } = e;
    const reason = e.reason === undefined ? undefined : clip(e.reason, REASON_CHARS);
    entries.push({ id: e.task.id, state: e.state, attempts: e.attempts, allowance: e.allowance, reason, droppedFor });
  }
  // What the next attempts are told: only sub-tasks that will start again need it.
  const waits = (id: string) => schedule.get(id)?.state === 'waiting';
  const notes = [...p.notes].filter(([id]) => waits(id));
  const share = Math.min(NOTE_CHARS, Math.max(200, Math.floor(NOTES_CHARS / Math.max(1, notes.length))));
  return {
    from: workflowInfo().runId,
    count: (ctx.restored?.count ?? 0) + 1,
    baseSha: ctx.baseSha,
    targetSha: ctx.targetSha ?? null,
    ...(ctx.oracleSha && { oracleSha: ctx.oracleSha }),
    headSha: integration.headSha,
    fixersSpent: integration.fixersSpent,
    entries,
    notes: notes.map(([id, { checks: _checks, ...note }]) => [id, { ...note, reason: clip(note.reason, share) }]),
    conflicts: [...p.conflicts].filter(([id]) => waits(id)),
    status: { ...status, rollovers: (status.rollovers ?? 0) + 1 },
    result,
    lines: lines.length,
    reports: reports.length,
  };
}

/**
 * Whether what the run hands on (the plan, about the request's size, and the carry) stays well
 * under the server's 2 MiB payload limit. Before PATCHES.carryByReference it was the next
 * history's input, and a continue-as-new the server refused would fail every workflow task after
 * it; since, it is read back by page, and the bound keeps that read-back (and the handOver query's
 * pages) small, as runs in flight decided with it. A run whose carry would not fit goes on in
 * this history (it is still far from the server's history limit when limits.historyEvents is).
 */
export function carryFits(plan: PlannedRequest, carry: Rollover): boolean {
  return JSON.stringify(plan).length + JSON.stringify(carry).length <= CARRY_MAX_CHARS;
}

/** The plan the run continues with: the carried one, or the request's own when it was that. */
export function carriedPlan(req: LeaderRequest, carry: Rollover): PlannedRequest {
  const subTasks = carry.subTasks ?? req.subTasks;
  if (!subTasks) throw new Error('rollover: the carried plan has no sub-tasks');
  return { ...req, subTasks, ...(carry.sharedPaths && { sharedPaths: carry.sharedPaths }) };
}

/**
 * The plan as it stands, when it is not the request's as given (`given`: its sub-tasks and shared
 * paths copied as the run began, since amendments and replans add to the plan's own array).
 */
export function planDiff(given: PlanAsGiven, plan: PlannedRequest): Pick<Rollover, 'subTasks' | 'sharedPaths'> {
  const sameTasks =
    given.subTasks?.length === plan.subTasks.length && plan.subTasks.every((t, i) => t === given.subTasks![i]);
  const samePaths = JSON.stringify(given.sharedPaths) === JSON.stringify(plan.sharedPaths);
  return { ...(!sameTasks && { subTasks: plan.subTasks }), ...(!samePaths && { sharedPaths: plan.sharedPaths }) };
}

/** The request's own plan, copied before anything can add to it. */
export interface PlanAsGiven {
  subTasks?: SubTask[];
  sharedPaths?: string[];
}

/** A copy of the request's plan as given, for planDiff. */
export function planAsGiven(req: LeaderRequest): PlanAsGiven {
  return { subTasks: req.subTasks?.slice(), sharedPaths: req.sharedPaths?.slice() };
}

/**
 * Every status line and report of the run this one continues, read back from Temporal's record of
 * it. The lines are in the status before the reports are read (histories hold the search
 * attributes' update in between).
 */
export async function readBack(run: Run, req: LeaderRequest, carry: Rollover): Promise<void> {
  const handedOver = carry.handedOver === true;
  run.status.workers = (await pagesOf(req, carry.from, 'lines', handedOver)).flatMap((p) => p.lines ?? []);
  run.result.workers = (await pagesOf(req, carry.from, 'reports', handedOver)).flatMap((p) => p.reports ?? []);
  const [lines, reports] = [run.status.workers.length, run.result.workers.length];
  if (lines !== carry.lines || reports !== carry.reports)
    throw ApplicationFailure.create({
      type: 'RolloverLost',
      nonRetryable: true,
      message: `read back ${lines} of ${carry.lines} status lines and ${reports} of ${carry.reports} reports of run ${carry.from}`,
    });
}

/**
 * Every page of the carried run's lines, reports or carry, in order; `handedOver`: that run
 * answers the handOver query (else, a run that rolled over before it, its status and reports queries).
 */
async function pagesOf(req: LeaderRequest, from: string, kind: 'lines' | 'reports' | 'carry', handedOver: boolean) {
  const pages = [];
  for (let page = 1, count = 1; page <= count; page++) {
    const summary = `read back the ${kind} of run ${from}, page ${page}`;
    const input = { runId: from, kind, page, ...(handedOver && { handedOver }) };
    const got = await hostless(req).rolledOverPage.executeWithOptions({ summary }, [input]);
    pages.push(got);
    count = got.pages;
  }
  return pages;
}

/** The plan run takes up the schedule, the notes and the predecessors where the carried run left them. */
export function restore(p: PlanRun, carry: Rollover): void {
  const { run, schedule } = p;
  for (const line of run.status.workers) if (schedule.get(subTaskOf(line.id))) p.lines.set(subTaskOf(line.id), line);
  // A sub-task not carried never started: it waits, as the schedule made it.
  for (const c of carry.entries) {
    const entry = schedule.get(c.id);
    if (entry)
      Object.assign(entry, {
        state: c.state,
        attempts: c.attempts,
        allowance: c.allowance,
        reason: c.reason,
        droppedFor: c.droppedFor,
      });
  }
  for (const [id, note] of carry.notes) p.notes.set(id, note);
  for (const [id, conflicted] of carry.conflicts) p.conflicts.set(id, conflicted);
  const latest = new Map<string, SubTaskReport>();
  for (const r of run.result.workers) if (r.status === 'done') latest.set(subTaskOf(r.workerId), r);
  for (const e of schedule.all()) {
    const report = e.state === 'integrated' ? latest.get(e.task.id) : undefined;
    if (report) p.predecessors.integrated(e.task.id, report);
  }
}
