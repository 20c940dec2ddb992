/**
 * The living plan end to end: dependencies, overlapping owned paths, merging each sub-task as it
 * ends, retries and the failure policies, amendments while the plan runs, and continuing a
 * failed run. A real dev server, real git, real sandboxes and shell agents; each test asserts the
 * pushed tree and what the status and the result say. Agents that must outlast a check wait in a
 * held command until the test has seen what it waits for (never a sleep in the test).
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { simpleGit } from 'simple-git';
import { beforeAll, describe, expect, it } from 'vitest';
import { formatStatus } from '../../src/cli/format/status';
import { approve, awaitRun, retrySubTask } from '../../src/client/index';
import type { RunStatus, SubTaskStatus } from '../../src/contracts/messages';
import { statusQuery } from '../../src/contracts/messages';
import { TestEnv } from '../support/env';
import { BOTH_NAMES, greetingsRemote, greetingsRequest, renamer } from '../support/greetings';
import { flotilla, holdCommand, letGo, processesMatching, processesRunning, waitFor } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { describeReplay } from '../support/replay';
import { greet, shell, shellRequest, subTask, withGates, writeAgent } from '../support/requests';
import { subTaskChildren, waitForStatus } from '../support/runs';
import { tempDir } from '../support/temp';

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

const line = (s: RunStatus, id: string) => s.workers.find((w) => w.id === id)!;
const running = async (command: string) => ((await processesRunning(command)).length ? true : undefined);
/** When a status line's sub-task ran: [start, end). */
const span = (w: SubTaskStatus) => [w.startedAt!, w.startedAt! + w.durationMs!] as const;
const staging = () => simpleGit(path.join(env.dataDir, 'staging.git'));

/** An agent that fails unless each of `files` is in its checkout, then writes what they hold to `<id>/seen.txt`. */
function builder(id: string, files: string[], dependsOn: string[]) {
  const check = files.map((f) => `test -f ${f} || { echo "missing ${f}"; exit 4; }`).join(' && ');
  const told = `grep -o 'sub-task "[a-z]*" (a dependency)' "$FLOTILLA_PROMPT_FILE" | sort > ${id}/told.txt`;
  return subTask(
    id,
    `mkdir -p ${id} && ${check} && cat ${files.join(' ')} > ${id}/seen.txt && ${told} && git add -A && git commit -qm ${id} && echo "${id}: built on ${files.join(', ')}"`,
    { dependsOn },
  );
}

describe('dependencies', () => {
  it('a diamond: b and c start once a is integrated and see its files, d sees all three; maxParallel holds; the plan gate shows the graph', async () => {
    const remote = await makeRemote({ 'README.md': '# diamond\n' });
    const a = subTask('a', `${writeAgent('a/out.txt', 'from a')} && echo "a: wrote a/out.txt"`);
    const plan = [
      a,
      builder('b', ['a/out.txt'], ['a']),
      builder('c', ['a/out.txt'], ['a']),
      builder('d', ['a/out.txt', 'b/seen.txt', 'c/seen.txt'], ['b', 'c']),
    ];
    const handle = await env.start(
      shellRequest(remote.url, plan, { limits: { maxParallel: 1 }, ...withGates('plan') }),
    );
    const gate = await waitForStatus(handle, 'the plan gate', (s) => s.gate?.gate === 'plan');
    expect(gate.gate?.plan?.map((r) => [r.id, r.dependsOn])).toEqual([
      ['a', undefined],
      ['b', ['a']],
      ['c', ['a']],
      ['d', ['b', 'c']],
    ]);
    expect(formatStatus(gate, handle.workflowId)).toMatch(/ d +shell +d +\[needs b, c\] +— do d/);
    expect(line(gate, 'd').dependsOn).toEqual(['b', 'c']);
    await approve(env.client, handle.workflowId, { gate: 'plan', by: 'ana' });

    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'b/seen.txt')).toBe('from a\n');
    expect(await remote.show('main', 'c/seen.txt')).toBe('from a\n');
    expect(await remote.show('main', 'd/seen.txt')).toBe('from a\nfrom a\nfrom a\n');
    // Each dependent's agent was told what its dependencies did.
    expect(await remote.show('main', 'b/told.txt')).toBe('sub-task "a" (a dependency)\n');
    expect(await remote.show('main', 'd/told.txt')).toBe('sub-task "b" (a dependency)\nsub-task "c" (a dependency)\n');

    const s = await handle.query(statusQuery);
    expect(s.workers.map((w) => [w.id, w.state, w.integrated])).toEqual([
      ['a', 'done', true],
      ['b', 'done', true],
      ['c', 'done', true],
      ['d', 'done', true],
    ]);
    // maxParallel 1: no two sub-tasks ever ran at once, and b and c only after a.
    const spans = s.workers.map(span).sort((x, y) => x[0] - y[0]);
    for (let i = 1; i < spans.length; i++) expect(spans[i][0]).toBeGreaterThanOrEqual(spans[i - 1][1]);
    expect(span(line(s, 'b'))[0]).toBeGreaterThanOrEqual(span(line(s, 'a'))[1]);
    expect(end.result?.head?.integrated.sort()).toEqual(['a', 'b', 'c', 'd']);
    expect(env.sandboxesLeft()).toEqual([]);
  });
});

describe('overlapping owned paths', () => {
  it('two sub-tasks owning the same file run one after the other, the second on the first: both edits land, no conflict', async () => {
    const remote = await makeRemote({ 'notes.txt': 'start\n' });
    const hold = holdCommand();
    const append = (word: string) => `printf '${word}\\n' >> notes.txt && git commit -qam ${word}`;
    const first = subTask('first', `${hold}; ${append('first')}`, { ownedPaths: ['notes.txt'] });
    const second = subTask('second', `grep -qx first notes.txt || exit 5; ${append('second')}`, {
      ownedPaths: ['notes.txt'],
    });
    const handle = await env.start(shellRequest(remote.url, [first, second]));
    const waiting = await waitForStatus(
      handle,
      'second to wait for first',
      (s) => line(s, 'first').state === 'running' && line(s, 'second').waits !== undefined,
    );
    expect(line(waiting, 'second')).toMatchObject({ state: 'queued', waits: 'waits for first: overlapping notes.txt' });
    expect(formatStatus(waiting, handle.workflowId)).toMatch(
      / second +queued .* waits for first: overlapping notes.txt/,
    );
    await waitFor('first to hold', () => running(hold));
    await letGo(hold);

    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(await remote.show('main', 'notes.txt')).toBe('start\nfirst\nsecond\n');
    expect(end.result?.integration?.attempts).toEqual([]);
    expect(end.result?.workers.map((w) => [w.workerId, w.status, w.seedSha !== undefined])).toEqual([
      ['first', 'done', false],
      ['second', 'done', true],
    ]);
  });
});

describe('merge as you go', () => {
  it('the fast sub-tasks are on the integration head, their conflict resolved, while the slow one still runs', async () => {
    const remote = await greetingsRemote();
    const hold = holdCommand();
    const slow = subTask('slow', `${hold}; ${writeAgent('slow/greeting.txt', 'hello')}`);
    const resolver = shell(`printf '${BOTH_NAMES.replace(/\n/g, '\\n')}' > shared/names.txt`);
    const handle = await env.start(
      greetingsRequest(remote.url, [slow, renamer('left'), renamer('right')], {
        sharedPaths: ['shared'],
        resolver: { agent: resolver, maxRounds: 1 },
      }),
    );
    // Read mid-run: the staging ref the status names holds both fast sub-tasks, merged and resolved.
    const mid = await waitForStatus(
      handle,
      'left and right on the integration head',
      (s) => s.workers.filter((w) => w.integrated).length === 2,
      60_000,
    );
    expect(line(mid, 'slow').state).toBe('running');
    expect(await running(hold)).toBe(true);
    const head = mid.head!;
    expect(head.ref).toMatch(/^refs\/flotilla\/.+\/integration$/);
    expect((await staging().revparse([head.ref])).trim()).toBe(head.sha);
    const merged = await staging().raw(['log', '--format=%s', head.ref]);
    expect(merged).toContain('Integrate left: rename two to left');
    expect(merged).toContain('Integrate right: rename two to right');
    expect(await staging().show([`${head.ref}:shared/names.txt`])).toBe(BOTH_NAMES);
    expect(mid.integration?.attempts.map((a) => [a.kind, a.state])).toEqual([['resolve', 'succeeded']]);
    expect(formatStatus(mid, handle.workflowId)).toContain(`head:      ${head.ref} at ${head.sha}`);
    await letGo(hold);

    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'shared/names.txt')).toBe(BOTH_NAMES);
    for (const id of ['slow', 'left', 'right']) expect(await remote.show('main', `${id}/greeting.txt`)).toBe('hello\n');
    expect(end.result?.head?.integrated).toEqual(expect.arrayContaining(['left', 'right', 'slow']));
  });
});

describe('failures', () => {
  it('a sub-task that fails once succeeds on its retry, whose prompt names the first failure', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const flaky = subTask(
      'flaky',
      `if grep -q 'This is attempt 2' "$FLOTILLA_PROMPT_FILE"; then mkdir -p "$FLOTILLA_SUBTASK_ID" && sed -n '/BEGIN UNTRUSTED/,/END UNTRUSTED/p' "$FLOTILLA_PROMPT_FILE" > flaky/told.txt && git add -A && git commit -qm flaky; else echo 'out of coffee' >&2; exit 3; fi`,
    );
    const handle = await env.start(shellRequest(remote.url, [flaky, greet('steady')]));
    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'flaky/told.txt')).toContain('the agent exited with code 3');
    expect(end.result?.workers.map((w) => [w.workerId, w.status])).toEqual(
      expect.arrayContaining([
        ['flaky', 'failed'],
        ['flaky.attempt2', 'done'],
      ]),
    );
    const s = await handle.query(statusQuery);
    expect(line(s, 'flaky')).toMatchObject({ state: 'failed', reason: 'the agent exited with code 3' });
    expect(line(s, 'flaky.attempt2')).toMatchObject({ state: 'done', attempt: 2, integrated: true });
  });

  it('onFailure: continue pushes the others, and the push gate, the status and the result say what was left out and why', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const plan = [
      greet('good'),
      subTask('broken', 'echo "no can do" >&2; exit 9'),
      subTask('after', writeAgent('after/greeting.txt', 'hi'), { dependsOn: ['broken'] }),
    ];
    const handle = await env.start(
      shellRequest(remote.url, plan, { onFailure: 'continue', limits: { retries: 0 }, ...withGates('push') }),
    );
    const gate = await waitForStatus(handle, 'the push gate', (s) => s.gate?.gate === 'push', 60_000);
    const dropped = [
      { id: 'broken', reason: 'the agent exited with code 9' },
      { id: 'after', reason: 'its dependency broken failed' },
    ];
    expect(gate.gate?.dropped).toEqual(dropped);
    expect(gate.dropped).toEqual(dropped);
    expect(line(gate, 'after')).toMatchObject({ state: 'dropped', reason: 'its dependency broken failed' });
    expect(formatStatus(gate, handle.workflowId)).toContain('  left out: after: its dependency broken failed');
    await approve(env.client, handle.workflowId, { gate: 'push', sha: gate.gate!.sha, by: 'ana' });

    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(end.result?.dropped).toEqual(dropped);
    expect(end.result?.message).toBe(
      '1 sub-task(s) integrated, 2 left out (broken, after; see dropped), tests passed, pushed to main',
    );
    expect(await remote.show('main', 'good/greeting.txt')).toBe('hello from good\n');
    expect(await remote.show('main', 'after/greeting.txt')).toBeNull();
  });

  it('onFailure: replan: a scripted planner, told what failed, adds a replacement sub-task that lands', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const replacement = { subTasks: [{ id: 'fix', prompt: 'do it right', ownedPaths: ['fix'] }] };
    const planner = shell(
      `grep -q 'sub-task "broken" failed for good: the agent exited with code 9' "$FLOTILLA_PROMPT_FILE" && printf '%s' '${JSON.stringify(replacement)}' > "$FLOTILLA_PLAN_FILE"`,
    );
    const end = await env.run(
      shellRequest(remote.url, [greet('good'), subTask('broken', 'exit 9')], {
        agent: shell(
          'mkdir -p "$FLOTILLA_SUBTASK_ID" && echo fixed > "$FLOTILLA_SUBTASK_ID/greeting.txt" && git add -A && git commit -qm fix',
        ),
        planner,
        onFailure: 'replan',
        limits: { retries: 0 },
      }),
    );
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'fix/greeting.txt')).toBe('fixed\n');
    expect(await remote.show('main', 'good/greeting.txt')).toBe('hello from good\n');
    expect(end.result?.planning).toMatchObject({ source: 'request', replans: 1 });
    expect(end.result?.dropped).toEqual([
      { id: 'broken', reason: 'the agent exited with code 9; replanned in round 1: fix instead' },
    ]);
  });

  it('onFailure: fail: what runs is cancelled, nothing is pushed, no sandbox is left', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const base = await remote.head();
    const hold = holdCommand();
    const slow = subTask('slow', `${hold}; ${writeAgent('slow/greeting.txt', 'hi')}`);
    const handle = await env.start(
      shellRequest(remote.url, [slow, subTask('broken', 'exit 9')], { limits: { retries: 0 } }),
    );
    const end = await awaitRun(handle);
    expect(end.failureType).toBe('failed');
    expect(end.failureMessage).toBe('1 of 2 workers failed: broken: the agent exited with code 9; cancelled: slow');
    expect(await remote.head()).toBe(base);
    const s = await handle.query(statusQuery);
    expect(line(s, 'slow').state).toBe('cancelled');
    expect(await processesMatching(hold)).toEqual([]);
    expect(env.sandboxesLeft()).toEqual([]);
  });
});

describe('amendments', () => {
  /** A sub-task file as `flotilla add` reads it. */
  function subTaskFile(task: object): string {
    const file = path.join(tempDir('subtask'), 'subtask.json');
    writeFileSync(file, JSON.stringify(task));
    return file;
  }

  it('add a sub-task (it lands), cancel a running one (stopped, sandbox gone, nothing pushed), refuse bad ones, schedule an overlap after the running one', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const [slowHold, victimHold] = [holdCommand(), holdCommand()];
    const plan = [
      subTask('slow', `${slowHold}; ${writeAgent('slow/greeting.txt', 'hello')}`),
      subTask('victim', `${victimHold}; ${writeAgent('victim/greeting.txt', 'hello')}`),
    ];
    const handle = await env.start(shellRequest(remote.url, plan));
    const id = handle.workflowId;
    await waitFor(
      'both agents to hold',
      async () => ((await running(slowHold)) && (await running(victimHold))) || undefined,
    );
    const cli = (...args: string[]) => flotilla(env.taskQueue, [...args, '--by', 'ana']);
    const extra = {
      id: 'extra',
      prompt: 'do extra',
      ownedPaths: ['extra'],
      agent: shell(writeAgent('extra/greeting.txt', 'hi')),
    };

    const added = await cli('add', id, subTaskFile(extra));
    expect(added).toMatchObject({ code: 0, err: '' });
    expect(added.out).toContain(`${id}: added sub-task extra; it starts as soon as a slot is free`);
    const duplicate = await cli('add', id, subTaskFile(extra));
    expect(duplicate.code).toBe(2);
    expect(duplicate.err).toContain('refused: subTask.id: duplicate id "extra" (also subTasks[2])');
    const loop = await cli('add', id, subTaskFile({ ...extra, id: 'loop', dependsOn: ['loop'] }));
    expect(loop.code).toBe(2);
    expect(loop.err).toContain('subTask.dependsOn[0]: "loop" is this sub-task itself; it cannot depend on itself');
    const overlap = { id: 'more', prompt: 'more of slow', ownedPaths: ['slow/more.txt'] };
    const more = await cli(
      'add',
      id,
      subTaskFile({ ...overlap, agent: shell(`test -f slow/greeting.txt && ${writeAgent('slow/more.txt', 'more')}`) }),
    );
    expect(more.out).toContain('added sub-task more; it waits for slow: overlapping slow/more.txt');

    const cancelled = await cli('cancel', id, '--subtask', 'victim', '--reason', 'not needed');
    expect(cancelled.code).toBe(0);
    expect(cancelled.out).toContain('cancelled sub-task victim: its agent was stopped and its sandbox destroyed');
    expect(await processesMatching(victimHold)).toEqual([]);
    expect(env.sandboxesLeft().filter((d) => d.includes('worker_victim'))).toEqual([]);
    const again = await cli('cancel', id, '--subtask', 'victim', '--reason', 'twice');
    expect(again.code).toBe(2);
    expect(again.err).toContain('sub-task victim is cancelled; nothing to cancel');
    await letGo(slowHold);

    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(await remote.show('main', 'extra/greeting.txt')).toBe('hi\n');
    expect(await remote.show('main', 'slow/more.txt')).toBe('more\n');
    expect(await remote.show('main', 'victim/greeting.txt')).toBeNull();
    const s = await handle.query(statusQuery);
    expect(s.amendments?.map((a) => [a.kind, a.subTaskId, a.by, a.note])).toEqual([
      ['add', 'extra', 'ana', undefined],
      ['add', 'more', 'ana', undefined],
      ['cancel', 'victim', 'ana', 'not needed'],
    ]);
    expect(span(line(s, 'more'))[0]).toBeGreaterThanOrEqual(span(line(s, 'slow'))[1]);
    expect(line(s, 'victim')).toMatchObject({ state: 'cancelled', reason: 'cancelled by ana: not needed' });
    expect(end.result?.dropped).toEqual([{ id: 'victim', reason: 'cancelled by ana: not needed' }]);
  });

  it('a failed sub-task retried by a person: its agent is told why and the message; what was dropped with it comes back', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const hold = holdCommand();
    const fussy = subTask(
      'fussy',
      `grep -q 'use the blue one' "$FLOTILLA_PROMPT_FILE" || exit 6; ${writeAgent('fussy/greeting.txt', 'blue')}`,
    );
    const plan = [
      subTask('slow', `${hold}; ${writeAgent('slow/greeting.txt', 'hi')}`),
      fussy,
      subTask('after', writeAgent('after/greeting.txt', 'after'), { dependsOn: ['fussy'] }),
    ];
    const handle = await env.start(shellRequest(remote.url, plan, { onFailure: 'continue', limits: { retries: 0 } }));
    await waitForStatus(handle, 'fussy to fail', (s) => line(s, 'after').state === 'dropped');
    const answer = await retrySubTask(env.client, handle.workflowId, {
      subTaskId: 'fussy',
      by: 'bo',
      message: 'use the blue one',
    });
    expect(answer).toBe('retrying sub-task fussy (attempt 2) from the integration head; after no longer dropped');
    await waitForStatus(handle, 'fussy and after to land', (s) => line(s, 'after').integrated === true, 60_000);
    await letGo(hold);
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'fussy/greeting.txt')).toBe('blue\n');
    expect(await remote.show('main', 'after/greeting.txt')).toBe('after\n');
    expect(end.result?.dropped).toEqual([]);
    expect(end.result?.amendments?.map((a) => [a.kind, a.subTaskId, a.by])).toEqual([['retry', 'fussy', 'bo']]);
  });
});

describe('flotilla continue', () => {
  it('on a run whose tests failed after three good sub-tasks: no agent starts for those three, the failing piece is fixed, one push', async () => {
    const remote = await greetingsRemote();
    const base = (await remote.head())!;
    // d greets rudely unless it is told it failed before; the tests after its merge refuse that.
    const rude = subTask(
      'd',
      `if grep -q 'which this run continues' "$FLOTILLA_PROMPT_FILE"; then w=hello; else w='go away'; fi; mkdir -p d && echo "$w" > d/greeting.txt && git add -A && git commit -qm d`,
      { dependsOn: ['a', 'b', 'c'] },
    );
    const plan = [greet('a'), greet('b'), greet('c'), rude];
    const failed = await env.run(greetingsRequest(remote.url, plan, { limits: { retries: 0, testEachMerge: true } }));
    expect(failed.failureType).toBe('tests-failed');
    expect(failed.failureMessage).toContain('d: the tests failed after its merge: the test command exited with code 1');
    expect(await remote.head()).toBe(base);

    const started = await flotilla(env.taskQueue, ['continue', failed.workflowId, '--json']);
    expect(started.code).toBe(0);
    const next = (JSON.parse(started.out) as { workflowId: string }).workflowId;
    env.runs.push(next);
    const end = await awaitRun(env.client.workflow.getHandle(next));
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(end.result?.continues).toBe(failed.workflowId);
    for (const id of ['a', 'b', 'c'])
      expect(await remote.show('main', `${id}/greeting.txt`)).toBe(`hello from ${id}\n`);
    expect(await remote.show('main', 'd/greeting.txt')).toBe('hello\n');

    // Agent starts: the new run started one sub-task workflow, d's, and only d's agent ran.
    const children = await subTaskChildren(env.client, next);
    expect(children).toEqual([`${next}/d`]);
    expect(end.result?.workers.filter((w) => w.runs > 0).map((w) => w.workerId)).toEqual(['d']);
    // One push: each sub-task's merge is on main once.
    const log = await remote.log('main', base);
    expect(log.filter((l) => l.startsWith('Integrate')).sort()).toEqual([
      'Integrate a: do a',
      'Integrate b: do b',
      'Integrate c: do c',
      'Integrate d: do d',
    ]);
    // Both runs name each other (the old one through the visibility store, as soon as it has indexed the new one).
    await waitFor('the failed run to name the run that continued it', async () => {
      const status = await flotilla(env.taskQueue, ['status', failed.workflowId]);
      return status.out.includes(`continued by: ${next}`) || undefined;
    });
    const s = await env.client.workflow.getHandle(next).query(statusQuery);
    expect(s.continues).toBe(failed.workflowId);
    expect(line(s, 'a')).toMatchObject({ state: 'done', integrated: true, reusedFrom: failed.workflowId });
  });

  it('is refused, naming the reason, for a run that pushed', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const pushed = await env.run(shellRequest(remote.url, [greet('one')]));
    expect(pushed.result?.outcome).toBe('pushed');
    const refused = await flotilla(env.taskQueue, ['continue', pushed.workflowId]);
    expect(refused.code).toBe(2);
    expect(refused.err).toContain(
      `cannot continue: run ${pushed.workflowId} ended pushed; there is nothing to continue`,
    );
  });
});

describeReplay(() => env, 10);
