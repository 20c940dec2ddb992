/**
 * Listing runs (`flotilla list`): leader runs from Temporal's visibility store, filtered by
 * Flotilla's search attributes (src/contracts/search-attributes.ts) in the same query the Web UI
 * would run, each row read from those attributes. A run started before they existed has none:
 * its row asks the run's status query instead, when a worker answers.
 */
import type { Client, WorkflowExecutionInfo } from '@temporalio/client';
import { NoWorkerError, grpcCode, queryStatus } from './status';
import {
  FlotillaAwaiting,
  FlotillaCostUsd,
  FlotillaOutcome,
  FlotillaPhase,
  FlotillaRepo,
  FlotillaTargetRef,
  type RunFilters,
  awaitingOf,
  runsQuery,
} from '../contracts/search-attributes';
import { checkMessage, checkSearchAttributes } from '../temporal/search-attributes';

export interface RunRow {
  id: string;
  /** Temporal's view: RUNNING, COMPLETED, FAILED, CANCELLED, TERMINATED, TIMED_OUT. */
  execution: string;
  startedAt: string;
  taskQueue: string;
  /** The run's phase; absent for an older run no worker answered for. */
  phase?: string;
  /** The person it waits for: at the plan gate, the push gate, or to resume a sub-task ("answer"). */
  awaiting?: 'plan' | 'push' | 'answer';
  outcome?: string;
  repo?: string;
  targetRef?: string;
  costUsd?: number;
  /** Why the row is incomplete. */
  note?: string;
}

export type ListFilters = RunFilters;

/** The namespace lacks the search attributes a filter needs. */
export class SearchAttributesMissing extends Error {}

/**
 * How long one run's status query may take. Short: a worker that just died is still listed as a
 * poller for minutes, and one such run must not hold up the whole list.
 */
const ROW_QUERY_DEADLINE_MS = 5_000;

const GRPC_INVALID_ARGUMENT = 3;

function rowOf(wf: WorkflowExecutionInfo): RunRow {
  const attrs = wf.typedSearchAttributes;
  const awaiting = attrs.get(FlotillaAwaiting);
  return {
    id: wf.workflowId,
    execution: wf.status.name,
    startedAt: wf.startTime.toISOString(),
    taskQueue: wf.taskQueue,
    phase: attrs.get(FlotillaPhase),
    awaiting: awaiting === 'plan' || awaiting === 'push' || awaiting === 'answer' ? awaiting : undefined,
    outcome: attrs.get(FlotillaOutcome),
    repo: attrs.get(FlotillaRepo),
    targetRef: attrs.get(FlotillaTargetRef),
    costUsd: attrs.get(FlotillaCostUsd),
  };
}

/** The `limit` most recent leader runs matching every filter. */
export async function listRuns(client: Client, limit: number, filters: ListFilters): Promise<RunRow[]> {
  const rows: RunRow[] = [];
  try {
    for await (const wf of client.workflow.list({ query: runsQuery(filters) })) {
      rows.push(rowOf(wf));
      if (rows.length >= limit) break;
    }
  } catch (err) {
    // A query naming an attribute the namespace lacks is refused as an invalid argument.
    if (grpcCode(err) === GRPC_INVALID_ARGUMENT) {
      const problem = checkMessage(
        client.options.namespace,
        await checkSearchAttributes(client.connection.operatorService, client.options.namespace),
      );
      if (problem) throw new SearchAttributesMissing(problem);
    }
    throw err;
  }
  // Older runs, without attributes: their status query, if a worker answers.
  await Promise.all(
    rows
      .filter((row) => row.phase === undefined)
      .map(async (row) => {
        try {
          const { status } = await queryStatus(client, row.id, ROW_QUERY_DEADLINE_MS);
          const awaiting = awaitingOf(status);
          Object.assign(row, {
            phase: status.phase,
            awaiting: awaiting === 'none' ? undefined : awaiting,
            outcome: status.outcome,
            repo: status.repo,
            targetRef: status.targetRef,
            costUsd: status.totals.costUsd,
          });
        } catch (err) {
          row.note =
            err instanceof NoWorkerError
              ? `no worker answers on task queue "${row.taskQueue}"`
              : (err as Error).message;
        }
      }),
  );
  return rows;
}
