/**
 * `flotilla watch`: a run shown live until it ends, redrawn in place (changed lines only) on a
 * terminal, one line per change otherwise.
 */
import type { Client } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import { type RunEnd, awaitRun } from '../client/result';
import { NoWorkerError, queryStatus } from '../client/status';
import type { RunStatus } from '../contracts/messages';
import { heartbeatLine } from './format/heartbeat';
import { formatStatus, statusFacts } from './format/status';
import { ChangeLog, InPlaceView, type Output } from './terminal';

/** How often the view asks the run for its status. */
const POLL_MS = 1000;

/** Shows a run live until it ends; returns how it ended. */
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
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
  return awaitRun(handle);
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
      if (payload) lines.push(heartbeatLine(w.id, decoded(payload)));
    }
  }
  return lines.length ? ['live:', ...lines] : [];
}

/** A heartbeat's details, or undefined for one that does not decode: it is shown anyway. */
function decoded(payload: Parameters<typeof defaultPayloadConverter.fromPayload>[0]): unknown {
  try {
    return defaultPayloadConverter.fromPayload(payload);
  } catch {
    return undefined;
  }
}
