/**
 * What every client of Flotilla needs (the CLI, the demo, scripts): loading a request file,
 * starting a run, and reading how it ended.
 */
import { randomBytes } from 'node:crypto';
import { type Client, WorkflowFailedError, type WorkflowHandle, WorkflowUpdateFailedError } from '@temporalio/client';
import { ApplicationFailure, CancelledFailure, defaultPayloadConverter } from '@temporalio/common';
import { DEFAULT_TASK_QUEUE } from '../config/settings';
import type { IntegrationReport, Refusal, RunResult } from '../contracts/reports';
import type { LeaderRequest } from '../contracts/request';
import { ChangeLog, InPlaceView, type Output } from '../cli/terminal';
import {
  type ApproveInput,
  type PauseInput,
  type RejectInput,
  type ResumeInput,
  type RunStatus,
  approveUpdate,
  pauseUpdate,
  rejectUpdate,
  resumeUpdate,
  statusQuery,
} from '../contracts/messages';
import type { leaderWorkflow } from '../workflows/leader/leader';

export { loadRequestFile } from './request-file';

/** A readable, unique workflow id: flotilla-20261130-142501-a1b2. */
export function newRunId(now = new Date()): string {
  const stamp = now.toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
  return `flotilla-${stamp}-${randomBytes(2).toString('hex')}`;
}

export async function startRun(
  client: Client,
  request: LeaderRequest,
  opts: { taskQueue: string; workflowId?: string },
): Promise<WorkflowHandle<typeof leaderWorkflow>> {
  return client.workflow.start('leaderWorkflow', {
    taskQueue: opts.taskQueue,
    workflowId: opts.workflowId ?? newRunId(),
    args: [request],
    ...runMetadata(request),
  }) as Promise<WorkflowHandle<typeof leaderWorkflow>>;
}

/** What the Web UI shows for a run: the objective in its list, where it lands and what was asked on its page. */
export function runMetadata(request: LeaderRequest): { staticSummary: string; staticDetails: string } {
  const target = request.repo.targetRef ?? request.repo.baseRef;
  const tasks = (request.subTasks ?? []).map((t) => `- **${t.id}**: ${t.prompt.split('\n')[0]}`);
  return {
    staticSummary: `flotilla: ${request.objective.split('\n')[0]}`.slice(0, 200),
    staticDetails: [
      `**Objective**: ${request.objective}`,
      `**Repository**: ${request.repo.url} (${request.repo.baseRef} → ${target})`,
      ...(tasks.length ? ['**Sub-tasks**:', ...tasks] : ['**Sub-tasks**: planned by the agent']),
    ].join('\n'),
  };
}

export interface RunEnd {
  workflowId: string;
  /** The RunResult, whether the run pushed or ended as a failure carrying it. */
  result?: RunResult;
  /** Why it did not push: the failure type ("conflict", "InvalidRequest", ...) and message. */
  failureType?: string;
  failureMessage?: string;
}

/** Waits for a run to end and returns what a user needs of it, pushed or not. */
export async function awaitRun(handle: WorkflowHandle): Promise<RunEnd> {
  try {
    return { workflowId: handle.workflowId, result: (await handle.result()) as RunResult };
  } catch (err) {
    if (err instanceof WorkflowFailedError) {
      const cause = err.cause;
      if (cause instanceof CancelledFailure) {
        return {
          workflowId: handle.workflowId,
          failureType: 'cancelled',
          failureMessage: 'the run was cancelled; nothing was pushed',
        };
      }
      if (cause instanceof ApplicationFailure) {
        return {
          workflowId: handle.workflowId,
          failureType: cause.type ?? undefined,
          failureMessage: cause.message,
          result: asRunResult(cause.details?.[0]),
        };
      }
      return {
        workflowId: handle.workflowId,
        failureType: cause?.name ?? 'failed',
        failureMessage: cause?.message ?? err.message,
      };
    }
    throw err;
  }
}

/** The failure's details are a RunResult only when the run got far enough to have one (not for a refused request). */
function asRunResult(details: unknown): RunResult | undefined {
  const r = details as Partial<RunResult> | undefined;
  return r && typeof r === 'object' && Array.isArray(r.workers) && typeof r.outcome === 'string'
    ? (r as RunResult)
    : undefined;
}

/** A message the run refused: the reason is the workflow's own words. */
export class MessageRefused extends Error {
  constructor(readonly reason: string) {
    super(`refused: ${reason}`);
    this.name = 'MessageRefused';
  }
}

/** Sends an update and returns the run's answer; a refusal becomes MessageRefused with its reason. */
async function ask(client: Client, runId: string, send: (h: WorkflowHandle) => Promise<string>): Promise<string> {
  try {
    return await send(client.workflow.getHandle(runId));
  } catch (err) {
    if (err instanceof WorkflowUpdateFailedError && err.cause instanceof ApplicationFailure)
      throw new MessageRefused(err.cause.message);
    throw err;
  }
}

/** Passes the open gate; the answer says what was done. Throws MessageRefused with the reason. */
export function approve(client: Client, runId: string, input: ApproveInput): Promise<string> {
  return ask(client, runId, (h) => h.executeUpdate(approveUpdate, { args: [input] }));
}

export function reject(client: Client, runId: string, input: RejectInput): Promise<string> {
  return ask(client, runId, (h) => h.executeUpdate(rejectUpdate, { args: [input] }));
}

/** Pauses a worker; returns once it is suspended (or has ended), or at once for one not started yet. */
export function pause(client: Client, runId: string, input: PauseInput): Promise<string> {
  return ask(client, runId, (h) => h.executeUpdate(pauseUpdate, { args: [input] }));
}

/** Resumes a suspended worker; returns once it runs again (or has ended). */
export function resume(client: Client, runId: string, input: ResumeInput): Promise<string> {
  return ask(client, runId, (h) => h.executeUpdate(resumeUpdate, { args: [input] }));
}

function short(sha?: string): string {
  return sha ? sha.slice(0, 12) : '-';
}

function seconds(ms?: number): string {
  return ms === undefined ? '' : `${(ms / 1000).toFixed(1)}s`;
}

/** Dollars; under a dollar with more digits, since agents' spends are often a few cents. */
export function usd(n: number): string {
  if (n === 0 || n >= 1) return `$${n.toFixed(2)}`;
  if (n < 0.0001) return '<$0.0001';
  return `$${n.toFixed(n < 0.01 ? 4 : 3)}`;
}

/** Shell-quotes a value for a command the user can paste. */
function q(value: string): string {
  return /^[A-Za-z0-9_./:@=-]+$/.test(value) ? value : `'${value.replace(/'/g, `'\\''`)}'`;
}

/** Resolver, re-dispatch and repair attempts, one line each. */
function formatAttempts(report: IntegrationReport | undefined): string[] {
  if (!report?.attempts.length) return [];
  return [
    'integration attempts:',
    ...report.attempts.map((a) => {
      const who = a.workerId ? ` ${a.workerId}` : '';
      const files = a.files?.length ? ` in ${a.files.join(', ')}` : '';
      return `  ${a.kind}${who} round ${a.round}${files}: ${a.state} (${usd(a.costUsd)})${a.reason ? ` — ${a.reason}` : ''}`;
    }),
  ];
}

function formatGate(s: RunStatus, runId: string): string[] {
  const g = s.gate;
  if (!g) return [];
  const lines = [
    `gate:      ${g.gate} — waiting for approval (then ${g.onTimeout} at ${new Date(g.expiresAt).toISOString()})`,
  ];
  if (g.plan) {
    const idWidth = Math.max(2, ...g.plan.map((p) => p.id.length));
    lines.push('  plan:');
    for (const p of g.plan)
      lines.push(`    ${p.id.padEnd(idWidth)}  ${p.agent.padEnd(11)}  ${p.ownedPaths.join(', ')}  — ${p.prompt}`);
  }
  if (g.sha) {
    lines.push(`  commit:  ${g.sha}`);
    if (g.testSummary) lines.push('  tests:', ...g.testSummary.split('\n').map((l) => `    ${l}`));
    if (g.diffstat) lines.push('  changes:', ...g.diffstat.split('\n').map((l) => `    ${l}`));
  }
  for (const r of g.refused) lines.push(`  refused: ${r.by}: ${r.reason}`);
  const sha = g.sha ? ` --sha ${g.sha}` : '';
  lines.push(`  approve: flotilla approve ${q(runId)} --gate ${g.gate}${sha}`);
  lines.push(`  reject:  flotilla reject ${q(runId)} --gate ${g.gate} --reason '...'`);
  return lines;
}

function formatRefusals(refusals: Refusal[] | undefined, count: number | undefined): string[] {
  if (!refusals?.length) return [];
  const older = (count ?? 0) - refusals.length;
  return [
    `refused messages: ${count}${older > 0 ? ` (the latest ${refusals.length} shown)` : ''}`,
    ...refusals.map((r) => `  ${new Date(r.at).toISOString()} ${r.message} from ${r.by}: ${r.reason}`),
  ];
}

export function formatStatus(s: RunStatus, runId: string, now = Date.now()): string {
  const lines = [
    `run:       ${runId}`,
    `phase:     ${s.phase}${s.outcome ? ` (${s.outcome})` : ''}`,
    `objective: ${s.objective}`,
    `repo:      ${s.repo} → ${s.targetRef} (base ${short(s.baseSha)})`,
  ];
  if (s.isolation === 'none')
    lines.push('isolation: NONE: agents run unisolated on the worker (FLOTILLA_ISOLATION=none)');
  else if (s.isolation) lines.push(`isolation: ${s.isolation}`);
  if (s.planning?.source === 'planner')
    lines.push(`plan:      proposed by the planner (${s.planning.attempts} attempt(s), ${usd(s.planning.costUsd)})`);
  if (s.planning?.source === 'fallback') {
    lines.push(
      `plan:      the planner gave no valid plan (${s.planning.problems.join('; ')}); fell back to one worker with the whole objective`,
    );
  }
  if (s.integratedSha) lines.push(`integrated: ${s.integratedSha}`);
  if (s.message) lines.push(`message:   ${s.message}`);
  lines.push(...formatGate(s, runId));
  lines.push(...formatAttempts(s.integration));
  lines.push('workers:');
  const width = Math.max(6, ...s.workers.map((w) => w.id.length));
  for (const w of s.workers) {
    const detail =
      w.state === 'failed' || w.state === 'suspended'
        ? (w.reason ?? '')
        : w.commits !== undefined
          ? `${w.commits} commit(s), ${w.filesChanged} file(s)`
          : '';
    const cost = `${usd(w.costUsd)} ${String(w.turns).padStart(3)} turns`;
    const duration = w.durationMs ?? (w.startedAt === undefined ? undefined : now - w.startedAt);
    lines.push(`  ${w.id.padEnd(width)}  ${w.state.padEnd(9)} ${seconds(duration).padStart(7)}  ${cost}  ${detail}`);
    const where = placement(w);
    if (where) lines.push(`  ${' '.repeat(width)}  ${where}`);
    if (w.question) lines.push(`  ${' '.repeat(width)}  question: ${w.question}`);
    if (w.state === 'suspended')
      lines.push(`  ${' '.repeat(width)}  resume:   flotilla resume ${q(runId)} --worker ${w.id} --message '...'`);
  }
  const t = s.totals;
  lines.push(...formatRefusals(s.refusals, s.refusedCount));
  const elapsed = (s.endedAt ?? now) - s.startedAt;
  lines.push(
    `totals:    ${usd(t.costUsd)}, ${t.turns} turns, ${t.workersDone} done, ${t.workersFailed} failed, ${seconds(elapsed)} elapsed`,
  );
  return lines.join('\n');
}

/** Where a worker's sandbox lives and when its work was last saved: "on host-b, checkpoint 14:03:10 UTC (1a2b3c4d5e6f), moved 1 time(s)". */
function placement(w: {
  host?: string;
  checkpoint?: { sha: string; at: number };
  reprovisions?: number | unknown[];
}): string | undefined {
  if (!w.host) return undefined;
  const moved = Array.isArray(w.reprovisions) ? w.reprovisions.length : (w.reprovisions ?? 0);
  const saved = w.checkpoint
    ? `, checkpoint ${new Date(w.checkpoint.at).toISOString().slice(11, 19)} UTC (${w.checkpoint.sha.slice(0, 12)})`
    : '';
  return `on ${w.host}${saved}${moved ? `, moved to another host ${moved} time(s)` : ''}`;
}

export function formatRunEnd(end: RunEnd): string {
  const r = end.result;
  const lines: string[] = [];
  if (end.failureType) lines.push(`Run ${end.workflowId} did not push (${end.failureType}): ${end.failureMessage}`);
  else lines.push(`Run ${end.workflowId}: ${r?.outcome} — ${r?.message}`);
  if (!r) return lines.join('\n');
  for (const w of r.workers) {
    lines.push(
      `  worker ${w.workerId}: ${w.status}, ${w.commits} commit(s), ${w.filesChanged} file(s), isolation ${w.isolation}${w.reason ? ` — ${w.reason}` : ''}`,
    );
    const s = w.salvaged;
    if (s)
      lines.push(
        `    salvaged: ${s.commits} unverified commit(s) at ${s.ref} (${s.headSha.slice(0, 12)}) in the worker's staging repository`,
      );
    if (w.salvageFailed) lines.push(`    not salvaged: ${w.salvageFailed}`);
    const where = placement(w);
    if (where) lines.push(`    ${where}`);
    for (const m of w.reprovisions ?? [])
      lines.push(
        `    re-provisioned from ${m.from} on ${m.to}${m.fromCheckpoint ? ` at checkpoint ${m.fromCheckpoint.slice(0, 12)}` : ' from the start'}: ${m.reason}`,
      );
  }
  lines.push(...formatAttempts(r.integration));
  if (r.conflict)
    lines.push(
      `  conflict: ${r.conflict.workerId} vs ${r.conflict.conflictsWith.join(', ') || '?'} in ${r.conflict.files.join(', ')}`,
    );
  if (r.test && r.outcome !== 'pushed')
    lines.push(`  test output (tail; full log ${r.test.logRef}):`, indent(r.test.tail));
  for (const d of r.decisions ?? []) {
    const verdict = d.expired
      ? `expired (${d.approved ? 'approved' : 'failed'})`
      : d.approved
        ? 'approved'
        : 'rejected';
    lines.push(`  ${d.gate} gate ${verdict} by ${d.by}${d.comment ? `: ${d.comment}` : ''}`);
  }
  lines.push(...formatRefusals(r.refusals, r.refusedCount).map((l) => `  ${l}`));
  if (r.costUsd) lines.push(`  agents cost ${usd(r.costUsd)}`);
  if (r.pushedSha) lines.push(`  pushed ${r.pushedSha} to ${r.targetRef}`);
  return lines.join('\n');
}

function indent(text: string): string {
  return text
    .trimEnd()
    .split('\n')
    .map((l) => `    | ${l}`)
    .join('\n');
}

/** A heartbeat's details as one line; anything may be missing, so nothing is assumed. */
export function heartbeatLine(workerId: string, beat: unknown): string {
  const b = (beat && typeof beat === 'object' ? beat : {}) as { label?: unknown; lastLine?: unknown; agent?: unknown };
  const a = (b.agent && typeof b.agent === 'object' ? b.agent : undefined) as Record<string, unknown> | undefined;
  const num = (x: unknown) => (typeof x === 'number' && Number.isFinite(x) ? x : 0);
  const text = (x: unknown) => (typeof x === 'string' ? x : undefined);
  const agent = a ? ` ${num(a.turns)} turns, ${num(a.toolCalls)} tool calls, ${usd(num(a.costUsd))}` : '';
  const last = text(a?.lastEvent) ?? text(b.lastLine) ?? '';
  return `  ${workerId}: ${text(b.label) ?? 'working'}${agent}${last ? ` — ${last}` : ''}`;
}

/** What running agents report in their heartbeats: the freshest view of their progress. */
async function liveProgress(client: Client, runId: string, status: RunStatus): Promise<string[]> {
  const lines: string[] = [];
  for (const w of status.workers.filter((x) => x.state === 'running')) {
    const desc = await client.workflow
      .getHandle(`${runId}/${w.id}`)
      .describe()
      .catch(() => undefined);
    for (const a of desc?.raw.pendingActivities ?? []) {
      const payload = a.heartbeatDetails?.payloads?.[0];
      if (!payload) continue;
      let beat: unknown;
      try {
        beat = defaultPayloadConverter.fromPayload(payload);
      } catch {
        beat = undefined;
      }
      lines.push(heartbeatLine(w.id, beat));
    }
  }
  return lines.length ? ['live:', ...lines] : [];
}

/**
 * The run as [key, line] facts, for output that is not a terminal: a line is printed when its
 * fact changes, so a log shows each step once.
 */
export function statusFacts(s: RunStatus, runId: string): [string, string][] {
  const facts: [string, string][] = [
    ['phase', `phase: ${s.phase}${s.outcome ? ` (${s.outcome})` : ''}${s.message ? ` — ${s.message}` : ''}`],
  ];
  const g = s.gate;
  if (g) {
    const sha = g.sha ? ` --sha ${g.sha}` : '';
    facts.push([
      `gate ${g.gate}`,
      `gate: ${g.gate} waiting for approval; approve: flotilla approve ${q(runId)} --gate ${g.gate}${sha} | reject: flotilla reject ${q(runId)} --gate ${g.gate} --reason '...'`,
    ]);
    g.refused.forEach((r, i) => facts.push([`refused ${g.gate} ${i}`, `refused: ${r.by}: ${r.reason}`]));
  }
  if (s.refusedCount)
    facts.push(['refusals', `refused messages: ${s.refusedCount} (latest: ${s.refusals.at(-1)?.reason ?? '?'})`]);
  for (const w of s.workers) {
    const detail = w.question ? ` — question: ${w.question}` : w.reason ? ` — ${w.reason}` : '';
    facts.push([`worker ${w.id}`, `worker ${w.id}: ${w.state}, ${usd(w.costUsd)}, ${w.turns} turns${detail}`]);
  }
  (s.integration?.attempts ?? []).forEach((a, i) =>
    facts.push([
      `attempt ${i}`,
      `integration: ${a.kind}${a.workerId ? ` ${a.workerId}` : ''} round ${a.round}: ${a.state}${a.reason ? ` — ${a.reason}` : ''}`,
    ]),
  );
  return facts;
}

/** No worker answers for a run: its task queue has no poller, or the query timed out. */
export class NoWorkerError extends Error {
  name = 'NoWorkerError';
}

/** temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW: the pollers that answer queries. */
const WORKFLOW_TASK_QUEUE = 1;

/**
 * How long a status query may take before we say the worker does not answer: a worker killed
 * a moment ago is still listed as a poller, and its queries would otherwise wait a minute.
 */
const QUERY_DEADLINE_MS = 15_000;
const GRPC_CANCELLED = 1;
const GRPC_DEADLINE_EXCEEDED = 4;
const GRPC_FAILED_PRECONDITION = 9;

/** The gRPC status code of a failed call; the SDK wraps it in a ServiceError as its cause. */
export function grpcCode(err: unknown): unknown {
  const e = err as { code?: unknown; cause?: { code?: unknown } } | undefined;
  return e?.code ?? e?.cause?.code;
}

/** The command that starts a worker on a task queue. */
export function workerStartCommand(taskQueue: string): string {
  return taskQueue === DEFAULT_TASK_QUEUE ? 'flotilla worker' : `FLOTILLA_TASK_QUEUE=${q(taskQueue)} flotilla worker`;
}

export function noWorkerMessage(taskQueue: string): string {
  return `no worker is polling task queue "${taskQueue}"; start one with: ${workerStartCommand(taskQueue)}`;
}

/** True when some worker polls the task queue, i.e. can run workflows and answer queries. */
export async function hasWorker(client: Client, taskQueue: string): Promise<boolean> {
  const r = await client.workflowService.describeTaskQueue({
    namespace: client.options.namespace,
    taskQueue: { name: taskQueue },
    taskQueueType: WORKFLOW_TASK_QUEUE,
  });
  return (r.pollers?.length ?? 0) > 0;
}

/**
 * A run's status. Queries are answered by a worker, so the run's task queue is checked first:
 * without a poller, a query would wait for a long time and then fail with no word of why.
 */
export async function queryStatus(
  client: Client,
  runId: string,
  deadlineMs = QUERY_DEADLINE_MS,
): Promise<{ status: RunStatus; taskQueue: string }> {
  const handle = client.workflow.getHandle(runId);
  const { taskQueue } = await handle.describe();
  if (!(await hasWorker(client, taskQueue))) throw new NoWorkerError(noWorkerMessage(taskQueue));
  try {
    const status = await client.connection.withDeadline(Date.now() + deadlineMs, () => handle.query(statusQuery));
    return { status, taskQueue };
  } catch (err) {
    // A worker that died a moment ago is still listed as a poller: the query then times out
    // (DEADLINE_EXCEEDED, or CANCELLED when our deadline cuts the call), or the server refuses
    // it ("no poller seen for task queue recently").
    const code = grpcCode(err);
    if (code === GRPC_DEADLINE_EXCEEDED || code === GRPC_CANCELLED || code === GRPC_FAILED_PRECONDITION) {
      throw new NoWorkerError(
        `no worker on task queue "${taskQueue}" answers (a worker may have stopped); start one with: ${workerStartCommand(taskQueue)}`,
      );
    }
    throw err;
  }
}

/**
 * Shows a run live until it ends: redrawn in place (changed lines only) on a terminal, one line
 * per change otherwise. Returns how the run ended.
 */
export async function watchRun(client: Client, runId: string, out: Output): Promise<RunEnd> {
  const handle = client.workflow.getHandle(runId);
  const live = out.isTTY ? new InPlaceView(out) : undefined;
  const log = new ChangeLog(out);
  while ((await handle.describe()).status.name === 'RUNNING') {
    const answer = await queryStatus(client, runId).catch((err: unknown) =>
      err instanceof NoWorkerError ? err : undefined,
    );
    if (answer instanceof NoWorkerError) {
      if (live) live.draw([`waiting: ${answer.message}`]);
      else log.update([['worker', `waiting: ${answer.message}`]]);
    } else if (answer) {
      if (live)
        live.draw([
          ...formatStatus(answer.status, runId).split('\n'),
          ...(await liveProgress(client, runId, answer.status)),
        ]);
      else
        log.update([
          ['worker', `worker: answering on task queue "${answer.taskQueue}"`],
          ...statusFacts(answer.status, runId),
        ]);
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
  return awaitRun(handle);
}
