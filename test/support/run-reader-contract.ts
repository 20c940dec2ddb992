/**
 * The contract both RunReaders pass (src/client/status.ts: over gRPC, and over the server's HTTP
 * API). `flotilla status` takes whichever it can reach, so the two must answer alike: the same
 * status of a live run, the same refusal of an unknown id, the same "no worker" for a run nobody
 * serves, and the same runs that continue a run.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { NoWorkerError, type RunReader, readStatus } from '../../src/client/status';
import { FlotillaContinues } from '../../src/contracts/search-attributes';
import type { TestEnv } from './env';
import { waitFor } from './processes';
import { makeRemote } from './remotes';
import { shellRequest, subTask } from './requests';

/** What the contract runs against: a live run served by env's worker, and one no worker serves. */
export interface ReaderFixture {
  env: TestEnv;
  /** A running run whose agent waits (until the file ends). */
  live: string;
  liveObjective: string;
  /** A leader run on a task queue no worker polls, and the run it says it continues. */
  unserved: string;
  unservedQueue: string;
  continued: string;
}

/** Starts what the contract reads; the runs end with the test file's environment. */
export async function readerFixture(env: TestEnv): Promise<ReaderFixture> {
  const remote = await makeRemote({ 'README.md': 'x\n' });
  const request = shellRequest(remote.url, [subTask('waits', 'sleep 600')]);
  const live = `reader-live-${randomUUID()}`;
  await env.start(request, live);
  const unservedQueue = `nobody-${randomUUID()}`;
  const unserved = `reader-unserved-${randomUUID()}`;
  const continued = `reader-continued-${randomUUID()}`;
  await env.client.workflow.start('leaderWorkflow', {
    taskQueue: unservedQueue,
    workflowId: unserved,
    args: [request],
    typedSearchAttributes: [{ key: FlotillaContinues, value: continued }],
  });
  return { env, live, liveObjective: request.objective, unserved, unservedQueue, continued };
}

export function runReaderContract(name: string, fixture: () => ReaderFixture, reader: () => RunReader): void {
  describe(`RunReader contract: ${name}`, () => {
    it("reads a live run's status and task queue, and that a worker serves it", async () => {
      const f = fixture();
      const { status, taskQueue } = await waitFor('the run to be running', async () => {
        const r = await readStatus(reader(), f.live);
        return r.status.phase === 'running' ? r : undefined;
      });
      expect(taskQueue).toBe(f.env.taskQueue);
      expect(status.objective).toBe(f.liveObjective);
      expect(status.workers.map((w) => w.id)).toEqual(['waits']);
      expect(await reader().hasWorker(f.env.taskQueue)).toBe(true);
    });

    it('asks for a page of sub-task lines, and is answered with that page', async () => {
      const { status } = await readStatus(reader(), fixture().live, undefined, { state: 'running', pageSize: 1 });
      expect(status.workersPage).toEqual({ state: 'running', page: 1, pageSize: 1, pages: 1, matching: 1, total: 1 });
      expect(status.workers.map((w) => w.id)).toEqual(['waits']);
    });

    it('refuses an id no run has, naming it', async () => {
      const err = await reader()
        .taskQueueOf('no-such-run-at-all')
        .catch((e: unknown) => e);
      expect(err).toMatchObject({ workflowId: 'no-such-run-at-all' });
    });

    it('says no worker serves a run on a queue nobody polls, naming the command that starts one', async () => {
      const f = fixture();
      expect(await reader().taskQueueOf(f.unserved)).toBe(f.unservedQueue);
      expect(await reader().hasWorker(f.unservedQueue)).toBe(false);
      const err = await readStatus(reader(), f.unserved).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(NoWorkerError);
      expect((err as Error).message).toContain(`FLOTILLA_TASK_QUEUE=${f.unservedQueue} flotilla worker`);
    });

    it('lists the runs that continue a run, and none for a run nobody continues', async () => {
      const f = fixture();
      expect(await waitFor('visibility', async () => (await reader().continuedBy(f.continued))[0])).toBe(f.unserved);
      expect(await reader().continuedBy(f.live)).toEqual([]);
    });
  });
}
