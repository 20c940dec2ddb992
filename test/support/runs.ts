/** Watching a run from outside: its status until a condition holds, and what its history carries. */
import type { Client, WorkflowHandle } from '@temporalio/client';
import { type RunStatus, statusQuery } from '../../src/contracts/messages';
import { waitFor } from './processes';

type History = { events?: unknown[] | null };

/** The run's status once `ok` holds for it (`what` names the wait in a timeout). */
export function waitForStatus(
  handle: Pick<WorkflowHandle, 'query'>,
  what: string,
  ok: (s: RunStatus) => boolean,
  ms?: number,
): Promise<RunStatus> {
  let last: RunStatus | undefined;
  return waitFor(
    what,
    async () => {
      last = await handle.query(statusQuery);
      return ok(last) ? last : undefined;
    },
    ms,
  ).catch((err: Error) => {
    // The last status says where the run stood, which a bare timeout does not.
    const where = last && { phase: last.phase, message: last.message, workers: last.workers };
    throw new Error(`${err.message}; the run's last status: ${JSON.stringify(where).slice(0, 4000)}`);
  });
}

/** Sizes of every payload in a history, found wherever its events keep them. */
export function payloadSizes(history: History): number[] {
  const sizes: number[] = [];
  const visit = (v: unknown): void => {
    if (!v || typeof v !== 'object' || v instanceof Uint8Array) return;
    const p = v as { data?: unknown; metadata?: unknown };
    if (p.data instanceof Uint8Array && p.metadata && typeof p.metadata === 'object') {
      sizes.push(p.data.length);
      return;
    }
    for (const value of Object.values(v)) visit(value);
  };
  for (const e of history.events ?? []) visit(e);
  return sizes;
}

/** Every history of a run, the latest first back to its first (a run that rolled over has several). */
export async function historiesOf(client: Client, workflowId: string) {
  const chain: { workflowId: string; history: Awaited<ReturnType<WorkflowHandle['fetchHistory']>> }[] = [];
  for (let runId: string | undefined; ;) {
    const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
    chain.push({ workflowId, history });
    const started = history.events?.[0]?.workflowExecutionStartedEventAttributes;
    runId = started?.continuedExecutionRunId || undefined;
    if (!runId) return chain;
  }
}

/** Which kinds of history event carry `needle` in a payload. */
export function historyHits(history: History, needle: string): string[] {
  const text = (v: unknown): string =>
    v instanceof Uint8Array
      ? Buffer.from(v).toString('utf8')
      : v && typeof v === 'object'
        ? Object.values(v).map(text).join('\n')
        : '';
  return (history.events ?? []).flatMap((event) =>
    Object.entries(event as Record<string, unknown>)
      .filter(([key, attrs]) => key.endsWith('EventAttributes') && text(attrs).includes(needle))
      .map(([key]) => key),
  );
}

/** The events of a run's history a deploy or a hostile message could have caused. */
export async function historyFacts(client: Client, workflowId: string) {
  const events = (await client.workflow.getHandle(workflowId).fetchHistory()).events ?? [];
  return {
    workflowTaskFailures: events.filter((e) => e.workflowTaskFailedEventAttributes).length,
    updatesAccepted: events.filter((e) => e.workflowExecutionUpdateAcceptedEventAttributes).length,
    updatesRejected: events.filter((e) => e.workflowExecutionUpdateRejectedEventAttributes).length,
  };
}

/** The sub-task workflows a run started, by id (its integration's sandbox keepers left out). */
export async function subTaskChildren(client: Client, workflowId: string): Promise<string[]> {
  const events = (await client.workflow.getHandle(workflowId).fetchHistory()).events ?? [];
  return events.flatMap((e) => {
    const started = e.childWorkflowExecutionStartedEventAttributes;
    return started?.workflowType?.name === 'workerWorkflow' ? (started.workflowExecution?.workflowId ?? []) : [];
  });
}
