/**
 * `flotilla list`: the recent runs from Temporal's visibility store, each with what its status
 * query says (phase, who it waits for, repository, cost) when a worker answers.
 */
import type { Client } from '@temporalio/client';
import { NoWorkerError, queryStatus, usd } from './client';
import type { RunStatus } from './workflows/messages';

export interface RunRow {
  id: string;
  /** Temporal's view: RUNNING, COMPLETED, FAILED, CANCELLED, TERMINATED, TIMED_OUT. */
  execution: string;
  startedAt: string;
  taskQueue: string;
  /** From the status query; absent when no worker answered. */
  phase?: string;
  /** A person this run waits for: "plan gate", "push gate", or "worker <id>" (suspended). */
  awaiting?: string;
  repo?: string;
  costUsd?: number;
  /** Why the status is missing. */
  note?: string;
}

export interface ListFilters {
  awaiting?: boolean;
  repo?: string;
  phase?: string;
}

function awaitingOf(s: RunStatus): string | undefined {
  if (s.gate) return `${s.gate.gate} gate`;
  const suspended = s.workers.filter((w) => w.state === 'suspended').map((w) => w.id);
  return suspended.length ? `worker ${suspended.join(', ')}` : undefined;
}

/**
 * How long one run's status query may take. Short: a worker that just died is still listed as a
 * poller for minutes, and one such run must not hold up the whole list.
 */
const ROW_QUERY_DEADLINE_MS = 5_000;

/** The `limit` most recent leader runs, with their status, then filtered. */
export async function listRuns(client: Client, limit: number, filters: ListFilters): Promise<RunRow[]> {
  const rows: RunRow[] = [];
  for await (const wf of client.workflow.list({ query: "WorkflowType = 'leaderWorkflow'" })) {
    rows.push({ id: wf.workflowId, execution: wf.status.name, startedAt: wf.startTime.toISOString(), taskQueue: wf.taskQueue });
    if (rows.length >= limit) break;
  }
  await Promise.all(
    rows.map(async (row) => {
      try {
        const { status } = await queryStatus(client, row.id, ROW_QUERY_DEADLINE_MS);
        Object.assign(row, { phase: status.phase, awaiting: awaitingOf(status), repo: status.repo, costUsd: status.totals.costUsd });
      } catch (err) {
        row.note = err instanceof NoWorkerError ? `no worker answers on task queue "${row.taskQueue}"` : (err as Error).message;
      }
    }),
  );
  return rows.filter(
    (r) =>
      (!filters.awaiting || r.awaiting !== undefined) &&
      (!filters.repo || (r.repo ?? '').includes(filters.repo)) &&
      (!filters.phase || (r.phase ?? r.execution.toLowerCase()) === filters.phase),
  );
}

/** One row per run, columns aligned. */
export function formatRuns(rows: RunRow[]): string {
  if (!rows.length) return 'No runs.';
  const table = [
    ['RUN', 'PHASE', 'AWAITING', 'COST', 'REPO', 'STARTED'],
    ...rows.map((r) => [
      r.id,
      r.phase ?? r.execution.toLowerCase(),
      r.awaiting ?? '-',
      r.costUsd === undefined ? '-' : usd(r.costUsd),
      r.repo ?? (r.note ? `(${r.note})` : '-'),
      r.startedAt.replace('T', ' ').slice(0, 19),
    ]),
  ];
  const widths = table[0].map((_, c) => Math.max(...table.map((row) => row[c].length)));
  return table.map((row) => row.map((cell, c) => (c === row.length - 1 ? cell : cell.padEnd(widths[c]))).join('  ')).join('\n');
}
