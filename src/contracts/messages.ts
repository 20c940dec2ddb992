/**
 * Signals and queries, shared by the workflows and every client (CLI, scripts). The names are
 * what `temporal workflow signal --name …` and `temporal workflow query --type …` use, and the
 * inputs are plain JSON so the Temporal CLI can send them:
 *
 *   temporal workflow signal --workflow-id RUN --name approve --input '{"gate":"push","sha":"…","by":"ana"}'
 *   temporal workflow update execute --workflow-id RUN --name approve --input '{"gate":"plan"}'
 *   temporal workflow query  --workflow-id RUN --type status
 */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import { z } from 'zod';
import {
  type Amendment,
  type Checkpoint,
  type CandidateResult,
  type Dropped,
  type GateDecision,
  type IntegrationHead,
  type IntegrationReport,
  type IssueRef,
  type Isolation,
  type PlanningReport,
  type PullRequestRef,
  type Refusal,
  type RunOutcome,
  type SubTaskReport,
} from './reports';
import type { ChecksReport } from './checks';
import type { Evidence } from './evidence';
import type { PlanPartInput } from './plan-parts';
import { STATUS_QUERY, SUB_TASK_STATES } from './query-names';
import type { FinishInput, ReviewReport, ReviseInput } from './review';
import { type GateName, MAX_CHARS, SubTask, boundedText, describeIssues } from './request';
import { excerpt } from './text';

export type RunPhase =
  | 'resolving'
  | 'planning'
  | 'awaiting-plan-approval'
  | 'running'
  | 'integrating'
  | 'testing'
  | 'awaiting-push-approval'
  | 'pushing'
  /** Pushed, and waiting for review comments (request.review): `flotilla revise` or `flotilla finish`. */
  | 'review'
  /** The PR is open, and the run waits for the checks on its last push, or fixes failing ones (land.checks). */
  | 'checks'
  | 'done'
  | 'failed'
  | 'cancelled';

/** dropped: never started, because what it depends on failed, was cancelled or was replanned. */
export type SubTaskState = (typeof SUB_TASK_STATES)[number];

export interface SubTaskStatus {
  id: string;
  state: SubTaskState;
  /** Why it is suspended or failed. */
  reason?: string;
  /** A suspended sub-task's question for a person, when its agent asked one. */
  question?: string;
  commits?: number;
  filesChanged?: number;
  costUsd: number;
  turns: number;
  startedAt?: number;
  /** Set once it has finished; while it runs, clients count from startedAt. */
  durationMs?: number;
  /** The host its sandbox lives on, its last checkpoint, and how often the sandbox moved to another host. */
  host?: string;
  checkpoint?: Checkpoint;
  reprovisions?: number;
  /** Why a queued sub-task has not started: "waits for api: overlapping src/routes.ts", "waits for schema (dependency)". */
  waits?: string;
  /** The sub-tasks it depends on, as the plan gives them. */
  dependsOn?: string[];
  /** Which attempt of its sub-task this line is, from the second on (its id is then `<sub-task>.attempt<n>`). */
  attempt?: number;
  /** Which candidate of a best-of-N attempt this line is (its id is then `<attempt>.candidate<k>`). */
  candidate?: number;
  /** Its commits are on the integration head (false: done, waiting for its merge; absent on runs of the fixed plan). */
  integrated?: boolean;
  /** The run whose work it reused instead of running again (`flotilla continue`). */
  reusedFrom?: string;
  /** limits.autoResume's latest word on it: "resumed by itself: slice 2, $0.40 of $1.00", or why a person is asked. */
  autoResume?: string;
}

/** What a person reviews at an open gate. */
export interface GateReview {
  gate: GateName;
  openedAt: number;
  /** When the gate decides by itself, and how. */
  expiresAt: number;
  onTimeout: 'fail' | 'approve';
  /**
   * The plan gate: one row per sub-task, with what it depends on and the sub-tasks it runs
   * after because their owned paths overlap (`after`).
   */
  plan?: {
    id: string;
    ownedPaths: string[];
    agent: string;
    prompt: string;
    dependsOn?: string[];
    after?: string[];
    /** The sub-task's own limits, overriding the request's, in a few words. */
    limits?: string;
  }[];
  /** Which of the plan's rows `plan` holds, when not all of them (a plan of more than 100 sub-tasks). */
  planPage?: WorkersPage;
  /** The push gate: the exact commit that would be pushed, and what it changes. */
  sha?: string;
  diffstat?: string;
  testSummary?: string;
  /** The push gate: sub-tasks left out of the commit (onFailure: continue), and why. */
  dropped?: Dropped[];
  /** The push gate: every candidate of the best-of-N sub-tasks, and which was integrated. */
  candidates?: CandidateResult[];
  /** The push gate: the tests' evidence tier, counts against the base, flaky runs, the measurement. */
  evidence?: Evidence;
  /** The push gate opened for a person although its mode is auto: why (a measured regression). */
  held?: string;
  /** Approvals and rejections of this gate that were refused, and why (a wrong SHA); capped like RunStatus.refusals. */
  refused: { by: string; reason: string }[];
}

export interface RunStatus {
  phase: RunPhase;
  objective: string;
  repo: string;
  targetRef: string;
  baseSha?: string;
  /** How this run's sandboxes are isolated ('none' only when the worker was started with the opt-out). */
  isolation?: Isolation;
  gate?: GateReview;
  /** One line per sub-task (a name in histories and clients); one page of them when workersPage is set. */
  workers: SubTaskStatus[];
  /** Set when `workers` is one page of the lines, not all of them (a run over STATUS_LINES_INLINE, or a page asked for). */
  workersPage?: WorkersPage;
  /** Lines per state, over every line, when `workers` is a page. */
  workersByState?: Partial<Record<SubTaskState, number>>;
  integratedSha?: string;
  /** The pull request the run opened or reused (land: pr), once it has. */
  pullRequest?: PullRequestRef;
  /** The issue the run took its objective from, once read. */
  issue?: IssueRef;
  /** Where finished sub-tasks are merged as they end: a staging ref anyone may fetch mid-run. */
  head?: IntegrationHead;
  /** Sub-tasks that will not run, and why (onFailure: continue, a cancelled dependency, a replan). */
  dropped?: Dropped[];
  /** Every candidate of the best-of-N sub-tasks, with its result as it comes (subTasks[].attempts). */
  candidates?: CandidateResult[];
  /** Amendments of the running plan (added, cancelled, retried sub-tasks): the latest AMENDMENTS_KEPT, with who sent them. */
  amendments?: Amendment[];
  /** All amendments, including those no longer kept. */
  amendedCount?: number;
  /** The failed run this one continues, reusing its work. */
  continues?: string;
  /** Times the run has rolled over into a fresh history (limits.historyEvents). */
  rollovers?: number;
  /** Conflict resolution, redone sub-tasks and repair rounds, as they happen. */
  integration?: IntegrationReport;
  /** The passing tests' evidence, once the final tree's tests have passed. */
  evidence?: Evidence;
  /** The review phase and its rounds (request.review). */
  review?: ReviewReport;
  /** The PR's checks on the last pushed commit, and the CI-fix rounds (land.checks). */
  checks?: ChecksReport;
  /** Webhook deliveries (request.notify): how many went out, and the latest that failed. */
  notifications?: NotificationsReport;
  outcome?: RunOutcome;
  message?: string;
  decisions: GateDecision[];
  /** How the plan was settled, once it is. */
  planning?: PlanningReport;
  /** Every message refused (bad payload, unknown name or sub-task, closed gate, forged progress): the latest REFUSALS_KEPT. */
  refusals: Refusal[];
  /** All refusals, including those no longer kept. */
  refusedCount: number;
  /** When the run started and, once over, ended: clients compute durations (a query cannot read the clock). */
  startedAt: number;
  endedAt?: number;
  /** When the run's deadline (limits.runTimeoutMinutes) ends it, if it has one. */
  deadlineAt?: number;
  totals: { costUsd: number; turns: number; workersDone: number; workersFailed: number };
}

/** Notifications sent, and the latest that could not be delivered (a note: a failed delivery never fails the run). */
export interface NotificationsReport {
  sent: number;
  failed: { event: string; to: string; reason: string; at: number }[];
}

/** The latest refusals a run keeps (older ones are only counted), and the longest reason kept. */
export const REFUSALS_KEPT = 20;
export const REFUSAL_MAX_CHARS = 300;
/** The latest amendments a run's status keeps (older ones are only counted). */
export const AMENDMENTS_KEPT = 20;

const by = boundedText(MAX_CHARS.name).optional();
const gate = z.enum(['plan', 'push']);
const workerId = z.string().min(1, 'must not be empty').max(100);

export const ApproveInput = z
  .object({
    gate,
    /** Required at the push gate: the integrated SHA the status shows. */
    sha: z
      .string()
      .regex(/^[0-9a-f]{40}$/, 'must be a full 40-character commit SHA')
      .optional(),
    by,
    comment: boundedText(MAX_CHARS.comment).optional(),
  })
  .strict();
export type ApproveInput = z.infer<typeof ApproveInput>;

export const RejectInput = z
  .object({ gate, by, reason: boundedText(MAX_CHARS.comment).min(1, 'must not be empty') })
  .strict();
export type RejectInput = z.infer<typeof RejectInput>;

export const PauseInput = z.object({ workerId, by }).strict();
export type PauseInput = z.infer<typeof PauseInput>;

export const ResumeInput = z
  .object({
    workerId,
    /** Delivered to the agent when it continues. */
    message: boundedText(MAX_CHARS.message).optional(),
    /** Dollars added to the sub-task's budget: finite and positive (JSON has no Infinity; zod refuses NaN). */
    addBudgetUsd: z.number().positive('must be a positive number of dollars').max(1_000_000).optional(),
    by,
  })
  .strict();
export type ResumeInput = z.infer<typeof ResumeInput>;

const subTaskId = z.string().min(1, 'must not be empty').max(100);

/** A sub-task added to the running plan; checked against the plan like a request's (ids, paths, dependencies). */
export const AddSubTaskInput = z.object({ subTask: SubTask, by }).strict();
export type AddSubTaskInput = z.infer<typeof AddSubTaskInput>;

/**
 * A queued or running sub-task taken out of the plan: its agent is stopped, its sandbox destroyed,
 * nothing of it is pushed, and what depends on it is dropped. (`subTaskId`, not the `workerId` of
 * pause and resume: these messages are new, so they use the word the vocabulary has now.)
 */
export const CancelSubTaskInput = z
  .object({ subTaskId, by, reason: boundedText(MAX_CHARS.comment).min(1, 'must not be empty') })
  .strict();
export type CancelSubTaskInput = z.infer<typeof CancelSubTaskInput>;

/** A failed sub-task run again from the integration head; its agent is told why it failed, and `message`. */
export const RetrySubTaskInput = z
  .object({ subTaskId, by, message: boundedText(MAX_CHARS.message).optional() })
  .strict();
export type RetrySubTaskInput = z.infer<typeof RetrySubTaskInput>;

/**
 * What a sub-task workflow tells its leader whenever its state changes. `token` is the one the
 * leader put in that child's input: progress without it is forged and refused.
 */
export const SubTaskProgress = z
  .object({
    token: z.string().min(1),
    id: workerId,
    /** A sub-task's end arrives as its result, not as progress. */
    state: z.enum(['running', 'suspended']),
    reason: boundedText(MAX_CHARS.comment).optional(),
    question: boundedText(MAX_CHARS.message).optional(),
    costUsd: z.number().min(0),
    turns: z.number().int().min(0),
    host: z.string().min(1).max(100).optional(),
    checkpoint: z
      .object({ sha: z.string().regex(/^[0-9a-f]{40}$/, 'must be a commit SHA'), at: z.number().min(0) })
      .strict()
      .optional(),
    reprovisions: z.number().int().min(0).max(100).optional(),
    /** Sent when it suspended on its budget: its slice, which limits.autoResume adds again while the run's budget has room. */
    budgetSliceUsd: z.number().positive().optional(),
  })
  .strict();
export type SubTaskProgress = z.infer<typeof SubTaskProgress>;

/** Parses a message with its schema: the value, or every problem in one line. Never throws. */
export function parseMessage<T>(
  schema: z.ZodType<T>,
  raw: unknown,
): { ok: true; value: T } | { ok: false; reason: string } {
  const parsed = schema.safeParse(raw, { reportInput: true });
  if (parsed.success) return { ok: true, value: parsed.data };
  return { ok: false, reason: `invalid message: ${describeIssues(parsed.error.issues, '(message)').join('; ')}` };
}

export const statusQuery = defineQuery<RunStatus, [StatusPageInput?]>(STATUS_QUERY);

/**
 * Which sub-task lines a status carries (issue 19): a run of 1,000 sub-tasks has more lines than
 * one 64 KiB payload holds. Without an input, a status of up to STATUS_LINES_INLINE lines carries
 * them all, as before; a larger one carries its first page and says so in `workersPage`.
 */
export interface StatusPageInput {
  /** Only the lines in this state. */
  state?: SubTaskState;
  /** 1-based. */
  page?: number;
  pageSize?: number;
}

/** Lines a status carries without being asked for a page: a hundred lines fit one payload (test/e2e/size.test.ts). */
export const STATUS_LINES_INLINE = 100;
/** The largest page a status carries, whatever it is asked: fifty lines with their longest texts fit one payload. */
export const STATUS_PAGE_MAX = 50;
/** Bytes (as JSON) a paged line's reason and question keep, each: head and tail; the whole reason is in the result. */
const PAGED_TEXT_BYTES = { head: 250, tail: 100 };

/** The page a status query was asked for, made valid: a bad input is read as no input, never thrown over. */
export function statusPageOf(input: unknown): Required<Omit<StatusPageInput, 'state'>> & { state?: SubTaskState } {
  const given = (typeof input === 'object' && input !== null ? input : {}) as Record<string, unknown>;
  const whole = (v: unknown, max: number, fallback: number) =>
    typeof v === 'number' && Number.isInteger(v) && v >= 1 ? Math.min(v, max) : fallback;
  const state = SUB_TASK_STATES.find((s) => s === given.state);
  return {
    ...(state && { state }),
    page: whole(given.page, Number.MAX_SAFE_INTEGER, 1),
    pageSize: whole(given.pageSize, STATUS_PAGE_MAX, STATUS_PAGE_MAX),
  };
}

/**
 * The sub-task lines of one page, and where the page stands; every line when nothing was asked
 * and they fit. Pure: the status query answers with it.
 */
export function pageOfLines(
  lines: SubTaskStatus[],
  input: unknown,
): { workers: SubTaskStatus[]; workersPage?: WorkersPage } {
  if (input === undefined && lines.length <= STATUS_LINES_INLINE) return { workers: lines };
  const { state, page, pageSize } = statusPageOf(input);
  const matching = state ? lines.filter((w) => w.state === state) : lines;
  const workers = matching.slice((page - 1) * pageSize, page * pageSize).map(shortened);
  const pages = Math.max(1, Math.ceil(matching.length / pageSize));
  return {
    workers,
    workersPage: { ...(state && { state }), page, pageSize, pages, matching: matching.length, total: lines.length },
  };
}

/**
 * The plan gate's rows a status carries: every row up to STATUS_LINES_INLINE when nothing was
 * asked, else the asked page (its state filter does not apply: a row has none). Pure.
 */
export function pageOfPlanRows(gate: GateReview, input: unknown): GateReview {
  const rows = gate.plan;
  if (!rows || (input === undefined && rows.length <= STATUS_LINES_INLINE)) return gate;
  const { page, pageSize } = statusPageOf(input);
  const pages = Math.max(1, Math.ceil(rows.length / pageSize));
  return {
    ...gate,
    plan: rows.slice((page - 1) * pageSize, page * pageSize),
    planPage: { page, pageSize, pages, matching: rows.length, total: rows.length },
  };
}

/** A line with its texts a sender controls (an agent's reason, its question) bounded for a page. */
function shortened(line: SubTaskStatus): SubTaskStatus {
  return {
    ...line,
    ...(line.reason !== undefined && { reason: excerpt(line.reason, PAGED_TEXT_BYTES.head, PAGED_TEXT_BYTES.tail) }),
    ...(line.question !== undefined && {
      question: excerpt(line.question, PAGED_TEXT_BYTES.head, PAGED_TEXT_BYTES.tail),
    }),
  };
}

/** Which of a status's sub-task lines it carries, when not all of them. */
export interface WorkersPage {
  state?: SubTaskState;
  page: number;
  pageSize: number;
  pages: number;
  /** Lines in `state` (all lines without one). */
  matching: number;
  /** Lines in the run. */
  total: number;
}
/**
 * Every sub-task report of the run, a page (100) at a time, in the run's order: what a result of
 * more than 100 reports leaves out (RunResult.workersOmitted). Answers on a closed run too.
 */
export const reportsQuery = defineQuery<ReportsPage, [{ page?: number }?]>('reports');
export interface ReportsPage {
  reports: SubTaskReport[];
  /** 1-based. */
  page: number;
  pages: number;
  total: number;
}
/** The run's plan as it stands: the request's or the planner's sub-tasks, with every amendment and replan. */
export const planQuery = defineQuery<{ subTasks: SubTask[] }>('plan');
export const approveSignal = defineSignal<[ApproveInput]>('approve');
export const rejectSignal = defineSignal<[RejectInput]>('reject');
export const pauseSignal = defineSignal<[PauseInput]>('pause');
export const resumeSignal = defineSignal<[ResumeInput]>('resume');
/**
 * The same messages as updates, under the same names: the caller gets an answer (a line saying
 * what was done), or a refusal with the reason, and a refused update leaves no trace in history.
 */
export const approveUpdate = defineUpdate<string, [ApproveInput]>('approve');
export const rejectUpdate = defineUpdate<string, [RejectInput]>('reject');
export const pauseUpdate = defineUpdate<string, [PauseInput]>('pause');
export const resumeUpdate = defineUpdate<string, [ResumeInput]>('resume');
export const addSubTaskSignal = defineSignal<[AddSubTaskInput]>('addSubTask');
export const cancelSubTaskSignal = defineSignal<[CancelSubTaskInput]>('cancelSubTask');
export const retrySubTaskSignal = defineSignal<[RetrySubTaskInput]>('retrySubTask');
export const addSubTaskUpdate = defineUpdate<string, [AddSubTaskInput]>('addSubTask');
export const cancelSubTaskUpdate = defineUpdate<string, [CancelSubTaskInput]>('cancelSubTask');
export const retrySubTaskUpdate = defineUpdate<string, [RetrySubTaskInput]>('retrySubTask');
/**
 * Sent by a sub-task's agent activity to its sub-task workflow whenever the agent reports a new
 * turn: the workflow checkpoints (and so checks the workspace's scope) at once instead of at the
 * next interval. It carries nothing, and only makes a checkpoint come sooner.
 */
export const agentTurnSignal = defineSignal('agentTurn');
/**
 * Sent by the worker's webhook receiver (src/webhooks/receiver.ts) to a run whose pull request
 * GitHub says has new review activity: the run reads the PR now instead of at its next poll. It
 * carries nothing: what the run takes comes from its own read of the forge, never from the
 * webhook's payload.
 */
export const pullRequestActivitySignal = defineSignal('pullRequestActivity');
/** A revision round's comments (the review phase); as a signal, a refusal is recorded like any other. */
export const reviseSignal = defineSignal<[ReviseInput]>('revise');
export const reviseUpdate = defineUpdate<string, [ReviseInput]>('revise');
/** Ends the review phase: the run ends with its last push. */
export const finishSignal = defineSignal<[FinishInput]>('finish');
export const finishUpdate = defineUpdate<string, [FinishInput]>('finish');
/**
 * A part of a plan sent in parts (contracts/plan-parts.ts): taken only when its text has the
 * digest the request names for it. As a query, the part's text (null until it arrived): the
 * parse activity, and a run that continues this one, read the plan so.
 */
export const planPartSignal = defineSignal<[PlanPartInput]>('planPart');
export const planPartQuery = defineQuery<string | null, [number]>('planPart');
/**
 * What a run that rolled over hands on (contracts/rollover.ts's HandOver: its carry, status lines,
 * reports and plan parts), a page of its JSON at a time, pages of up to 1 MiB: the run that
 * continues it reads them through an activity, which asks once per page, not once per 64 KiB,
 * since each query of a closed run replays its whole history.
 */
export const handOverQuery = defineQuery<{ text: string; pages: number }, [{ page: number }]>('handOver');
/** Sent by sub-task workflows to their leader; its name, from before "sub-task", lives in histories. */
export const subTaskProgressSignal = defineSignal<[SubTaskProgress]>('workerProgress');
