/** Phases of a finished run, read from its histories (bench/run.ts and bench/compare.ts). */
import type { Client, WorkflowHandle } from '@temporalio/client';

/** Seconds between two events of a history, by predicate; undefined when either is missing. */
type HistoryEvent = { eventTime?: { seconds?: unknown; nanos?: number | null } | null; [k: string]: unknown };
const at = (e: HistoryEvent) => Number(e.eventTime?.seconds ?? 0) + (e.eventTime?.nanos ?? 0) / 1e9;

type Named = { activityType?: { name?: string }; workflowType?: { name?: string } } | undefined;
const activityOf = (e: HistoryEvent) => (e.activityTaskScheduledEventAttributes as Named)?.activityType?.name;

/**
 * Phase times of a finished run from its histories: seeding and collecting the work of the first
 * worker to end (scheduled to completed), and integration (the
 * last sub-task workflow's end to the push being scheduled; other children, such as the keeper
 * of the integration's sandboxes, do not count), and the activities scheduled in that span:
 * each one's offset from its start and how long it took to complete.
 */
export async function phases(
  client: Client,
  handle: WorkflowHandle,
): Promise<{
  seed?: number;
  collect?: number;
  integrate?: number;
  steps: string[];
  before: string[];
  span?: string;
  starts?: { perChild: number; leaderWait: number };
}> {
  const events = ((await handle.fetchHistory()).events ?? []) as unknown as HistoryEvent[];
  const childDone = events.filter(
    (e) => (e.childWorkflowExecutionCompletedEventAttributes as Named)?.workflowType?.name === 'workerWorkflow',
  );
  const push = events.find((e) => activityOf(e) === 'pushResult');
  const last = childDone[childDone.length - 1];
  const integrate = last && push ? at(push) - at(last) : undefined;
  const steps = last && push ? stepsBetween(events, at(last), at(push)) : [];
  // The leader's own activities while the sub-tasks ran, from the run's start.
  const before = last ? stepsBetween(events, at(events[0]), at(last)) : [];
  // Where the rest of the run went: to the last sub-task's end, and from the push to the run's close.
  const span =
    last && push
      ? `to the last sub-task's end ${(at(last) - at(events[0])).toFixed(2)}s, push to close ${(at(events[events.length - 1]) - at(push)).toFixed(2)}s`
      : undefined;
  const first = childDone[0]?.childWorkflowExecutionCompletedEventAttributes as
    { workflowExecution?: { workflowId?: string } } | undefined;
  let [seed, collect]: (number | undefined)[] = [];
  if (first?.workflowExecution?.workflowId) {
    const child = ((await client.workflow.getHandle(first.workflowExecution.workflowId).fetchHistory()).events ??
      []) as unknown as HistoryEvent[];
    seed = activityTime(child, 'seedWorkspace');
    collect = activityTime(child, 'collectWork');
  }
  return { seed, collect, integrate, steps, before, span, starts: childStarts(events) };
}

/**
 * How the sub-tasks' workflows started (issue 19, item 3), for those the leader asked for in one
 * workflow task (the first ones: later ones wait for a slot under limits.maxParallel): seconds
 * from that task's first start to the last of them the server recorded, per sub-task after the
 * first; and the longest a leader's workflow task waited to start (scheduled to started) in that
 * span, which is how long the leader was held behind its children.
 */
function childStarts(events: HistoryEvent[]): { perChild: number; leaderWait: number } | undefined {
  const first = events.findIndex(
    (e) => (e.startChildWorkflowExecutionInitiatedEventAttributes as Named)?.workflowType?.name === 'workerWorkflow',
  );
  // A workflow task's commands are recorded together, before the next task starts.
  const nextTask = events.findIndex((e, i) => i > first && e.workflowTaskStartedEventAttributes);
  const burst = new Set(
    events
      .slice(first, nextTask < 0 ? undefined : nextTask)
      .filter((e) => e.startChildWorkflowExecutionInitiatedEventAttributes)
      .map((e) => String(e.eventId)),
  );
  const started = events.filter((e) =>
    burst.has(
      String((e.childWorkflowExecutionStartedEventAttributes as { initiatedEventId?: unknown })?.initiatedEventId),
    ),
  );
  if (first < 0 || burst.size < 2 || started.length < burst.size) return undefined;
  const [from, to] = [at(events[first]), Math.max(...started.map(at))];
  const scheduledAt = new Map<string, number>();
  let leaderWait = 0;
  for (const e of events) {
    if (e.workflowTaskScheduledEventAttributes) scheduledAt.set(String(e.eventId), at(e));
    const begun = e.workflowTaskStartedEventAttributes as { scheduledEventId?: unknown } | undefined;
    const scheduled = begun && scheduledAt.get(String(begun.scheduledEventId));
    if (scheduled !== undefined && scheduled >= from && scheduled <= to)
      leaderWait = Math.max(leaderWait, at(e) - scheduled);
  }
  return { perChild: (to - from) / (burst.size - 1), leaderWait };
}

/** Seconds from the first `name` activity being scheduled to its completion; undefined without one. */
function activityTime(events: HistoryEvent[], name: string): number | undefined {
  const i = events.findIndex((e) => activityOf(e) === name);
  const done = i >= 0 ? events.slice(i).find((e) => e.activityTaskCompletedEventAttributes) : undefined;
  return done ? at(done) - at(events[i]) : undefined;
}

/** "name +offset duration" for each activity scheduled between `from` and `to` (seconds). */
function stepsBetween(events: HistoryEvent[], from: number, to: number): string[] {
  const eventId = (e: HistoryEvent) => String(e.eventId);
  const completedAt = new Map<string, number>();
  for (const e of events) {
    const done = e.activityTaskCompletedEventAttributes as { scheduledEventId?: unknown } | undefined;
    if (done) completedAt.set(String(done.scheduledEventId), at(e));
  }
  return events
    .filter((e) => activityOf(e) && at(e) >= from && at(e) <= to)
    .map((e) => {
      const done = completedAt.get(eventId(e));
      const took = done === undefined ? '-' : `${(done - at(e)).toFixed(2)}s`;
      return `${activityOf(e)} +${(at(e) - from).toFixed(2)}s ${took}`;
    });
}
