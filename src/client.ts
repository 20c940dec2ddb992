/**
 * What every client of Flotilla needs (the CLI, the demo, scripts): loading a request file,
 * starting a run, and reading how it ended.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { type Client, WorkflowFailedError, type WorkflowHandle } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import YAML from 'yaml';
import { type LeaderRequest, RequestError, type RunResult, parseLeaderRequest } from './spec';
import type { RunStatus } from './workflows/messages';
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

export function formatStatus(s: RunStatus): string {
  const lines = [
    `phase:     ${s.phase}${s.outcome ? ` (${s.outcome})` : ''}`,
    `objective: ${s.objective}`,
    `repo:      ${s.repo} → ${s.targetRef} (base ${short(s.baseSha)})`,
  ];
  if (s.integratedSha) lines.push(`integrated: ${s.integratedSha}`);
  if (s.message) lines.push(`message:   ${s.message}`);
  lines.push('workers:');
  const width = Math.max(6, ...s.workers.map((w) => w.id.length));
  for (const w of s.workers) {
    const detail = w.state === 'failed' ? w.reason ?? '' : w.commits !== undefined ? `${w.commits} commit(s), ${w.filesChanged} file(s)` : '';
    lines.push(`  ${w.id.padEnd(width)}  ${w.state.padEnd(8)} ${seconds(w.durationMs).padStart(7)}  ${detail}`);
  }
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
  if (r.conflict) lines.push(`  conflict: ${r.conflict.workerId} vs ${r.conflict.conflictsWith.join(', ') || '?'} in ${r.conflict.files.join(', ')}`);
  if (r.test && r.outcome !== 'pushed') lines.push(`  test output (tail; full log ${r.test.logRef}):`, indent(r.test.tail));
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
