/**
 * What every client of Flotilla needs (the CLI, the demo, scripts): loading a request file,
 * starting a run, and reading how it ended.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { type Client, WorkflowFailedError, type WorkflowHandle } from '@temporalio/client';
import { ApplicationFailure, CancelledFailure, defaultPayloadConverter } from '@temporalio/common';
import YAML from 'yaml';
import { type IntegrationReport, type LeaderRequest, RequestError, type RunResult, parseLeaderRequest } from './spec';
import { type RunStatus, statusQuery } from './workflows/messages';
import type { leaderWorkflow } from './workflows/leader';

/**
 * Reads a request from JSON or YAML and validates it. A local repository path may be relative:
 * it is resolved against the request file's directory, since the worker runs elsewhere.
 */
export function loadRequestFile(file: string): LeaderRequest {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new RequestError([`cannot read request file ${file}: ${(err as Error).message}`]);
  }
  let raw: unknown;
  try {
    raw = /\.ya?ml$/i.test(file) ? YAML.parse(text) : JSON.parse(text);
  } catch (err) {
    throw new RequestError([`${file} is not valid ${/\.ya?ml$/i.test(file) ? 'YAML' : 'JSON'}: ${(err as Error).message}`]);
  }
  return parseLeaderRequest(resolveLocalRepo(raw, path.dirname(path.resolve(file))));
}

function resolveLocalRepo(raw: unknown, dir: string): unknown {
  const repo = (raw as { repo?: { url?: unknown } } | null)?.repo;
  if (!repo || typeof repo.url !== 'string') return raw;
  const url = repo.url;
  if (/^\.{1,2}(\/|$)/.test(url) || (!url.includes(':') && !url.startsWith('/') && existsSync(path.join(dir, url)))) {
    return { ...(raw as object), repo: { ...repo, url: path.resolve(dir, url) } };
  }
  return raw;
}

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
  }) as Promise<WorkflowHandle<typeof leaderWorkflow>>;
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
        return { workflowId: handle.workflowId, failureType: 'cancelled', failureMessage: 'the run was cancelled; nothing was pushed' };
      }
      if (cause instanceof ApplicationFailure) {
        return {
          workflowId: handle.workflowId,
          failureType: cause.type ?? undefined,
          failureMessage: cause.message,
          result: cause.details?.[0] as RunResult | undefined,
        };
      }
      return { workflowId: handle.workflowId, failureType: cause?.name ?? 'failed', failureMessage: cause?.message ?? err.message };
    }
    throw err;
  }
}

function short(sha?: string): string {
  return sha ? sha.slice(0, 12) : '-';
}

function seconds(ms?: number): string {
  return ms === undefined ? '' : `${(ms / 1000).toFixed(1)}s`;
}

function usd(n: number): string {
  return `$${n.toFixed(2)}`;
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
  const lines = [`gate:      ${g.gate} — waiting for approval (then ${g.onTimeout} at ${new Date(g.expiresAt).toISOString()})`];
  if (g.plan) {
    const idWidth = Math.max(2, ...g.plan.map((p) => p.id.length));
    lines.push('  plan:');
    for (const p of g.plan) lines.push(`    ${p.id.padEnd(idWidth)}  ${p.agent.padEnd(11)}  ${p.ownedPaths.join(', ')}  — ${p.prompt}`);
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

export function formatStatus(s: RunStatus, runId: string): string {
  const lines = [
    `run:       ${runId}`,
    `phase:     ${s.phase}${s.outcome ? ` (${s.outcome})` : ''}`,
    `objective: ${s.objective}`,
    `repo:      ${s.repo} → ${s.targetRef} (base ${short(s.baseSha)})`,
  ];
  if (s.isolation === 'none') lines.push('isolation: NONE: agents run unisolated on the worker (FLOTILLA_ISOLATION=none)');
  else if (s.isolation) lines.push(`isolation: ${s.isolation}`);
  if (s.planning?.source === 'planner') lines.push(`plan:      proposed by the planner (${s.planning.attempts} attempt(s), ${usd(s.planning.costUsd)})`);
  if (s.planning?.source === 'fallback') {
    lines.push(`plan:      the planner gave no valid plan (${s.planning.problems.join('; ')}); fell back to one worker with the whole objective`);
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
        ? w.reason ?? ''
        : w.commits !== undefined
          ? `${w.commits} commit(s), ${w.filesChanged} file(s)`
          : '';
    const cost = `${usd(w.costUsd)} ${String(w.turns).padStart(3)} turns`;
    lines.push(`  ${w.id.padEnd(width)}  ${w.state.padEnd(9)} ${seconds(w.durationMs).padStart(7)}  ${cost}  ${detail}`);
    if (w.question) lines.push(`  ${' '.repeat(width)}  question: ${w.question}`);
    if (w.state === 'suspended') lines.push(`  ${' '.repeat(width)}  resume:   flotilla resume ${q(runId)} --worker ${w.id} --message '...'`);
  }
  const t = s.totals;
  lines.push(`totals:    ${usd(t.costUsd)}, ${t.turns} turns, ${t.workersDone} done, ${t.workersFailed} failed, ${seconds(t.elapsedMs)} elapsed`);
  return lines.join('\n');
}

export function formatRunEnd(end: RunEnd): string {
  const r = end.result;
  const lines: string[] = [];
  if (end.failureType) lines.push(`Run ${end.workflowId} did not push (${end.failureType}): ${end.failureMessage}`);
  else lines.push(`Run ${end.workflowId}: ${r?.outcome} — ${r?.message}`);
  if (!r) return lines.join('\n');
  for (const w of r.workers) {
    lines.push(`  worker ${w.workerId}: ${w.status}, ${w.commits} commit(s), ${w.filesChanged} file(s), isolation ${w.isolation}${w.reason ? ` — ${w.reason}` : ''}`);
  }
  lines.push(...formatAttempts(r.integration));
  if (r.conflict) lines.push(`  conflict: ${r.conflict.workerId} vs ${r.conflict.conflictsWith.join(', ') || '?'} in ${r.conflict.files.join(', ')}`);
  if (r.test && r.outcome !== 'pushed') lines.push(`  test output (tail; full log ${r.test.logRef}):`, indent(r.test.tail));
  for (const d of r.decisions ?? []) {
    const verdict = d.expired ? `expired (${d.approved ? 'approved' : 'failed'})` : d.approved ? 'approved' : 'rejected';
    lines.push(`  ${d.gate} gate ${verdict} by ${d.by}${d.comment ? `: ${d.comment}` : ''}`);
  }
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
      const beat = defaultPayloadConverter.fromPayload(payload) as {
        label?: string;
        lastLine?: string;
        agent?: { turns: number; toolCalls: number; costUsd: number; lastEvent?: string };
      };
      const agent = beat.agent ? ` ${beat.agent.turns} turns, ${beat.agent.toolCalls} tool calls, ${usd(beat.agent.costUsd)}` : '';
      const last = beat.agent?.lastEvent ?? beat.lastLine ?? '';
      lines.push(`  ${w.id}: ${beat.label ?? 'working'}${agent}${last ? ` — ${last}` : ''}`);
    }
  }
  return lines.length ? ['live:', ...lines] : [];
}

/** What changed, for output that is not a terminal: the same view is printed only once. */
function significant(s: RunStatus): string {
  return JSON.stringify([s.phase, s.gate?.gate, s.gate?.refused.length, s.workers.map((w) => [w.state, w.reason, w.costUsd, w.turns])]);
}

/**
 * Shows a run live until it ends: redrawn in place on a terminal, printed on each change
 * otherwise. Returns how the run ended.
 */
export async function watchRun(client: Client, runId: string, out: NodeJS.WriteStream): Promise<RunEnd> {
  const handle = client.workflow.getHandle(runId);
  let printed = '';
  while ((await handle.describe()).status.name === 'RUNNING') {
    const status = await handle.query(statusQuery).catch(() => undefined);
    if (status) {
      const view = [formatStatus(status, runId), ...(await liveProgress(client, runId, status))].join('\n');
      if (out.isTTY) out.write(`\x1b[H\x1b[2J${view}\n`);
      else if (significant(status) !== printed) out.write(`${view}\n\n`);
      printed = significant(status);
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
  return awaitRun(handle);
}
