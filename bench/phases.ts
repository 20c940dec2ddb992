/** Phases of a finished run, read from its histories (bench/run.ts and bench/compare.ts). */
import type { Client, WorkflowHandle } from '@temporalio/client';

/** Seconds between two events of a history, by predicate; undefined when either is missing. */
type HistoryEvent = { eventTime?: { seconds?: unknown; nanos?: number | null } | null; [k: string]: unknown };
const at = (e: HistoryEvent) => Number(e.eventTime?.seconds ?? 0) + (e.eventTime?.nanos ?? 0) / 1e9;

/** Phase times of a finished run from its histories: seeding (first worker) and integration. */
export async function phases(client: Client, handle: WorkflowHandle): Promise<{ seed?: number; integrate?: number }> {
  const events = ((await handle.fetchHistory()).events ?? []) as unknown as HistoryEvent[];
  const childDone = events.filter((e) => e.childWorkflowExecutionCompletedEventAttributes);
  const push = events.find(
    (e) =>
      (e.activityTaskScheduledEventAttributes as { activityType?: { name?: string } })?.activityType?.name ===
      'pushResult',
  );
  const integrate = childDone.length && push ? at(push) - at(childDone[childDone.length - 1]) : undefined;
  const first = childDone[0]?.childWorkflowExecutionCompletedEventAttributes as
    { workflowExecution?: { workflowId?: string } } | undefined;
  let seed: number | undefined;
  if (first?.workflowExecution?.workflowId) {
    const child = ((await client.workflow.getHandle(first.workflowExecution.workflowId).fetchHistory()).events ??
      []) as unknown as HistoryEvent[];
    const idOf = (e: HistoryEvent) =>
      (e.activityTaskScheduledEventAttributes as { activityType?: { name?: string } } | undefined)?.activityType?.name;
    const i = child.findIndex((e) => idOf(e) === 'seedWorkspace');
    const done = child.slice(i).find((e) => e.activityTaskCompletedEventAttributes);
    if (i >= 0 && done) seed = at(done) - at(child[i]);
  }
  return { seed, integrate };
}
