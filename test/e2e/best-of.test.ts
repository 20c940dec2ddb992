/**
 * Best of N (`subTasks[].attempts`): candidates run side by side, each is tried on the
 * integration head with the tests (hidden ones included), and the passing one `select` prefers
 * is integrated while the others stay at staging refs. A real dev server, real git, real
 * sandboxes and shell agents; each test asserts the pushed tree and what the status, the push
 * gate and the result say.
 */
import path from 'node:path';
import { simpleGit } from 'simple-git';
import { beforeAll, describe, expect, it } from 'vitest';
import { formatRunEnd } from '../../src/cli/format/run-end';
import { formatStatus } from '../../src/cli/format/status';
import { approve, awaitRun, cancelSubTask } from '../../src/client/index';
import { statusQuery } from '../../src/contracts/messages';
import type { CandidateResult } from '../../src/contracts/reports';
import { TestEnv } from '../support/env';
import { makeRemote } from '../support/remotes';
import { holdCommand, processesMatching, processesRunning, waitFor } from '../support/processes';
import { greet, shell, shellRequest, subTask, withGates, writeAgent } from '../support/requests';
import { waitForStatus } from '../support/runs';

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

const staging = () => simpleGit(path.join(env.dataDir, 'staging.git'));
/** A shell agent that reports `usd` spent, then runs `command`. */
const costing = (usd: number, command: string) => shell(`echo '::flotilla {"costUsd": ${usd}}'; ${command}`);
const row = (c: CandidateResult) => [c.id, c.outcome, c.selected ?? false, c.linesChanged];

describe('best of N', () => {
  it('best of 3 (failing, large, small) integrates the small one, keeps the others at refs, and lists all three', async () => {
    const remote = await makeRemote({ 'README.md': '# answers\n' });
    const hidden = await makeRemote({ 'qa/answer.check.sh': 'grep -qx 42 lib/answer.txt\n' });
    const failing = shell(writeAgent('lib/answer.txt', '41'));
    const large = shell(`mkdir -p lib && seq 1 40 > lib/extra.txt && ${writeAgent('lib/answer.txt', '42')}`);
    const small = shell(writeAgent('lib/answer.txt', '42'));
    const lib = { ...subTask('lib', 'exit 9'), attempts: 3, agents: [failing, large, small] };
    // Starts from the head that holds the winner: the answer, and nothing of the large candidate.
    const user = subTask(
      'user',
      `grep -qx 42 lib/answer.txt && ! test -e lib/extra.txt && ${writeAgent('user/ok.txt', 'ok')}`,
      {
        dependsOn: ['lib'],
      },
    );
    const handle = await env.start(
      shellRequest(remote.url, [lib, user], {
        testCmd: `for t in $(find . -name '*.check.sh' -not -path './.git/*'); do bash "$t" || exit 1; done`,
        oracle: { repo: hidden.url, ref: 'main' },
        ...withGates('push'),
      }),
    );
    const gate = await waitForStatus(handle, 'the push gate', (s) => s.gate?.gate === 'push');
    const expected = [
      ['lib.candidate1', 'failed', false, 1],
      ['lib.candidate2', 'passed', false, 41],
      ['lib.candidate3', 'passed', true, 1],
    ];
    expect(gate.gate?.candidates?.map(row)).toEqual(expected);
    expect(gate.candidates?.[0].reason).toMatch(/the test command exited with code 1 on the integration head/);
    const text = formatStatus(gate, handle.workflowId);
    expect(text).toMatch(
      /^ {4}lib\.candidate3 +selected +shell, \$0\.00, 1 line\(s\) at refs\/flotilla\/.*\/candidates\/lib\.candidate3$/m,
    );
    expect(text).toMatch(/^ {2}lib\.candidate1 +failed +shell, .* — the test command exited with code 1/m);
    // Three candidate lines and the sub-task's own, which took the winner's commits and is integrated.
    expect(gate.workers.map((w) => [w.id, w.state, w.candidate])).toEqual([
      ['lib', 'done', undefined],
      ['user', 'done', undefined],
      ['lib.candidate1', 'done', 1],
      ['lib.candidate2', 'done', 2],
      ['lib.candidate3', 'done', 3],
    ]);
    await approve(env.client, handle.workflowId, { gate: 'push', sha: gate.gate!.sha!, by: 'ana' });

    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(await remote.show('main', 'lib/answer.txt')).toBe('42\n');
    expect(await remote.show('main', 'user/ok.txt')).toBe('ok\n');
    expect(await remote.show('main', 'lib/extra.txt')).toBeNull();
    const result = end.result!;
    expect(result.candidates?.map(row)).toEqual(expected);
    expect(result.workers.map((w) => [w.workerId, w.status]).sort()).toEqual([
      ['lib.candidate1', 'done'],
      ['lib.candidate2', 'done'],
      ['lib.candidate3', 'done'],
      ['user', 'done'],
    ]);
    expect(formatRunEnd(end)).toMatch(
      /^ {4}lib\.candidate2 +passed +shell, \$0\.00, 41 line\(s\) at refs\/flotilla\//m,
    );
    // The losers stay in the staging repository, each merged onto the head it was tried on.
    const kept = result.candidates!.find((c) => c.id === 'lib.candidate2')!;
    expect(await staging().show([`${kept.ref!}:lib/extra.txt`])).toContain('40');
    expect((await handle.query(statusQuery)).candidates).toEqual(result.candidates);
    expect(env.sandboxesLeft()).toEqual([]);
  });

  it('select: cheapest integrates the cheaper passing candidate, though larger; the budget counts every candidate', async () => {
    const remote = await makeRemote({ 'README.md': '# costs\n' });
    const dear = costing(0.3, writeAgent('lib/answer.txt', '42'));
    const cheap = costing(0.01, `mkdir -p lib && seq 1 9 > lib/extra.txt && ${writeAgent('lib/answer.txt', '42')}`);
    const lib = { ...subTask('lib', 'exit 9'), attempts: 2, agents: [dear, cheap], select: 'cheapest' as const };
    const end = await awaitRun(
      await env.start(shellRequest(remote.url, [lib], { testCmd: 'grep -qx 42 lib/answer.txt' })),
    );
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.candidates?.map((c) => [c.id, c.selected ?? false, c.costUsd])).toEqual([
      ['lib.candidate1', false, 0.3],
      ['lib.candidate2', true, 0.01],
    ]);
    expect(await remote.show('main', 'lib/extra.txt')).toContain('9');
    expect(end.result?.costUsd).toBeCloseTo(0.31);
  });

  it('none passing fails the sub-task, naming each candidate and why', async () => {
    const remote = await makeRemote({ 'README.md': '# none\n' });
    const lib = { ...subTask('lib', writeAgent('lib/answer.txt', '41')), attempts: 2, agents: [shell('exit 3')] };
    const end = await awaitRun(
      await env.start(
        shellRequest(remote.url, [lib], { testCmd: 'grep -qx 42 lib/answer.txt', limits: { retries: 0 } }),
      ),
    );
    expect(end.failureMessage).toMatch(
      /lib: none of its 2 candidates passed \(lib\.candidate1: .*; lib\.candidate2: the test command exited with code 1 on the integration head\)/,
    );
    expect(end.result?.candidates?.map((c) => [c.id, c.outcome])).toEqual([
      ['lib.candidate1', 'failed'],
      ['lib.candidate2', 'failed'],
    ]);
  });

  it('candidates take a maxParallel slot each, and cancelling the sub-task stops every candidate', async () => {
    const remote = await makeRemote({ 'README.md': '# slots\n' });
    const hold = holdCommand();
    const lib = { ...subTask('lib', `${hold}; ${writeAgent('lib/answer.txt', '42')}`), attempts: 2 };
    const handle = await env.start(shellRequest(remote.url, [lib, greet('other')], { limits: { maxParallel: 2 } }));
    const both = await waitForStatus(
      handle,
      'both candidates to run',
      (s) => s.workers.filter((w) => w.candidate !== undefined && w.state === 'running').length === 2,
    );
    expect(both.workers.find((w) => w.id === 'other')).toMatchObject({
      state: 'queued',
      waits: 'waits for a free slot',
    });
    await waitFor('both agents to hold', async () => (await processesRunning(hold)).length === 2 || undefined);
    await cancelSubTask(env.client, handle.workflowId, { subTaskId: 'lib', by: 'ana', reason: 'not needed' });
    expect(await processesMatching(hold)).toEqual([]);

    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(await remote.show('main', 'other/greeting.txt')).toBe('hello from other\n');
    expect(await remote.show('main', 'lib/answer.txt')).toBeNull();
    const s = await handle.query(statusQuery);
    expect(s.workers.filter((w) => w.candidate !== undefined).map((w) => [w.id, w.state])).toEqual([
      ['lib.candidate1', 'cancelled'],
      ['lib.candidate2', 'cancelled'],
    ]);
    expect(s.candidates?.map((c) => [c.id, c.outcome, c.reason])).toEqual([
      ['lib.candidate1', 'failed', 'cancelled'],
      ['lib.candidate2', 'failed', 'cancelled'],
    ]);
    expect(env.sandboxesLeft()).toEqual([]);
  });
});
