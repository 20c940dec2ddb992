/**
 * Bounded results: at the limit of 100 sub-tasks, with agents that print a lot (multi-byte and
 * control characters included), the RunResult, the status and every payload of the leader's
 * history stay under 64 KiB; each worker's full output stays in its artifact. Beyond 100, the
 * result says what it left out and the rest is read back; a continue adopts the work a page at a time.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import type { WorkflowFailedError } from '@temporalio/client';
import { type ApplicationFailure, defaultPayloadConverter } from '@temporalio/common';
import { approve, awaitRun, continueRun, reject } from '../../src/client/index';
import { reportsQuery, statusQuery } from '../../src/contracts/messages';
import type { RunResult } from '../../src/contracts/reports';
import { TestEnv } from '../support/env';
import { makeRemote } from '../support/remotes';
import { shellRequest, subTask, withGates } from '../support/requests';
import { payloadSizes, subTaskChildren, waitForStatus } from '../support/runs';

const LIMIT = 64 * 1024;
const N = 100;

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

/** A chatty agent: ~20 KB of output, then its change, then a last line that names it. */
function chatty(id: string, exit = 0): string {
  return (
    `for i in $(seq 1 300); do printf 'línea %d — ünïcödé\\t\\x01 output of a chatty agent ${id}\\n' "$i"; done; ` +
    `mkdir -p ${id} && echo ok > ${id}/ok.txt && git add -A && git commit -qm ${id}; echo "last line of ${id}"; exit ${exit}`
  );
}

/** N chatty sub-tasks, 20 at a time. */
function request(url: string, exit = 0) {
  const tasks = Array.from({ length: N }, (_, i) => subTask(`w${i}`, chatty(`w${i}`, exit)));
  return shellRequest(url, tasks, { testCmd: 'ls', limits: { maxParallel: 20 } });
}

const historyPayloadSizes = async (workflowId: string) =>
  payloadSizes(await env.client.workflow.getHandle(workflowId).fetchHistory());

describe('result size at 100 sub-tasks', () => {
  it('100 chatty workers that push: the result, the status and every history payload stay under 64 KiB', async () => {
    const remote = await makeRemote({ 'README.md': '# many\n' });
    const handle = await env.start(request(remote.url));
    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect((await remote.files()).filter((f) => f.endsWith('/ok.txt'))).toHaveLength(N);

    const result = end.result!;
    const bytes = Buffer.byteLength(JSON.stringify(result));
    expect(bytes, `RunResult of ${N} workers is ${bytes} bytes`).toBeLessThan(LIMIT);
    // The same measure Temporal applies: the payload as encoded.
    expect(defaultPayloadConverter.toPayload(result)!.data!.length).toBeLessThan(LIMIT);
    const sizes = await historyPayloadSizes(end.workflowId);
    expect(sizes.length).toBeGreaterThan(N);
    expect(Math.max(...sizes)).toBeLessThan(LIMIT);
    const status = await handle.query(statusQuery);
    expect(status.workers.filter((w) => w.integrated)).toHaveLength(N);
    expect(defaultPayloadConverter.toPayload(status)!.data!.length).toBeLessThan(LIMIT);

    // Short inline, whole in the artifact: the tail still ends with what the agent said last.
    for (const w of result.workers) {
      expect(w.tail).toContain(`last line of ${w.workerId}`);
      const log = env.artifact(w.logRef!);
      expect(log).toContain(`300 — ünïcödé`);
      expect(log).toContain(`last line of ${w.workerId}`);
    }
  }, 900_000);

  it('100 failing chatty workers: the failure, its result and the status stay under 64 KiB and say which failed', async () => {
    const remote = await makeRemote({ 'README.md': '# many\n' });
    const base = await remote.head();
    const handle = await env.start(request(remote.url, 3));
    const end = await awaitRun(handle);
    // onFailure: fail: the first sub-task that fails for good (after its retry) ends the run, the rest is cancelled.
    expect(end.failureType).toBe('failed');
    expect(end.failureMessage).toMatch(/^\d+ of 100 workers failed: w\d+: the agent exited with code 3/);
    expect(
      end.result?.workers.every(
        (w) => w.status === 'failed' && w.tail?.includes(`last line of ${w.workerId.split('.')[0]}`),
      ),
    ).toBe(true);
    expect(Buffer.byteLength(JSON.stringify(end.result))).toBeLessThan(LIMIT);
    expect(Math.max(...(await historyPayloadSizes(end.workflowId)))).toBeLessThan(LIMIT);
    // With the retries' lines (w<n>.attempt2) there are more than 100: the status shows the first page
    // and the counts, and a page of one state on request.
    const status = await handle.query(statusQuery);
    expect(status.workersByState?.done).toBeUndefined();
    expect(status.workers.filter((w) => w.state === 'done')).toEqual([]);
    const cancelled = await handle.query(statusQuery, { state: 'cancelled' });
    // What was running when the run stopped is cancelled, unless it ended (failed) on its own meanwhile:
    // the message names the same attempts as cancelled as the status lines do.
    const named = /; cancelled: ([\w., ]+)$/.exec(end.failureMessage!)?.[1].split(', ') ?? [];
    expect(cancelled.workers.map((w) => w.id).sort()).toEqual(named.sort());
    expect(defaultPayloadConverter.toPayload(status)!.data!.length).toBeLessThan(LIMIT);
    expect(await remote.head()).toBe(base);
  }, 900_000);

  it('105 workers: the result carries what fits and says what it left out; awaitRun reads every report back; a continue adopts them a page at a time', async () => {
    const remote = await makeRemote({ 'README.md': '# many\n' });
    const base = await remote.head();
    const n = 105;
    const tasks = Array.from({ length: n }, (_, i) =>
      subTask(`w${i}`, `mkdir -p w${i} && echo ok > w${i}/ok.txt && git add -A && git commit -qm w${i}`),
    );
    const handle = await env.start(
      shellRequest(remote.url, tasks, { limits: { maxParallel: 35 }, ...withGates('push') }),
    );
    await waitForStatus(handle, 'the push gate', (s) => s.gate?.gate === 'push', 600_000);
    await reject(env.client, handle.workflowId, { gate: 'push', by: 'ana', reason: 'not today' });
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('rejected');
    expect(await remote.head()).toBe(base);
    // As the run returned it: at most a hundred reports, one payload, and how many more there are.
    const raw = await handle.result().then(
      () => undefined,
      (err: WorkflowFailedError) => (err.cause as ApplicationFailure).details?.[0] as RunResult,
    );
    expect(raw!.workers.length).toBeLessThanOrEqual(100);
    expect(raw!.workersOmitted).toEqual({ count: n - raw!.workers.length, total: n, byStatus: { done: n } });
    expect(defaultPayloadConverter.toPayload(raw)!.data!.length).toBeLessThan(LIMIT);
    // Read back from the run itself, page by page: every report, once each.
    expect(end.result!.workersOmitted).toBeUndefined();
    expect(end.result!.workers.map((w) => w.workerId).sort()).toEqual(tasks.map((t) => t.id).sort());
    const second = await handle.query(reportsQuery, { page: 2 });
    expect(second).toMatchObject({ page: 2, pages: 2, total: n });
    expect(second.reports.map((w) => w.workerId)).toEqual(end.result!.workers.slice(100).map((w) => w.workerId));

    // Continued, every sub-task's work is adopted (two activities: a hundred, then five) and no agent runs again.
    const next = await continueRun(env.client, handle.workflowId, { taskQueue: env.taskQueue });
    const gate = await waitForStatus(
      next,
      'the continued run at its push gate',
      (s) => s.gate?.gate === 'push',
      300_000,
    );
    await approve(env.client, next.workflowId, { gate: 'push', sha: gate.gate!.sha, by: 'ana' });
    const after = await awaitRun(next);
    expect(after.result?.outcome, after.failureMessage).toBe('pushed');
    expect((await remote.files()).filter((f) => f.endsWith('/ok.txt'))).toHaveLength(n);
    expect(after.result!.workers.map((w) => w.workerId).sort()).toEqual(tasks.map((t) => t.id).sort());
    expect(after.result!.workers.every((w) => w.runs === 0)).toBe(true);
    expect(await subTaskChildren(env.client, next.workflowId)).toEqual([]);
    const history = await next.fetchHistory();
    const adoptions = (history.events ?? []).filter(
      (e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'adoptWork',
    );
    expect(adoptions).toHaveLength(2);
    expect(Math.max(...payloadSizes(history))).toBeLessThan(LIMIT);
  }, 900_000);
});
