/**
 * Hostile messages: every bad payload the Temporal CLI or a client can send, as signals and as
 * updates, against a real run on the suite's dev server. None may fail a workflow task; each is
 * refused where the docs say (the update's caller, or the status and result for a signal); the
 * run then completes normally. Also: pause/resume racing a worker's start and end, a resume
 * during a slow pause, a cancel during the push, a terminated leader, and typed failures.
 * (test/unit/messages.test.ts validates the same messages without a server.)
 */
import { mkdirSync, writeFileSync, existsSync } from 'node:fs';
import path from 'node:path';
import { formatRunEnd } from '../../src/cli/format/run-end';
import { beforeAll, describe, expect, it } from 'vitest';
import { MessageRefused, approve, awaitRun, pause, resume } from '../../src/client/index';
import { MAX_CHARS } from '../../src/contracts/request';
import {
  REFUSALS_KEPT,
  type RunStatus,
  approveSignal,
  pauseSignal,
  resumeSignal,
  statusQuery,
} from '../../src/contracts/messages';
import { E2BDouble } from '../support/e2b-double';
import { TestEnv } from '../support/env';
import { flotilla, processesMatching, processesRunning, temporalCli, waitFor } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { greet, shellRequest, subTask, withGates } from '../support/requests';
import { historyFacts, waitForStatus } from '../support/runs';
import { tempDir } from '../support/temp';

let double: E2BDouble;
let env: TestEnv;
beforeAll(async () => {
  double = await E2BDouble.start();
  env = await TestEnv.start({ e2bApi: double });
});

/** An agent that does `first` until it is resumed with a message, then writes the message. */
const untilResumed = (id: string, first: string) =>
  subTask(
    id,
    `if [ -n "\${FLOTILLA_RESUME_MESSAGE:-}" ]; then mkdir -p ${id} && printf '%s\\n' "$FLOTILLA_RESUME_MESSAGE" > ${id}/answer.txt && git add -A && git commit -qm answer; else ${first}; fi`,
  );

/** `temporal workflow <args…>` on the run `workflowId`. */
const temporal = (workflowId: string, args: string[]) => temporalCli('workflow', ...args, '--workflow-id', workflowId);
const input = (json: string | undefined) => (json === undefined ? [] : ['--input', json]);

/** Refusals whose reason matches, for a readable assertion. */
const refusalsMatching = (s: RunStatus, message: string, reason: RegExp) =>
  s.refusals.filter((r) => r.message === message && reason.test(r.reason));

describe('a corpus of bad messages', () => {
  it('through the Temporal CLI and the client: no workflow task fails, each is refused visibly, and the run then completes', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const handle = await env.start(shellRequest(remote.url, [greet('one')], withGates('plan', 'push')));
    const id = handle.workflowId;
    await waitForStatus(handle, 'the plan gate', (s) => s.phase === 'awaiting-plan-approval');

    // [name, --input or undefined for none, what the refusal says]
    const corpus: [string, string | undefined, RegExp][] = [];
    for (const name of ['approve', 'reject', 'pause', 'resume', 'workerProgress']) {
      corpus.push(
        [name, undefined, /\(message\): is required/],
        [name, 'null', /expected object, got null/],
        [name, '"approve"', /expected object, got a string/],
        [name, '[1,2]', /expected object, got an array/],
      );
    }
    corpus.push(
      ['approve', '{}', /gate: is required/],
      ['approve', '{"gate":3}', /gate: Invalid option/],
      ['approve', '{"gate":"deploy"}', /gate: Invalid option/],
      ['approve', `{"gate":"push","sha":"${'a'.repeat(40)}"}`, /the push gate is not open \(the plan gate is\)/],
      ['approve', '{"gate":"plan","by":{"name":"x"}}', /by: expected string, got an object/],
      ['reject', '{"gate":"plan"}', /reason: is required/],
      ['reject', '{"gate":"plan","reason":5}', /reason: expected string, got a number/],
      ['pause', '{"workerId":"ghost"}', /no worker "ghost" in this run \(workers: one\)/],
      ['resume', '{"workerId":"one","addBudgetUsd":-5}', /addBudgetUsd: must be a positive number/],
      ['resume', '{"workerId":"one","addBudgetUsd":"abc"}', /addBudgetUsd: expected number, got a string/],
      ['resume', '{"workerId":"one"}', /worker one is queued; only a suspended worker can be resumed/],
    );
    const forged: [string, string, RegExp][] = [
      [
        'workerProgress',
        '{"id":"one","state":"suspended","costUsd":-1000,"turns":1}',
        /token: is required; costUsd: Too small/,
      ],
      [
        'workerProgress',
        '{"token":"guess","id":"one","state":"suspended","costUsd":5,"turns":1,"question":"fake?"}',
        /does not come from that worker/,
      ],
      ['aprove', '{"gate":"plan"}', /unknown signal "aprove"/],
      // A part of a plan to a run that was not started with planParts, and one that is no part at all.
      ['planPart', '{"part":0,"text":"[{\\"id\\":\\"evil\\"}]"}', /this run was not started with planParts/],
      ['planPart', '{"part":-1,"text":7}', /part: Too small.*text: expected string/],
    ];

    // As updates: each is refused to the caller, with the reason.
    for (const [name, json, reason] of corpus.filter(([name]) => name !== 'workerProgress')) {
      const r = await temporal(id, ['update', 'execute', '--name', name, ...input(json)]);
      expect(r.code, `update ${name} ${json}`).not.toBe(0);
      expect(r.out + r.err, `update ${name} ${json}`).toMatch(reason);
    }
    // As signals: delivered, and each recorded as a refusal.
    for (const [name, json] of [...corpus, ...forged]) {
      const r = await temporal(id, ['signal', '--name', name, ...input(json)]);
      expect(r.code, `signal ${name} ${json}: ${r.err}`).toBe(0);
    }
    // Through the client: values JSON cannot carry, and megabytes of text.
    const huge = 'x'.repeat(1_900_000);
    await handle.signal(resumeSignal, { workerId: 'one', addBudgetUsd: Number.POSITIVE_INFINITY });
    await handle.signal(resumeSignal, { workerId: 'one', addBudgetUsd: Number.NaN });
    // A signal is in history before the workflow sees it: one such is enough (history pages are 4 MB).
    await handle.signal(approveSignal, { gate: 'plan', by: 'x'.repeat(50_000), comment: huge });
    await expect(approve(env.client, id, { gate: 'plan', comment: huge })).rejects.toThrow(
      `comment: is ${huge.length} characters; at most ${MAX_CHARS.comment}`,
    );
    await expect(resume(env.client, id, { workerId: 'one', addBudgetUsd: -5 })).rejects.toThrow(MessageRefused);

    const sent = corpus.length + forged.length + 3;
    const s = await waitForStatus(handle, 'every refusal', (x) => x.refusedCount === sent);
    expect(s.phase).toBe('awaiting-plan-approval');
    expect(s.refusals).toHaveLength(REFUSALS_KEPT);
    // The status stays small whatever the senders wrote.
    expect(JSON.stringify(s).length).toBeLessThan(32 * 1024);
    expect(s.refusals.every((r) => r.by.length <= 100 && r.reason.length < 400)).toBe(true);
    expect(refusalsMatching(s, 'resume', /addBudgetUsd: expected number, got null/)).toHaveLength(2);
    expect(refusalsMatching(s, 'planPart', /this run was not started with planParts/)).toHaveLength(1);
    expect(refusalsMatching(s, 'planPart', /part: Too small.*text: expected string/)).toHaveLength(1);
    expect(
      refusalsMatching(s, 'approve', /by: is 50000 characters; at most 100; comment: is 1900000 characters/),
    ).toHaveLength(1);
    expect(s.refusals.filter((r) => r.by.startsWith('xxxx'))).toHaveLength(1);
    // Forged progress changed nothing.
    expect(s.workers[0]).toMatchObject({ id: 'one', state: 'queued', costUsd: 0, turns: 0 });
    expect(s.workers[0].question).toBeUndefined();

    // Now correct approvals, by update: the client for the plan, the Temporal CLI for the push.
    expect(await approve(env.client, id, { gate: 'plan', by: 'ana' })).toBe('approved the plan gate');
    const atPush = await waitForStatus(handle, 'the push gate', (x) => x.phase === 'awaiting-push-approval');
    const sha = atPush.gate!.sha!;
    await expect(approve(env.client, id, { gate: 'push', sha: 'b'.repeat(40), by: 'mallory' })).rejects.toThrow(
      `refused: approval names ${'b'.repeat(40)}, but the commit to push is ${sha}`,
    );
    const ok = await temporal(id, [
      'update',
      'execute',
      '--name',
      'approve',
      '--input',
      JSON.stringify({ gate: 'push', sha, by: 'bo' }),
    ]);
    expect(ok.code, ok.err).toBe(0);
    expect(ok.out).toContain('approved the push gate');

    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(end.result?.decisions.map((d) => [d.gate, d.by])).toEqual([
      ['plan', 'ana'],
      ['push', 'bo'],
    ]);
    expect(end.result?.refusedCount).toBe(sent);
    expect(end.result?.refusals).toHaveLength(REFUSALS_KEPT);
    expect(formatRunEnd(end)).toContain(`refused messages: ${sent} (the latest ${REFUSALS_KEPT} shown)`);
    expect(await remote.show('main', 'one/greeting.txt')).toBe('hello from one\n');

    // Refused updates wrote nothing; nothing failed a workflow task.
    expect(await historyFacts(env.client, id)).toEqual({
      workflowTaskFailures: 0,
      updatesAccepted: 2,
      updatesRejected: 0,
    });
  });
});

describe('pause and resume', () => {
  it('a pause sent before the worker starts reaches it when it does; one after it ends is refused, and the run goes on', async () => {
    const remote = await makeRemote({
      'README.md': 'x\n',
      'check.test.js':
        "const test = require('node:test');\ntest('a', () => {});\ntest('b', () => {});\ntest('c', { skip: true }, () => {});\n",
    });
    const handle = await env.start(
      shellRequest(remote.url, [untilResumed('one', 'exit 3')], {
        ...withGates('plan', 'push'),
        testCmd: 'node --test',
      }),
    );
    const id = handle.workflowId;
    await waitForStatus(handle, 'the plan gate', (x) => x.phase === 'awaiting-plan-approval');
    // The worker's child has not started: the pause is held for it.
    expect(await pause(env.client, id, { workerId: 'one', by: 'ana' })).toBe(
      'worker one has not started; it is paused as soon as it does',
    );
    await approve(env.client, id, { gate: 'plan' });
    const s = await waitForStatus(handle, 'the suspension', (x) => x.workers[0].state === 'suspended');
    expect(s.workers[0].reason).toBe('paused by an operator');
    expect(await resume(env.client, id, { workerId: 'one', message: 'carry on', by: 'ana' })).toMatch(
      /^worker one is (running|done)$/,
    );

    const atPush = await waitForStatus(handle, 'the push gate', (x) => x.phase === 'awaiting-push-approval');
    expect(atPush.workers[0].state).toBe('done');
    expect(atPush.gate?.testSummary).toBe('2 passed, 0 failed, 1 skipped (node --test)');
    // The worker's child has closed: an update is refused with the reason, a signal is recorded.
    await expect(pause(env.client, id, { workerId: 'one' })).rejects.toThrow(
      'refused: worker one is done; only a queued or running worker can be paused',
    );
    await handle.signal(pauseSignal, { workerId: 'one', by: 'bo' });
    await handle.signal(resumeSignal, { workerId: 'one', by: 'bo' });
    const refused = await waitForStatus(handle, 'the refusals', (x) => x.refusedCount === 2);
    expect(refused.refusals.map((r) => [r.message, r.by, r.reason])).toEqual([
      ['pause', 'bo', 'worker one is done; only a queued or running worker can be paused'],
      ['resume', 'bo', 'worker one is done; only a suspended worker can be resumed'],
    ]);
    const r = await flotilla(env.taskQueue, ['approve', id, '--gate', 'push', '--sha', atPush.gate!.sha!]);
    expect(r.err).toBe('');
    expect(r.out).toContain('approved the push gate');
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'one/answer.txt')).toBe('carry on\n');
    expect((await historyFacts(env.client, id)).workflowTaskFailures).toBe(0);
  });

  it('a resume sent while the sandbox is still pausing is kept', async () => {
    // Only the cloud API is a double: its pause waits until the test lets it go.
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let pausing = false;
    const realPause = double.pause.bind(double);
    double.pause = async (sandboxId: string) => {
      pausing = true;
      await released;
      return realPause(sandboxId);
    };
    try {
      const remote = await makeRemote({ 'README.md': 'x\n' });
      const asker = untilResumed('one', `echo '::flotilla {"question": "which colour?"}'`);
      const handle = await env.start(
        shellRequest(remote.url, [asker], { sandbox: { provider: 'e2b' }, limits: { suspendTimeoutMinutes: 1 } }),
      );
      await waitForStatus(handle, 'the question', (x) => x.workers[0].state === 'suspended');
      await waitFor('the slow pause', async () => (pausing ? true : undefined));
      await handle.signal(resumeSignal, { workerId: 'one', message: 'green' });
      // The worker's child has the resume before its sandbox is paused.
      await waitFor('the resume at the worker', async () => {
        const events = (await env.client.workflow.getHandle(`${handle.workflowId}/one`).fetchHistory()).events ?? [];
        return events.some((e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'resume')
          ? true
          : undefined;
      });
      release();
      const end = await awaitRun(handle);
      expect(end.failureMessage).toBeUndefined();
      expect(end.result?.outcome).toBe('pushed');
      expect(await remote.show('main', 'one/answer.txt')).toBe('green\n');
    } finally {
      release();
      double.pause = realPause;
    }
  });
});

describe('ending a run', () => {
  it('a cancel during the push lets the push finish, and the result says it landed', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const dir = tempDir('push-hook');
    const started = path.join(dir, 'started');
    const go = path.join(dir, 'go');
    mkdirSync(path.join(remote.url, 'hooks'), { recursive: true });
    writeFileSync(
      path.join(remote.url, 'hooks', 'pre-receive'),
      `#!/bin/sh\ntouch ${started}\nwhile [ ! -e ${go} ]; do sleep 0.1; done\n`,
      { mode: 0o755 },
    );
    const handle = await env.start(shellRequest(remote.url, [greet('one')]));
    await waitFor('the push to reach the remote', async () => (existsSync(started) ? true : undefined));
    await handle.cancel();
    writeFileSync(go, '');
    const end = await awaitRun(handle);
    expect(end.failureType).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.head()).toBe(end.result?.pushedSha);
    expect(await remote.show('main', 'one/greeting.txt')).toBe('hello from one\n');
  });

  it('a terminated leader leaves no sandbox: its workers are asked to cancel and clean up', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const marker = `sleep 4${Math.floor(Math.random() * 1e6)}`;
    const handle = await env.start(shellRequest(remote.url, [subTask('slow', marker)]));
    await waitFor('the agent process', async () => ((await processesRunning(marker)).length ? true : undefined));
    expect(env.sandboxesLeft().length).toBeGreaterThan(0);
    await handle.terminate('operator pulled the plug');
    const child = env.client.workflow.getHandle(`${handle.workflowId}/slow`);
    await waitFor('the worker to close', async () =>
      (await child.describe()).status.name === 'CANCELLED' ? true : undefined,
    );
    await waitFor('the agent to be killed', async () =>
      (await processesMatching(marker)).length === 0 ? true : undefined,
    );
    // The integration's test sandbox, made ready while the agent ran, goes with its keeper.
    await waitFor('every sandbox to go', async () => (env.sandboxesLeft().length === 0 ? true : undefined));
  });

  it('a permanent failure ends the run at once with its cause; a refused request does not crash `flotilla result`', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const t0 = Date.now();
    const handle = await env.start(
      shellRequest(remote.url, [greet('one')], { repo: { url: remote.url, baseRef: 'nope' } }),
    );
    const end = await awaitRun(handle);
    expect(Date.now() - t0).toBeLessThan(15_000);
    expect(end.failureType).toBe('failed');
    expect(end.failureMessage).toBe(
      `resolving the base failed: InvalidRequest: repo.baseRef: branch "nope" does not exist in ${remote.url}`,
    );
    expect((await handle.query(statusQuery)).phase).toBe('failed');

    const refusedRun = await env.start({ objective: 'x', repo: { url: remote.url }, testCmd: 7 });
    const shown = await flotilla(env.taskQueue, ['result', refusedRun.workflowId]);
    expect(shown.code).toBe(1);
    expect(shown.err).toBe('');
    expect(shown.out).toContain(`Run ${refusedRun.workflowId} did not push (InvalidRequest): invalid request:`);
    expect(shown.out).toContain('testCmd: expected string, got a number');
  });
});
