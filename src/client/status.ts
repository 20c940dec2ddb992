/**
 * A run's status, and whether any worker serves it. Queries are answered by a worker, so each
 * says within seconds when none does, and which command would start one.
 */
import type { Client } from '@temporalio/client';
import { DEFAULT_TASK_QUEUE } from '../config/settings';
import type { RunStatus, StatusPageInput } from '../contracts/messages';
import { STATUS_QUERY } from '../contracts/query-names';
import { continuedByQuery } from '../contracts/visibility-query';
import { shellQuote } from './shell';

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
const GRPC_INVALID_ARGUMENT = 3;
/** How many continuing runs a status names: more would only be one run continued again and again. */
const CONTINUED_BY_SHOWN = 10;

/** The gRPC status code of a failed call; the SDK wraps it in a ServiceError as its cause. */
export function grpcCode(err: unknown): unknown {
  const e = err as { code?: unknown; cause?: { code?: unknown } } | undefined;
  return e?.code ?? e?.cause?.code;
}

/** The command that starts a worker on a task queue. */
export function workerStartCommand(taskQueue: string): string {
  return taskQueue === DEFAULT_TASK_QUEUE
    ? 'flotilla worker'
    : `FLOTILLA_TASK_QUEUE=${shellQuote(taskQueue)} flotilla worker`;
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

/** No run has the id (an HTTP reader's answer; the gRPC reader throws the SDK's WorkflowNotFoundError). */
export class RunNotFoundError extends Error {
  name = 'RunNotFoundError';
  constructor(
    readonly workflowId: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * What a status needs from Temporal, by either of its APIs: gRPC through the SDK's client, or the
 * server's HTTP API, which `flotilla status` reaches without loading the SDK (most of the CLI's
 * start-up time). Both answer alike: test/support/run-reader-contract.ts runs against each.
 * Failures carry the gRPC status code (grpcCode) either way.
 */
export interface RunReader {
  /** The run's task queue; rejects when no run has the id. */
  taskQueueOf(runId: string): Promise<string>;
  /** True when some worker polls the task queue, i.e. can run workflows and answer queries. */
  hasWorker(taskQueue: string): Promise<boolean>;
  /**
   * The run's status query, answered within `deadlineMs` or failed with DEADLINE_EXCEEDED; `abandon`
   * cancels it. `page`: which sub-task lines (a large run's status carries one page of them).
   */
  status(runId: string, deadlineMs: number, abandon?: AbortSignal, page?: StatusPageInput): Promise<RunStatus>;
  /** Up to ten runs that continue this one, newest first; none when the namespace lacks the attribute. */
  continuedBy(runId: string): Promise<string[]>;
}

/** A reader over the SDK's gRPC client. */
export function grpcReader(client: Client): RunReader {
  return {
    taskQueueOf: async (runId) => (await client.workflow.getHandle(runId).describe()).taskQueue,
    hasWorker: (taskQueue) => hasWorker(client, taskQueue),
    status: (runId, deadlineMs, abandon = new AbortController().signal, page) =>
      client.connection.withAbortSignal(abandon, () =>
        client.connection.withDeadline(Date.now() + deadlineMs, () =>
          page
            ? client.workflow.getHandle(runId).query<RunStatus, [StatusPageInput]>(STATUS_QUERY, page)
            : client.workflow.getHandle(runId).query<RunStatus>(STATUS_QUERY),
        ),
      ),
    continuedBy: async (runId) => {
      const ids: string[] = [];
      try {
        for await (const wf of client.workflow.list({ query: continuedByQuery(runId) })) {
          ids.push(wf.workflowId);
          if (ids.length >= CONTINUED_BY_SHOWN) break;
        }
      } catch (err) {
        if (grpcCode(err) === GRPC_INVALID_ARGUMENT) return [];
        throw err;
      }
      return ids;
    },
  };
}

/** A run's status through the SDK's client (see readStatus). */
export function queryStatus(
  client: Client,
  runId: string,
  deadlineMs = QUERY_DEADLINE_MS,
): Promise<{ status: RunStatus; taskQueue: string }> {
  return readStatus(grpcReader(client), runId, deadlineMs);
}

/**
 * A run's status. Queries are answered by a worker, so the run's task queue is checked first:
 * without a poller, a query would wait for a long time and then fail with no word of why.
 */
export async function readStatus(
  reader: RunReader,
  runId: string,
  deadlineMs = QUERY_DEADLINE_MS,
  page?: StatusPageInput,
): Promise<{ status: RunStatus; taskQueue: string }> {
  // Asked at once, not after the checks: most of a status command's time is these round trips.
  // When no worker serves the run, the query would wait for its deadline, so it is abandoned.
  const abandon = new AbortController();
  const answer = reader.status(runId, deadlineMs, abandon.signal, page);
  answer.catch(() => undefined); // awaited below, unless a check fails first
  let taskQueue: string;
  try {
    taskQueue = await reader.taskQueueOf(runId);
    if (!(await reader.hasWorker(taskQueue))) throw new NoWorkerError(noWorkerMessage(taskQueue));
  } catch (err) {
    abandon.abort();
    throw err;
  }
  try {
    return { status: await answer, taskQueue };
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
