/**
 * A run's status, and whether any worker serves it. Queries are answered by a worker, so each
 * says within seconds when none does, and which command would start one.
 */
import type { Client } from '@temporalio/client';
import { DEFAULT_TASK_QUEUE } from '../config/settings';
import type { RunStatus } from '../contracts/messages';
import { STATUS_QUERY } from '../contracts/query-names';
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
    const status = await client.connection.withDeadline(Date.now() + deadlineMs, () =>
      handle.query<RunStatus>(STATUS_QUERY),
    );
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
