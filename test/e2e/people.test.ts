/**
 * People in the loop: gates, suspend and resume, pause, cancel — through our CLI, the client
 * API and the real `temporal` binary, against the suite's dev server.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { awaitRun } from '../../src/client/index';
import { approveSignal, resumeSignal, statusQuery } from '../../src/contracts/messages';
import { TestEnv } from '../support/env';
import {
  flotilla,
  processesMatching,
  processesRunning,
  spawnFlotilla,
  temporalCli,
  waitFor,
} from '../support/processes';
import { makeRemote } from '../support/remotes';
import { describeReplay } from '../support/replay';
import { greet, shellRequest, subTask, withGates } from '../support/requests';
import { waitForStatus } from '../support/runs';

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

/** An agent that, until it is resumed with a message, does `first`; then writes the message. */
const untilResumed = (id: string, first: string) =>
  subTask(
    id,
    `if [ -n "\${FLOTILLA_RESUME_MESSAGE:-}" ]; then mkdir -p ${id} && printf '%s\\n' "$FLOTILLA_RESUME_MESSAGE" > ${id}/answer.txt && git add -A && git commit -qm answer && echo '::flotilla {"costUsd": 0.25, "turns": 1}'; else ${first}; fi`,
  );

async function childExists(workflowId: string): Promise<boolean> {
  return env.client.workflow
    .getHandle(workflowId)
    .describe()
    .then(
      () => true,
      () => false,
    );
}

describe('gates', () => {
  it('a manual plan gate starts no worker before approve; the Temporal CLI can approve it', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const handle = await env.start(shellRequest(remote.url, [greet('one'), greet('two')], withGates('plan')));
    const s = await waitForStatus(handle, 'the plan gate', (x) => x.phase === 'awaiting-plan-approval');
    expect(s.gate?.plan?.map((p) => p.id)).toEqual(['one', 'two']);
    expect(s.gate?.plan?.[0]).toMatchObject({ ownedPaths: ['one'], agent: 'shell', prompt: 'do one' });
    // Once the leader is idle at the gate (no workflow task pending), only a signal can move it:
    // what it has done by then is all it does before approve.
    const history = await waitFor('the leader to be idle at the gate', async () => {
      const events = (await handle.fetchHistory()).events ?? [];
      const completed = events.map((e) => Boolean(e.workflowTaskCompletedEventAttributes)).lastIndexOf(true);
      return completed >= 0 && !events.slice(completed).some((e) => e.workflowTaskScheduledEventAttributes)
        ? events
        : undefined;
    });
    expect(history.filter((e) => e.startChildWorkflowExecutionInitiatedEventAttributes)).toEqual([]);
    expect((await handle.query(statusQuery)).workers.map((w) => w.state)).toEqual(['queued', 'queued']);
    expect(await childExists(`${handle.workflowId}/one`)).toBe(false);

    const shown = await flotilla(env.taskQueue, ['status', handle.workflowId]);
    expect(shown.out).toContain(`approve: flotilla approve ${handle.workflowId} --gate plan`);

    const signal = await temporalCli(
      'workflow',
      'signal',
      '--workflow-id',
      handle.workflowId,
      '--name',
      'approve',
      '--input',
      JSON.stringify({ gate: 'plan', by: 'ana', comment: 'looks right' }),
    );
    expect(signal.code).toBe(0);
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(end.result?.decisions).toEqual([{ gate: 'plan', approved: true, by: 'ana', comment: 'looks right' }]);
    expect(await remote.show('main', 'two/greeting.txt')).toBe('hello from two\n');
  });

  it('reject at the plan gate ends the run with the reason, nothing pushed', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const base = await remote.head();
    const handle = await env.start(shellRequest(remote.url, [greet('one')], withGates('plan')));
    await waitForStatus(handle, 'the plan gate', (x) => x.phase === 'awaiting-plan-approval');
    const r = await flotilla(env.taskQueue, [
      'reject',
      handle.workflowId,
      '--gate',
      'plan',
      '--reason',
      'wrong split',
      '--by',
      'bo',
    ]);
    expect(r.err).toBe('');
    const end = await awaitRun(handle);
    expect(end.failureType).toBe('rejected');
    expect(end.failureMessage).toBe('bo rejected the plan gate: wrong split');
    expect(await remote.head()).toBe(base);
  });

  it('a manual push gate refuses a wrong SHA and pushes exactly the approved one', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const base = await remote.head();
    const handle = await env.start(shellRequest(remote.url, [greet('one'), greet('two')], withGates('push')));
    const s = await waitForStatus(handle, 'the push gate', (x) => x.phase === 'awaiting-push-approval');
    const sha = s.gate!.sha!;
    expect(sha).toMatch(/^[0-9a-f]{40}$/);
    expect(s.gate?.diffstat).toContain('2 files changed');
    expect(await remote.head()).toBe(base);

    const wrong = await flotilla(env.taskQueue, ['approve', handle.workflowId, '--gate', 'push', '--sha', base!]);
    expect(wrong.code).toBe(2);
    expect(wrong.err).toContain(`refused: approval names ${base}, but the commit to push is ${sha}`);
    // A signal, which gets no answer, is refused by the workflow too, and the refusal recorded.
    await handle.signal(approveSignal, { gate: 'push', sha: base!, by: 'mallory' });
    const refused = await waitForStatus(handle, 'the refusal', (x) => (x.gate?.refused.length ?? 0) > 0);
    expect(refused.gate?.refused[0]).toEqual({
      by: 'mallory',
      reason: `approval names ${base}, but the commit to push is ${sha}`,
    });
    expect(refused.phase).toBe('awaiting-push-approval');

    const ok = await flotilla(env.taskQueue, [
      'approve',
      handle.workflowId,
      '--gate',
      'push',
      '--sha',
      sha,
      '--by',
      'ana',
    ]);
    expect(ok.err).toBe('');
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.head()).toBe(sha);
  });

  it('a gate that times out with outcome "fail" ends the run', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const base = await remote.head();
    const end = await env.run(
      shellRequest(remote.url, [greet('one')], {
        gates: { push: { mode: 'manual', timeoutMinutes: 0.02, onTimeout: 'fail' } },
      }),
    );
    expect(end.failureType).toBe('failed');
    expect(end.failureMessage).toBe('the push gate expired after 0.02 minute(s) without a decision');
    expect(end.result?.decisions[0]).toMatchObject({ gate: 'push', approved: false, by: 'timeout', expired: true });
    expect(await remote.head()).toBe(base);
  });
});

describe('gate expiry', () => {
  it('a gate that times out with outcome "approve" passes by itself and says so', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const end = await env.run(
      shellRequest(remote.url, [greet('one')], {
        gates: { plan: { mode: 'manual', timeoutMinutes: 0.02, onTimeout: 'approve' } },
      }),
    );
    expect(end.result?.outcome).toBe('pushed');
    expect(end.result?.decisions).toEqual([{ gate: 'plan', approved: true, by: 'timeout', expired: true }]);
    expect(await remote.show('main', 'one/greeting.txt')).toBe('hello from one\n');
  });
});

describe('suspend and resume', () => {
  it('a worker past its budget slice suspends; resume with a message and budget finishes it', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const spender = untilResumed('spender', `echo '::flotilla {"costUsd": 2, "turns": 3}'; sleep 30`);
    const handle = await env.start(
      shellRequest(remote.url, [spender, greet('calm')], { limits: { workerBudgetUsd: 1 } }),
    );
    const s = await waitForStatus(handle, 'the suspension', (x) => x.workers[0].state === 'suspended');
    expect(s.workers[0]).toMatchObject({
      state: 'suspended',
      costUsd: 2,
      turns: 3,
      reason: 'the agent used its budget ($2.00 of $1.00)',
    });

    const r = await flotilla(env.taskQueue, [
      'resume',
      handle.workflowId,
      '--subtask',
      'spender',
      '--message',
      'use blue',
      '--add-budget',
      '5',
    ]);
    expect(r.err).toBe('');
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'spender/answer.txt')).toBe('use blue\n');
    const report = end.result?.workers.find((w) => w.workerId === 'spender');
    expect(report).toMatchObject({ status: 'done', costUsd: 2.25, turns: 4, runs: 2 });
    expect(end.result?.costUsd).toBe(2.25);
  });

  it('a worker past its turn limit suspends; resume lets it finish', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const chatty = untilResumed('chatty', `echo '::flotilla {"turns": 7}'`);
    const handle = await env.start(shellRequest(remote.url, [chatty], { limits: { maxTurns: 5 } }));
    const s = await waitForStatus(handle, 'the suspension', (x) => x.workers[0].state === 'suspended');
    expect(s.workers[0]).toMatchObject({ turns: 7, reason: 'the agent reached its turn limit (5)' });
    await handle.signal(resumeSignal, { workerId: 'chatty', message: 'wrap up' });
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'chatty/answer.txt')).toBe('wrap up\n');
  });

  it('an agent that asks a question suspends with it; the answer reaches the agent', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const asker = untilResumed('asker', `echo '::flotilla {"question": "Which colour should the button be?"}'`);
    const handle = await env.start(shellRequest(remote.url, [asker]));
    const s = await waitForStatus(handle, 'the question', (x) => x.workers[0].state === 'suspended');
    expect(s.workers[0].question).toBe('Which colour should the button be?');
    expect((await flotilla(env.taskQueue, ['status', handle.workflowId])).out).toContain(
      'question: Which colour should the button be?',
    );
    await handle.signal(resumeSignal, { workerId: 'asker', message: 'green' });
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'asker/answer.txt')).toBe('green\n');
  });

  it('pause stops a running agent and keeps its workspace; resume continues it', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const marker = `sleep 3${Math.floor(Math.random() * 1e6)}`;
    const slow = untilResumed('slow', `mkdir -p slow && echo started > slow/progress.txt && ${marker}`);
    const handle = await env.start(shellRequest(remote.url, [slow]));
    await waitFor('the agent process', async () => ((await processesRunning(marker)).length ? true : undefined));
    const paused = await flotilla(env.taskQueue, ['pause', handle.workflowId, '--subtask', 'slow']);
    expect(paused.err).toBe('');
    const s = await waitForStatus(handle, 'the pause', (x) => x.workers[0].state === 'suspended');
    expect(s.workers[0].reason).toBe('paused by an operator');
    await waitFor('the agent to be killed', async () =>
      (await processesMatching(marker)).length === 0 ? true : undefined,
    );
    await flotilla(env.taskQueue, ['resume', handle.workflowId, '--subtask', 'slow', '--message', 'carry on']);
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'slow/answer.txt')).toBe('carry on\n');
    // The first run's file survived the pause: same workspace.
    expect(await remote.show('main', 'slow/progress.txt')).toBe('started\n');
  });

  it('a suspension that is never resumed expires with a clear outcome', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const asker = untilResumed('asker', `echo '::flotilla {"question": "anyone?"}'`);
    const end = await env.run(shellRequest(remote.url, [asker], { limits: { suspendTimeoutMinutes: 0.02 } }));
    expect(end.failureType).toBe('failed');
    expect(end.failureMessage).toContain(
      'asker: suspended (the agent needs an answer) and not resumed within 0 minute(s)',
    );
    // No one answered: another attempt would only ask again, so there is none.
    expect(end.result?.workers.map((w) => w.workerId)).toEqual(['asker']);
    expect(env.sandboxesLeft()).toEqual([]);
  });
});

describe('cancel', () => {
  it('cancel during a running agent kills it, destroys every sandbox and pushes nothing', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const base = await remote.head();
    const marker = `sleep 4${Math.floor(Math.random() * 1e6)}`;
    const handle = await env.start(shellRequest(remote.url, [subTask('busy', marker), greet('quick')]));
    await waitFor('the agent process', async () => ((await processesRunning(marker)).length ? true : undefined));
    const r = await flotilla(env.taskQueue, ['cancel', handle.workflowId]);
    expect(r.out).toContain('the run was cancelled; nothing was pushed');
    const end = await awaitRun(handle);
    expect(end.failureType).toBe('cancelled');
    expect(await processesMatching(marker)).toEqual([]);
    expect(env.sandboxesLeft()).toEqual([]);
    expect(await remote.head()).toBe(base);
    const s = await handle.query(statusQuery);
    expect(s.phase).toBe('cancelled');
    expect(s.workers.find((w) => w.id === 'busy')?.state).toBe('cancelled');
  });
});

describe('the Temporal CLI', () => {
  it('queries status and resumes a worker with the same messages', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const asker = untilResumed('asker', `echo '::flotilla {"question": "name?"}'`);
    const handle = await env.start(shellRequest(remote.url, [asker]));
    await waitForStatus(handle, 'the question', (x) => x.workers[0].state === 'suspended');
    const temporal = (...args: string[]) => temporalCli(...args, '--workflow-id', handle.workflowId);
    const q = await temporal('workflow', 'query', '--type', 'status', '--output', 'json');
    expect(JSON.parse(q.out).queryResult[0].workers[0]).toMatchObject({
      id: 'asker',
      state: 'suspended',
      question: 'name?',
    });
    const sig = await temporal(
      'workflow',
      'signal',
      '--name',
      'resume',
      '--input',
      JSON.stringify({ workerId: 'asker', message: 'flotilla' }),
    );
    expect(sig.code).toBe(0);
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'asker/answer.txt')).toBe('flotilla\n');
  });

  it('the Temporal CLI rejects with an update, pauses with a signal and cancels, as the README shows', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const base = await remote.head();
    const temporal = (id: string, ...args: string[]) => temporalCli(...args, '--workflow-id', id);

    const gated = await env.start(shellRequest(remote.url, [greet('one')], withGates('plan')));
    await waitForStatus(gated, 'the plan gate', (x) => x.phase === 'awaiting-plan-approval');
    const rejected = await temporal(
      gated.workflowId,
      'workflow',
      'update',
      'execute',
      '--name',
      'reject',
      '--input',
      JSON.stringify({ gate: 'plan', reason: 'wrong split', by: 'ana' }),
    );
    expect(rejected.code, rejected.err).toBe(0);
    const end = await awaitRun(gated);
    expect(end.failureType).toBe('rejected');
    expect(end.failureMessage).toContain('ana rejected the plan gate: wrong split');

    const running = await env.start(shellRequest(remote.url, [subTask('slow', 'sleep 600')]));
    await waitForStatus(running, 'the worker to run', (x) => x.workers[0].state === 'running');
    const paused = await temporal(
      running.workflowId,
      'workflow',
      'signal',
      '--name',
      'pause',
      '--input',
      JSON.stringify({ workerId: 'slow', by: 'ana' }),
    );
    expect(paused.code, paused.err).toBe(0);
    await waitForStatus(running, 'the pause', (x) => x.workers[0].state === 'suspended');
    const cancelled = await temporal(running.workflowId, 'workflow', 'cancel');
    expect(cancelled.code, cancelled.err).toBe(0);
    expect((await awaitRun(running)).failureType).toBe('cancelled');
    await waitFor('every sandbox to be gone', async () => (env.sandboxesLeft().length === 0 ? true : undefined));
    expect(await remote.head()).toBe(base);
  });

  it('watch shows the open gate with the exact approve command and exits with the result', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const handle = await env.start(shellRequest(remote.url, [greet('one')], withGates('push')));
    const watcher = spawnFlotilla(env.taskQueue, ['watch', handle.workflowId]);
    const s = await waitForStatus(handle, 'the push gate', (x) => x.phase === 'awaiting-push-approval');
    const approve = `approve: flotilla approve ${handle.workflowId} --gate push --sha ${s.gate!.sha}`;
    await waitFor('watch to show the gate', async () => (watcher.output().includes(approve) ? true : undefined));
    await handle.signal(approveSignal, { gate: 'push', sha: s.gate!.sha, by: 'ana' });
    expect(await watcher.exited, watcher.stderr()).toBe(0);
    expect(watcher.output()).toContain(`Run ${handle.workflowId}: pushed`);
  });
});

describeReplay(() => env, 5);
