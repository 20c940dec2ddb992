/**
 * Limits per sub-task and per run (issue 18): a sub-task's own limits beat the request's, a run
 * past its deadline ends with the reason and nothing pushed, and auto-resume gives a sub-task
 * suspended on its budget slice another slice until the run's budget is spent.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { awaitRun } from '../../src/client/index';
import { type RunStatus, approveSignal, statusQuery } from '../../src/contracts/messages';
import { deadlineReason, reviewEndedReason } from '../../src/workflows/leader/deadline';
import { TestEnv } from '../support/env';
import { flotilla, processesMatching, waitFor } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { describeReplay } from '../support/replay';
import { greet, shellRequest, subTask, withGates, writeAgent } from '../support/requests';
import { waitForStatus } from '../support/runs';

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

/** A shell agent's report of what its invocation spent. */
const spends = (costUsd: number, turns: number) => `echo '::flotilla {"costUsd": ${costUsd}, "turns": ${turns}}'`;
/** A command no other test runs, to find its process by. */
const uniqueSleep = (seconds: number) => `sleep ${seconds}.${Math.floor(Math.random() * 1e6)}`;

describe('subTasks[].limits', () => {
  it("a sub-task's own turn limit, budget and timeout beat the request's, which let another finish", async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const busy = (id: string) => `${writeAgent(`${id}/done.txt`, id)} && ${spends(1, 5)}`;
    const tight = { ...subTask('tight', busy('tight')), limits: { maxTurns: 2 } };
    const cheap = { ...subTask('cheap', busy('cheap')), limits: { subTaskBudgetUsd: 0.5 } };
    const slow = { ...subTask('slow', uniqueSleep(30)), limits: { agentTimeoutMinutes: 0.05 } };
    const request = shellRequest(remote.url, [tight, cheap, slow, subTask('loose', busy('loose'))], {
      limits: { maxTurns: 10, subTaskBudgetUsd: 5, agentTimeoutMinutes: 5, retries: 0 },
      onFailure: 'continue',
      ...withGates('plan'),
    });
    const handle = await env.start(request);
    await waitForStatus(handle, 'the plan gate', (s) => s.phase === 'awaiting-plan-approval');
    const gate = (await flotilla(env.taskQueue, ['status', handle.workflowId])).out;
    expect(gate).toMatch(/tight .*\[limits: 2 turns\]/);
    expect(gate).toMatch(/cheap .*\[limits: budget \$0\.50\]/);
    expect(gate).toMatch(/slow .*\[limits: 0\.05 min per invocation\]/);
    expect(gate).not.toMatch(/loose .*limits/);
    await handle.signal(approveSignal, { gate: 'plan', by: 'ana' });

    const line = (s: RunStatus, id: string) => s.workers.find((w) => w.id === id)!;
    const s = await waitForStatus(
      handle,
      'tight and cheap suspended, slow failed, loose integrated',
      (x) =>
        line(x, 'tight').state === 'suspended' &&
        line(x, 'cheap').state === 'suspended' &&
        line(x, 'slow').state === 'failed' &&
        x.workers.find((w) => w.id === 'loose')?.integrated === true,
      90_000,
    );
    expect(line(s, 'tight')).toMatchObject({ turns: 5, reason: 'the agent reached its turn limit (2)' });
    expect(line(s, 'cheap')).toMatchObject({ costUsd: 1, reason: 'the agent used its budget ($1.00 of $0.50)' });
    expect(line(s, 'slow')).toMatchObject({ reason: 'the agent timed out' });
    expect(line(s, 'loose')).toMatchObject({ state: 'done', turns: 5, costUsd: 1 });
    await handle.cancel();
    expect((await awaitRun(handle)).failureType).toBe('cancelled');
  });
});

describe('limits.runTimeoutMinutes', () => {
  it('a run past its deadline ends with the reason: its sub-tasks cancelled, nothing pushed, the integrated work kept', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const base = await remote.head();
    const sleep = uniqueSleep(120);
    const handle = await env.start(
      shellRequest(remote.url, [greet('quick'), subTask('sleeper', sleep)], { limits: { runTimeoutMinutes: 0.3 } }),
    );
    const s = await waitForStatus(handle, 'quick integrated', (x) => x.workers.some((w) => w.integrated), 60_000);
    expect(s.deadlineAt).toBe(s.startedAt + 18_000);
    expect((await flotilla(env.taskQueue, ['status', handle.workflowId])).out).toContain('(limits.runTimeoutMinutes)');
    await waitFor('the sleeping agent', async () => ((await processesMatching(sleep)).length ? true : undefined));

    const end = await awaitRun(handle);
    expect(end.failureType).toBe('run-timeout');
    expect(end.failureMessage).toContain(deadlineReason(0.3));
    expect(end.result).toMatchObject({ outcome: 'run-timeout', head: { integrated: ['quick'] } });
    expect(await remote.head()).toBe(base);
    const sleeper = await env.client.workflow.getHandle(`${handle.workflowId}/sleeper`).describe();
    expect(sleeper.status.name).toBe('CANCELLED');
    expect(await processesMatching(sleep)).toEqual([]);
    expect(env.sandboxesLeft()).toEqual([]);
    const shown = await flotilla(env.taskQueue, ['result', handle.workflowId]);
    expect(shown.code).toBe(1);
    expect(shown.out + shown.err).toContain('ran past limits.runTimeoutMinutes (0.3 min)');
  });
});

describe('limits.runTimeoutMinutes at a gate', () => {
  it('a deadline that passes at the push gate closes it: nothing is pushed, the gate no longer open', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const base = await remote.head();
    const handle = await env.start(
      shellRequest(remote.url, [greet('one')], { limits: { runTimeoutMinutes: 0.15 }, ...withGates('push') }),
    );
    await waitForStatus(handle, 'the push gate', (x) => x.phase === 'awaiting-push-approval', 60_000);
    const end = await awaitRun(handle);
    expect(end.failureType).toBe('run-timeout');
    expect(end.failureMessage).toContain(deadlineReason(0.15));
    expect(await remote.head()).toBe(base);
    const s = await handle.query(statusQuery);
    expect(s).toMatchObject({ phase: 'failed', outcome: 'run-timeout' });
    expect(s.gate).toBeUndefined();
  });
});

describe('limits.runTimeoutMinutes in the review phase', () => {
  it('a deadline that passes while the run waits for review comments ends it with its push, not as nothing pushed', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const handle = await env.start(
      shellRequest(remote.url, [greet('one')], { limits: { runTimeoutMinutes: 0.3 }, review: { rounds: 2 } }),
    );
    const waiting = await waitForStatus(handle, 'the review phase', (x) => x.phase === 'review', 60_000);
    const pushed = await remote.head();
    expect(waiting.review?.headSha).toBe(pushed);
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(end.result?.message).toContain(reviewEndedReason(0.3, pushed!, 'main'));
    expect(await remote.head()).toBe(pushed);
    expect(await handle.query(statusQuery)).toMatchObject({ phase: 'done', outcome: 'pushed' });
  });
});

describe('limits.autoResume', () => {
  it('a sub-task suspended on its slice resumes by itself, without a message, until the run budget is spent', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    // Each invocation counts itself in the workspace and spends more than a slice; the second
    // takes a few seconds, so that the status shows the auto-resume while it runs.
    const count =
      'mkdir -p spender && n=$(( $(cat spender/count 2>/dev/null || echo 0) + 1 )) && echo $n > spender/count';
    const agent = `if [ -n "\${FLOTILLA_RESUME_MESSAGE:-}" ]; then printf '%s\\n' "$FLOTILLA_RESUME_MESSAGE" > spender/answer.txt; else ${count}; if [ "$n" = 2 ]; then sleep 3; fi; ${spends(0.6, 1)}; fi`;
    const handle = await env.start(
      shellRequest(remote.url, [subTask('spender', agent)], {
        limits: { subTaskBudgetUsd: 0.5, runBudgetUsd: 1, autoResume: true },
      }),
    );
    const resumed = await waitForStatus(handle, 'the auto-resume', (x) => x.workers[0].autoResume !== undefined);
    expect(resumed.workers[0].autoResume).toBe('resumed by itself: slice 2, $0.60 of $1.00');

    const asked = await waitForStatus(handle, 'a person asked', (x) =>
      Boolean(x.workers[0].state === 'suspended' && x.workers[0].autoResume?.startsWith('not resumed')),
    );
    expect(asked.workers[0]).toMatchObject({
      state: 'suspended',
      reason: 'the agent used its budget ($1.20 of $0.90)',
      autoResume:
        'not resumed by itself: the run has spent $1.20 of its $1.00 (limits.runBudgetUsd); waiting for a person',
    });
    const shown = (await flotilla(env.taskQueue, ['status', handle.workflowId])).out;
    expect(shown).toContain('not resumed by itself');
    expect(shown).toContain(`flotilla resume ${handle.workflowId} --subtask spender`);

    const r = await flotilla(env.taskQueue, [
      'resume',
      handle.workflowId,
      '--subtask',
      'spender',
      '--message',
      'wrap up',
      '--add-budget',
      '1',
    ]);
    expect(r.err).toBe('');
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    // Two invocations ran without a message before the person's one.
    expect(await remote.show('main', 'spender/count')).toBe('2\n');
    expect(await remote.show('main', 'spender/answer.txt')).toBe('wrap up\n');
    expect(end.result?.workers[0]).toMatchObject({ status: 'done', runs: 3 });
    expect(end.result?.workers[0].costUsd).toBeCloseTo(1.2);
  });
});

describeReplay(() => env, 2);
