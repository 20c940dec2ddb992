/**
 * Amendments of a living plan as a hostile sender writes them: wrong types, missing fields, huge
 * and unicode strings, ids that imitate attempts or paths, amendments of sub-tasks that cannot
 * take them, a cancellation whose long reason would be repeated on a hundred dependents, and
 * amendments sent while a replan is under way. Each is refused with the reason (an update leaves
 * no history, a signal is counted), the run is never wedged, and what a person reads (status,
 * result, the Web UI's details) stays bounded. Real dev server, git and sandboxes; shell agents
 * that hold until the test has seen what it waits for.
 */
import path from 'node:path';
import { simpleGit } from 'simple-git';
import { beforeAll, describe, expect, it } from 'vitest';
import { defaultPayloadConverter } from '@temporalio/common';
import { formatRunEnd } from '../../src/cli/format/run-end';
import { formatStatus } from '../../src/cli/format/status';
import { MessageRefused, addSubTask, awaitRun, cancelSubTask, retrySubTask } from '../../src/client/index';
import { type RunStatus, addSubTaskSignal, cancelSubTaskSignal, statusQuery } from '../../src/contracts/messages';
import { TestEnv } from '../support/env';
import { flotilla, holdCommand, letGo, processesRunning, waitFor } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { greet, shell, shellRequest, subTask, writeAgent } from '../support/requests';
import { historyFacts, subTaskChildren, waitForStatus } from '../support/runs';

const LIMIT = 64 * 1024;

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

const line = (s: RunStatus, id: string) => s.workers.find((w) => w.id === id)!;
const held = async (command: string) => ((await processesRunning(command)).length ? true : undefined);
const bytes = (value: unknown) => defaultPayloadConverter.toPayload(value)!.data!.length;
const currentDetails = async (workflowId: string) =>
  (await env.client.workflow.getHandle(workflowId).query<{ currentDetails?: string }>('__temporal_workflow_metadata'))
    .currentDetails ?? '';

/** The reason a run gives for refusing an update, as `flotilla add|cancel|retry` prints it. */
async function refusal(sent: Promise<string>): Promise<string> {
  const err: unknown = await sent.then(
    (answer) => new Error(`accepted: ${answer}`),
    (e: unknown) => e,
  );
  if (!(err instanceof MessageRefused)) throw err;
  return err.reason;
}

describe('hostile amendments', () => {
  it('are refused with the reason, leave no history, never wedge the run; a long cancel reason on 60 dependents keeps status and result under 64 KiB', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const [rootHold, slowHold] = [holdCommand(), holdCommand()];
    const dependents = Array.from({ length: 60 }, (_, i) => ({ ...greet(`d${i}`), dependsOn: ['root'] }));
    const plan = [
      subTask('root', `${rootHold}; ${writeAgent('root/greeting.txt', 'root')}`),
      subTask('slow', `${slowHold}; ${writeAgent('slow/greeting.txt', 'slow')}`),
      greet('ok'),
      ...dependents,
    ];
    const handle = await env.start(shellRequest(remote.url, plan, { limits: { maxParallel: 3 } }));
    const id = handle.workflowId;
    await waitForStatus(handle, 'ok to land', (s) => line(s, 'ok').integrated === true, 60_000);
    await waitFor('root and slow to hold', async () => ((await held(rootHold)) && (await held(slowHold))) || undefined);
    const before = await historyFacts(env.client, id);
    const add = (subTask: unknown, by: unknown = 'eve') =>
      refusal(addSubTask(env.client, id, { subTask, by } as never));
    const task = (fields: object) => ({ id: 'x', prompt: 'p', ownedPaths: ['x'], agent: shell('true'), ...fields });

    expect(await add(task({ id: 'root.attempt2' }))).toContain(
      'subTask.id: must be 1-63 letters, digits, "-" or "_", starting with a letter or digit',
    );
    expect(await add(task({ id: '../x', ownedPaths: ['../x'] }))).toMatch(
      /subTask\.id: must be 1-63 letters.*subTask\.ownedPaths\[0\]: path must not contain "\.\."/,
    );
    expect(await add(task({ id: 'ünïcødé' }))).toContain('subTask.id: must be 1-63 letters');
    expect(await add('a string')).toBe('invalid message: subTask: expected object, got a string');
    expect(await add(undefined)).toBe('invalid message: subTask: is required');
    expect(await add(task({}), 'é'.repeat(10_000))).toBe('invalid message: by: is 10000 characters; at most 100');
    expect(await add(task({ prompt: 'p'.repeat(300_000) }))).toContain(
      'subTask.prompt: is 300000 characters; at most 200000',
    );
    expect(await add(task({ dependsOn: ['nope'] }))).toContain('nope');
    expect(await refusal(cancelSubTask(env.client, id, { subTaskId: 'ok', by: 'eve', reason: 'r' }))).toBe(
      'sub-task ok is integrated: its commits are on the integration head',
    );
    expect(await refusal(retrySubTask(env.client, id, { subTaskId: 'root', by: 'eve' }))).toBe(
      'sub-task root is running; only a failed sub-task can be retried',
    );
    expect(await refusal(retrySubTask(env.client, id, { subTaskId: 'd0', by: 'eve' }))).toBe(
      'sub-task d0 is waiting; only a failed sub-task can be retried',
    );
    const unknown = await refusal(
      cancelSubTask(env.client, id, { subTaskId: 'z'.repeat(100), by: 'eve', reason: 'r' }),
    );
    expect(unknown).toMatch(/^no sub-task "z+" in this plan \(sub-tasks: root, slow, ok, d0, .*, …\)$/);
    // Through the raw update too, with fields no client would send.
    expect(await refusal(addSubTask(env.client, id, { subTask: task({}), by: 'eve', extra: 1 } as never))).toBe(
      'invalid message: (message): unknown field(s) "extra"',
    );
    // A refused update adds nothing to history.
    expect(await historyFacts(env.client, id)).toEqual(before);

    // The same names as signals: recorded as refusals, bounded.
    const refusedBefore = (await handle.query(statusQuery)).refusedCount;
    await handle.signal(addSubTaskSignal, { subTask: 42 } as never);
    await handle.signal(cancelSubTaskSignal, { subTaskId: 'ok', reason: 'x'.repeat(5000) } as never);
    const afterSignals = await waitForStatus(
      handle,
      'both signals refused',
      (s) => s.refusedCount === refusedBefore + 2,
    );
    expect(afterSignals.refusals.slice(-2).map((r) => [r.message, r.reason])).toEqual([
      ['addSubTask', 'invalid message: subTask: expected object, got a number'],
      ['cancelSubTask', 'invalid message: reason: is 5000 characters; at most 2000'],
    ]);

    // A cancellation whose long reason (multi-byte) drops 60 dependents.
    const reason = `nicht mehr nötig — ${'ü'.repeat(2000)}`.slice(0, 2000);
    const answer = await cancelSubTask(env.client, id, { subTaskId: 'root', by: 'ana', reason });
    expect(answer).toMatch(
      /^cancelled sub-task root: its agent was stopped and its sandbox destroyed; dropped d0, d1, /,
    );
    expect(await refusal(addSubTask(env.client, id, { subTask: task({ dependsOn: ['root'] }), by: 'eve' }))).toBe(
      'subTask.dependsOn: "root" is cancelled; it will never be integrated',
    );
    expect(await refusal(addSubTask(env.client, id, { subTask: task({ dependsOn: ['d7'] }), by: 'eve' }))).toBe(
      'subTask.dependsOn: "d7" is dropped; it will never be integrated',
    );
    const s = await waitForStatus(handle, 'what was left out', (st) => st.dropped?.length === 61);
    expect(bytes(s)).toBeLessThan(LIMIT);
    expect(line(s, 'd3')).toMatchObject({ state: 'dropped', reason: 'its dependency root was cancelled by ana' });
    expect(line(s, 'root').reason).toMatch(/^cancelled by ana: nicht mehr nötig — ü+… \(\+\d+ chars\)$/);
    const details = await waitFor('the details to list what was left out', async () => {
      const d = await currentDetails(id);
      return d.includes('- and 53 more (flotilla status)') ? d : undefined;
    });
    expect(details).toContain('- d0: its dependency root was cancelled by ana');
    expect(Buffer.byteLength(details)).toBeLessThan(LIMIT);
    expect(formatStatus(s, id)).toContain('  d59: its dependency root was cancelled by ana');

    await letGo(slowHold);
    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.message).toContain('2 sub-task(s) integrated, 61 left out (root, d0, d1, d2, d3, and 56 more');
    expect(await remote.show('main', 'slow/greeting.txt')).toBe('slow\n');
    expect(await remote.show('main', 'root/greeting.txt')).toBeNull();
    expect(bytes(end.result)).toBeLessThan(LIMIT);
    expect(formatRunEnd(end)).toContain('    d0: its dependency root was cancelled by ana');
    const facts = await historyFacts(env.client, id);
    expect(facts).toMatchObject({ workflowTaskFailures: 0, updatesRejected: 0, updatesAccepted: 1 });
  }, 300_000);

  it('amendments sent while a replan runs are refused until its proposal is settled, so the proposal cannot collide with them', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const [plannerHold, slowHold] = [holdCommand(), holdCommand()];
    const replacement = { subTasks: [{ id: 'fix', prompt: 'do it right', ownedPaths: ['fix'] }] };
    const planner = shell(`${plannerHold}; printf '%s' '${JSON.stringify(replacement)}' > "$FLOTILLA_PLAN_FILE"`);
    const handle = await env.start(
      shellRequest(
        remote.url,
        [subTask('slow', `${slowHold}; ${writeAgent('slow/greeting.txt', 'slow')}`), subTask('broken', 'exit 9')],
        {
          agent: shell(writeAgent('fix/greeting.txt', 'fixed')),
          planner,
          onFailure: 'replan',
          limits: { retries: 0 },
        },
      ),
    );
    const id = handle.workflowId;
    await waitFor('the replanning planner to hold', () => held(plannerHold), 60_000);
    const fix = { id: 'fix', prompt: 'mine', ownedPaths: ['mine'], agent: shell(writeAgent('mine/x.txt', 'x')) };
    const during = 'a replan is under way (round 1, after broken failed); amend the plan once the planner';
    expect(await refusal(addSubTask(env.client, id, { subTask: fix, by: 'ana' }))).toContain(during);
    expect(await refusal(cancelSubTask(env.client, id, { subTaskId: 'slow', by: 'ana', reason: 'r' }))).toContain(
      during,
    );

    await letGo(plannerHold);
    await waitForStatus(handle, 'the replacement to be planned', (s) => s.workers.some((w) => w.id === 'fix'));
    expect(await refusal(addSubTask(env.client, id, { subTask: fix, by: 'ana' }))).toContain(
      'subTask.id: duplicate id "fix"',
    );
    const extra = { ...greet('extra'), prompt: 'more' };
    expect(await addSubTask(env.client, id, { subTask: extra, by: 'ana' })).toContain('added sub-task extra');
    await letGo(slowHold);
    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(await remote.show('main', 'fix/greeting.txt')).toBe('fixed\n');
    expect(await remote.show('main', 'extra/greeting.txt')).toBe('hello from extra\n');
    expect(await remote.show('main', 'mine/x.txt')).toBeNull();
    expect((await historyFacts(env.client, id)).workflowTaskFailures).toBe(0);
  }, 300_000);
});

describe('retry, when what it brings back depends on more than one failed sub-task', () => {
  it('leaves a sub-task that also depends on another failed one dropped, for that one, instead of waiting for good', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const [hold, yHold] = [holdCommand(), holdCommand()];
    const plan = [
      subTask('slow', `${hold}; ${writeAgent('slow/greeting.txt', 'slow')}`),
      subTask('x', `grep -q 'try again' "$FLOTILLA_PROMPT_FILE" || exit 9; ${writeAgent('x/greeting.txt', 'x')}`),
      subTask('y', `${yHold}; exit 8`),
      { ...greet('both'), dependsOn: ['x', 'y'] },
    ];
    const handle = await env.start(shellRequest(remote.url, plan, { onFailure: 'continue', limits: { retries: 0 } }));
    // x fails first, so both is dropped for x; then y fails too.
    await waitForStatus(handle, 'x to fail', (s) => line(s, 'both').reason === 'its dependency x failed', 60_000);
    await letGo(yHold);
    await waitForStatus(handle, 'y to fail', (s) => s.dropped?.length === 3, 60_000);
    const answer = await retrySubTask(env.client, handle.workflowId, {
      subTaskId: 'x',
      by: 'bo',
      message: 'try again',
    });
    expect(answer).toBe('retrying sub-task x (attempt 2) from the integration head');
    const s = await waitForStatus(handle, 'x to land', (st) => line(st, 'x.attempt2')?.integrated === true, 60_000);
    expect(line(s, 'both')).toMatchObject({ state: 'dropped', reason: 'its dependency y failed' });
    await letGo(hold);
    const ended = await waitForStatus(handle, 'the run to end', (st) => st.phase === 'done', 60_000);
    expect(ended.outcome).toBe('pushed');
    expect(ended.dropped).toEqual([
      { id: 'y', reason: 'the agent exited with code 8' },
      { id: 'both', reason: 'its dependency y failed' },
    ]);
    expect(await remote.show('main', 'x/greeting.txt')).toBe('x\n');
    expect(await remote.show('main', 'both/greeting.txt')).toBeNull();
  }, 300_000);
});

describe('continues.runId, as a script or the Temporal CLI may send it', () => {
  it('is checked by the host: a run of another repository, a run that does not exist and the run itself are refused; nothing is pushed', async () => {
    const [mine, other] = [await makeRemote({ 'README.md': 'x\n' }), await makeRemote({ 'README.md': 'x\n' })];
    const failed = await env.run(
      shellRequest(mine.url, [greet('good'), subTask('broken', 'exit 9')], { limits: { retries: 0 } }),
    );
    expect(failed.failureType).toBe('failed');
    const otherBase = await other.head();
    const continuing = (runId: string, workflowId?: string) =>
      env.run(shellRequest(other.url, [greet('good'), greet('broken')], { continues: { runId } }), workflowId);

    const foreign = await continuing(failed.workflowId);
    expect(foreign.failureMessage).toContain(
      `continues.runId: run ${failed.workflowId} worked on ${mine.url}, not ${other.url}; a run continues only a run of its own repository`,
    );
    expect((await continuing('no-such-run')).failureMessage).toContain('continues.runId: no run with id no-such-run');
    const self = `run-self-${Date.now()}`;
    expect((await continuing(self, self)).failureMessage).toContain(
      `continues.runId: run ${self} is still running; continue it once it has ended`,
    );
    expect(await other.head()).toBe(otherBase);
  }, 300_000);

  it("trusts no staging ref it did not check: a failed run's refs moved after it ended are not reused, and those sub-tasks run again", async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const base = (await remote.head())!;
    const later = subTask(
      'later',
      `grep -q 'which this run continues' "$FLOTILLA_PROMPT_FILE" || exit 9; ${writeAgent('later/greeting.txt', 'later')}`,
      { dependsOn: ['a'] },
    );
    const failed = await env.run(shellRequest(remote.url, [greet('a'), later], { limits: { retries: 0 } }));
    expect(failed.failureType).toBe('failed');
    const head = failed.result!.head!;
    expect(head.integrated).toEqual(['a']);
    const worker = failed.result!.workers.find((w) => w.workerId === 'a')!;
    // Somebody with the staging repository in hand points both refs at the base.
    const staging = simpleGit(path.join(env.dataDir, 'staging.git'));
    for (const ref of [head.ref, worker.ref!]) await staging.raw(['update-ref', ref, base]);

    const started = await flotilla(env.taskQueue, ['continue', failed.workflowId, '--json']);
    expect(started.code).toBe(0);
    const next = (JSON.parse(started.out) as { workflowId: string }).workflowId;
    env.runs.push(next);
    const end = await awaitRun(env.client.workflow.getHandle(next));
    expect(end.failureMessage).toBeUndefined();
    expect(await remote.show('main', 'a/greeting.txt')).toBe('hello from a\n');
    expect(await remote.show('main', 'later/greeting.txt')).toBe('later\n');
    const children = await subTaskChildren(env.client, next);
    expect(children).toEqual([`${next}/a`, `${next}/later`]);
    const s = await env.client.workflow.getHandle(next).query(statusQuery);
    expect(line(s, 'a').reusedFrom).toBeUndefined();
  }, 300_000);
});
