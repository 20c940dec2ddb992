/**
 * Rollover (issue 19, item 4: a bounded leader history): a run past limits.historyEvents
 * continues as new where no sub-task runs, and the chain of runs lands what one run would have:
 * one push, every sub-task once, retries and dependencies kept across the rollover, every report.
 * A client cannot hand a run a rollover of its own.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { addSubTask, awaitRun, cancelSubTask } from '../../src/client/index';
import { approveSignal, statusQuery } from '../../src/contracts/messages';
import type { RunRow } from '../../src/client/list';
import { TestEnv } from '../support/env';
import { flotilla, holdCommand, letGo, processesRunning, waitFor } from '../support/processes';
import { countingRemote } from '../support/remotes';
import { replay } from '../support/replay';
import { shellRequest, subTask, withGates, writeAgent } from '../support/requests';
import { historiesOf, waitForStatus } from '../support/runs';

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

/** Fails its first attempt; its retry (told "This is attempt 2") writes its file. */
const failsOnce = (id: string) =>
  `if printf '%s' "$FLOTILLA_PROMPT" | grep -q 'This is attempt 2'; then ${writeAgent(`${id}/greeting.txt`, id)}; else echo 'not yet' >&2; exit 3; fi`;

describe('rollover', () => {
  it('a run past limits.historyEvents continues as new, and the chain pushes once with every sub-task', async () => {
    const remote = await countingRemote({ 'README.md': 'x\n' });
    const base = (await remote.head())!;
    const plain = ['a', 'b', 'c', 'd', 'e', 'f', 'g'].map((id) => subTask(id, writeAgent(`${id}/greeting.txt`, id)));
    // Starts from the head once a is integrated (maybe in an earlier run of the chain): a's file is there.
    const after = subTask('after', `test -f a/greeting.txt && ${writeAgent('after/greeting.txt', 'after a')}`, {
      dependsOn: ['a'],
    });
    const request = shellRequest(remote.url, [...plain, subTask('flaky', failsOnce('flaky')), after], {
      limits: { maxParallel: 2, historyEvents: 50, retries: 1 },
    });
    const handle = await env.start(request);
    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(remote.pushes()).toBe(1);
    for (const id of ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'flaky'])
      expect(await remote.show('main', `${id}/greeting.txt`)).toBe(`${id}\n`);
    expect(await remote.show('main', 'after/greeting.txt')).toBe('after a\n');
    // Every sub-task merged once, whichever run of the chain merged it.
    const merges = (await remote.log('main', base)).filter((s) => s.startsWith('Integrate'));
    expect(merges.map((m) => m.split(':')[0]).sort()).toEqual(
      ['a', 'after', 'b', 'c', 'd', 'e', 'f', 'flaky', 'g'].map((id) => `Integrate ${id}`),
    );
    // The chain: the first run continued as new, the last one says how many times the run rolled over.
    const first = await env.client.workflow.getHandle(handle.workflowId, handle.firstExecutionRunId).describe();
    expect(first.status.name).toBe('CONTINUED_AS_NEW');
    // What flotilla continue finds the run's refs by (their key is the first history's).
    const last = await handle.describe();
    expect(last.runId).not.toBe(handle.firstExecutionRunId);
    expect(last.raw.workflowExecutionInfo?.firstRunId).toBe(handle.firstExecutionRunId);
    const status = await handle.query(statusQuery);
    expect(status.rollovers).toBeGreaterThanOrEqual(2);
    // The run's start, and so its deadline, is the first history's, not the last one's.
    expect(status.startedAt).toBeLessThan(last.startTime.getTime());
    // Every report, the failed first attempt of flaky included, and a line per attempt.
    const reports = end.result!.workers.map((w) => `${w.workerId} ${w.status}`).sort();
    expect(reports).toEqual([
      'a done',
      'after done',
      'b done',
      'c done',
      'd done',
      'e done',
      'f done',
      'flaky failed',
      'flaky.attempt2 done',
      'g done',
    ]);
    // Every run of the chain replays against the current workflow code, those that continued as new too.
    const chain = await historiesOf(env.client, handle.workflowId);
    expect(chain).toHaveLength(status.rollovers! + 1);
    const { replayed, errors } = await replay(chain, 'rollover-chain');
    expect(errors).toEqual([]);
    expect(replayed).toBe(chain.length);
    // flotilla list shows the run once, as it ended, not once per history.
    const rows = await waitFor('flotilla list to show the run as completed', async () => {
      const r = await flotilla(env.taskQueue, ['list', '--json', '--limit', '100']);
      const mine = (JSON.parse(r.out) as RunRow[]).filter((row) => row.id === handle.workflowId);
      return mine.some((row) => row.execution === 'COMPLETED') ? mine : undefined;
    });
    expect(rows).toHaveLength(1);
    const shown = await flotilla(env.taskQueue, ['status', handle.workflowId]);
    expect(shown.out).toContain(`history:   rolled over ${status.rollovers} time(s) into a fresh history`);
    expect(
      status.workers
        .filter((w) => w.integrated)
        .map((w) => w.id)
        .sort(),
    ).toEqual(['a', 'after', 'b', 'c', 'd', 'e', 'f', 'flaky.attempt2', 'g']);
  });

  it('amendments made before the rollover hold after it, and its plan gate is not asked again', async () => {
    const remote = await countingRemote({ 'README.md': 'x\n' });
    const hold = holdCommand();
    const held = subTask('held', `${hold}; ${writeAgent('held/greeting.txt', 'held')}`);
    const quick = ['a', 'b', 'c', 'd'].map((id) => subTask(id, writeAgent(`${id}/greeting.txt`, id)));
    const request = shellRequest(remote.url, [held, ...quick], {
      limits: { maxParallel: 1, historyEvents: 50 },
      ...withGates('plan'),
    });
    const handle = await env.start(request);
    // Approved once; a later history that asked again would wait here for good, and the run never end.
    await waitForStatus(handle, 'the plan gate', (s) => s.phase === 'awaiting-plan-approval');
    await handle.signal(approveSignal, { gate: 'plan', by: 'ana' });
    await waitFor('held to hold', async () => ((await processesRunning(hold)).length ? true : undefined), 60_000);
    const extra = subTask('extra', writeAgent('extra/greeting.txt', 'extra'));
    expect(await addSubTask(env.client, handle.workflowId, { subTask: extra, by: 'ana' })).toContain(
      'added sub-task extra',
    );
    await cancelSubTask(env.client, handle.workflowId, { subTaskId: 'd', by: 'ana', reason: 'not needed' });
    await letGo(hold);
    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(remote.pushes()).toBe(1);
    for (const id of ['held', 'a', 'b', 'c', 'extra'])
      expect(await remote.show('main', `${id}/greeting.txt`)).toBe(`${id}\n`);
    expect(await remote.show('main', 'd/greeting.txt')).toBeNull();
    const status = await handle.query(statusQuery);
    expect(status.rollovers).toBeGreaterThanOrEqual(1);
    expect(status.workers.find((w) => w.id === 'd')?.state).toBe('cancelled');
    expect(end.result?.amendments?.map((a) => [a.kind, a.subTaskId, a.by])).toEqual([
      ['add', 'extra', 'ana'],
      ['cancel', 'd', 'ana'],
    ]);
  });

  it('a client that starts a run with a rollover of its own is refused, naming the field', async () => {
    const remote = await countingRemote({ 'README.md': 'x\n' });
    const request = shellRequest(remote.url, [subTask('a', writeAgent('a/greeting.txt', 'a'))]);
    const forged = { ...request, rollover: { from: 'not-a-run', count: 1, entries: [], headSha: 'f'.repeat(40) } };
    const handle = await env.start(forged);
    const end = await awaitRun(handle);
    expect(end.failureMessage).toContain('rollover: set only by a run that continues as new, never by a request');
    expect(remote.pushes()).toBe(0);
  });
});

/** The histories of every run of `workflowId`'s chain, last first: each run's start names the run it continues. */
