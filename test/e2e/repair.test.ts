/**
 * When the merge breaks: conflict resolution, the redone sub-task, repair rounds and hidden
 * oracle tests, end to end with scripted shell agents, real git and the suite's dev server.
 */
import { simpleGit } from 'simple-git';
import { beforeAll, describe, expect, it } from 'vitest';
import type { LeaderRequestInput } from '../../src/contracts/request';
import { statusQuery } from '../../src/contracts/messages';
import { awaitRun } from '../../src/client/index';
import { TestEnv } from '../support/env';
import { BOTH_NAMES, greetingsRemote, greetingsRequest, renamer } from '../support/greetings';
import { makeRemote } from '../support/remotes';
import { replayFinishedRuns } from '../support/replay';
import { greet, shell, subTask, writeAgent } from '../support/requests';
import { historyHits, waitForStatus } from '../support/runs';
import { flotilla } from '../support/processes';

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

/** left and right change the same line; one at a time, so that left is merged first and right conflicts. */
const conflicting = (url: string, fields: Partial<LeaderRequestInput>) =>
  greetingsRequest(url, [renamer('left'), renamer('right')], {
    sharedPaths: ['shared'],
    ...fields,
    limits: { maxParallel: 1, ...fields.limits },
  });

/** A resolver that stages the conflicted file as it is, markers and all. */
const LAZY_RESOLVER = shell('cat "$FLOTILLA_PROMPT_FILE"; git add -A');

describe('conflicts', () => {
  it('a resolver reconciles two workers that changed the same lines; both intents are pushed', async () => {
    const remote = await greetingsRemote();
    const resolver = shell(
      `cat "$FLOTILLA_PROMPT_FILE"; echo; printf '${BOTH_NAMES.replace(/\n/g, '\\n')}' > shared/names.txt; echo '::flotilla {"costUsd": 0.1}'`,
    );
    const end = await env.run(conflicting(remote.url, { resolver: { agent: resolver, maxRounds: 2 } }));
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'shared/names.txt')).toBe(BOTH_NAMES);
    expect(await remote.show('main', 'left/greeting.txt')).toBe('hello\n');
    expect(await remote.show('main', 'right/greeting.txt')).toBe('hello\n');
    const [attempt, ...more] = end.result!.integration!.attempts;
    expect(more).toEqual([]);
    expect(attempt).toMatchObject({
      kind: 'resolve',
      workerId: 'right',
      round: 1,
      state: 'succeeded',
      files: ['shared/names.txt'],
      costUsd: 0.1,
    });
    expect(attempt.diffstat).toContain('shared/names.txt');
    expect(end.result?.integration?.costUsd).toBe(0.1);
    // The resolver saw the hunks, fenced as data, and the rules.
    const prompt = env.artifact(attempt.logRef!);
    expect(prompt).toMatch(/BEGIN UNTRUSTED DATA [0-9a-f]{16}: the conflicting hunks/);
    expect(prompt).toMatch(/<<<<<<< [0-9a-f]{40}\n.*left\n.*=======\n.*right\n.*>>>>>>> [0-9a-f]{40}/);
    expect(prompt).toMatch(/END UNTRUSTED DATA [0-9a-f]{16}/);
    expect(prompt).toContain('Do not commit');
    expect(prompt).toContain('Verify your work by running: git diff --check, then ./check.sh');
    expect(await remote.log('main', end.result!.baseSha)).toContain('Integrate right: rename two to right');
    expect(env.sandboxesLeft()).toEqual([]);
  });

  it('a resolver that leaves a conflict marker: the sub-task is redone on the integrated tree (its next attempt) and the run pushes', async () => {
    const remote = await greetingsRemote();
    const end = await env.run(conflicting(remote.url, { resolver: { agent: LAZY_RESOLVER, maxRounds: 1 } }));
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'shared/names.txt')).toBe(BOTH_NAMES);
    expect(await remote.show('main', 'right/greeting.txt')).toBe('hello\n');
    const attempts = end.result!.integration!.attempts;
    expect(attempts.map((a) => [a.kind, a.workerId, a.state])).toEqual([
      ['resolve', 'right', 'failed'],
      ['redispatch', 'right', 'succeeded'],
    ]);
    expect(attempts[0].reason).toBe(
      'conflict markers left at shared/names.txt:2, shared/names.txt:4, shared/names.txt:6',
    );
    // Every attempt, the redone one included, is in the result; the one whose commits conflicted failed.
    expect(end.result?.workers.map((w) => [w.workerId, w.status])).toEqual([
      ['left', 'done'],
      ['right', 'failed'],
      ['right.attempt2', 'done'],
    ]);
    expect(attempts[1].workflowId).toBe(`${end.workflowId}/right.attempt2`);
    // The redone sub-task started from the integrated tree: its commits are on top of left's merge.
    const redo = await env.client.workflow.getHandle(attempts[1].workflowId!).result();
    expect(redo).toMatchObject({ workerId: 'right.attempt2', status: 'done', commits: 2, filesChanged: 2 });
    // The status query shows the same attempts.
    const status = await env.client.workflow.getHandle(end.workflowId).query(statusQuery);
    expect(status.integration?.attempts).toEqual(attempts);
    expect(env.sandboxesLeft()).toEqual([]);
  });

  it('a redone sub-task is a worker in the status: its question suspends it and `flotilla resume` answers it', async () => {
    const remote = await greetingsRemote();
    // Redone (on a tree where "left" is there), it first asks whether to keep both names.
    const right = renamer('right');
    right.agent.command =
      `if [ -z "\${FLOTILLA_RESUME_MESSAGE:-}" ] && grep -qx left shared/names.txt; then ` +
      `echo '::flotilla {"question": "keep both names?", "costUsd": 0.05}'; exit 0; fi; ${right.agent.command}`;
    const handle = await env.start(
      greetingsRequest(remote.url, [renamer('left'), right], {
        sharedPaths: ['shared'],
        resolver: { agent: LAZY_RESOLVER, maxRounds: 1 },
        limits: { maxParallel: 1 },
      }),
    );
    const asking = await waitForStatus(handle, 'the redone worker to ask', (s) =>
      s.workers.some((w) => w.id === 'right.attempt2' && w.state === 'suspended'),
    );
    expect(asking.workers.find((w) => w.id === 'right.attempt2')).toMatchObject({
      question: 'keep both names?',
      costUsd: 0.05,
    });
    expect(asking.integration?.attempts.at(-1)).toMatchObject({
      kind: 'redispatch',
      workerId: 'right',
      state: 'running',
    });

    const r = await flotilla(env.taskQueue, [
      'resume',
      handle.workflowId,
      '--subtask',
      'right.attempt2',
      '--message',
      'yes',
    ]);
    expect(r.err).toBe('');
    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(await remote.show('main', 'shared/names.txt')).toBe(BOTH_NAMES);
    const status = await handle.query(statusQuery);
    expect(status.workers.map((w) => [w.id, w.state])).toEqual([
      ['left', 'done'],
      ['right', 'failed'],
      ['right.attempt2', 'done'],
    ]);
    // Its cost is counted once: with the workers, not again with the integration.
    expect(end.result?.costUsd).toBe(0.05);
    expect(end.result?.integration?.costUsd).toBe(0);
    expect(end.result?.integration?.attempts.at(-1)).toMatchObject({
      kind: 'redispatch',
      state: 'succeeded',
      costUsd: 0.05,
    });
    expect(env.sandboxesLeft()).toEqual([]);
  });

  it("no redo starts once the run's budget is spent", async () => {
    const remote = await greetingsRemote();
    const base = await remote.head();
    const pricey = shell(`git add -A; echo '::flotilla {"costUsd": 0.2}'`);
    const end = await env.run(
      conflicting(remote.url, { resolver: { agent: pricey, maxRounds: 1 }, limits: { runBudgetUsd: 0.2 } }),
    );
    expect(end.failureType).toBe('conflict');
    expect(end.failureMessage).toContain(
      "then redoing right on the integrated tree (not started: the run's budget of $0.20 is spent ($0.20))",
    );
    const status = await env.client.workflow.getHandle(end.workflowId).query(statusQuery);
    expect(status.workers.find((w) => w.id === 'right.attempt2')).toMatchObject({ state: 'failed', costUsd: 0 });
    expect(await remote.head()).toBe(base);
    expect(env.sandboxesLeft()).toEqual([]);
  });

  it('resolver and redone sub-task both fail: a conflict report names workers, files and what was tried; nothing is pushed', async () => {
    const remote = await greetingsRemote();
    const base = await remote.head();
    const end = await env.run(
      greetingsRequest(remote.url, [renamer('left'), renamer('right', 'echo "cannot redo this" >&2; exit 3')], {
        sharedPaths: ['shared'],
        limits: { maxParallel: 1 },
        // Round 2 commits the markers itself: the host takes only the tree, and checks it the same.
        resolver: {
          agent: shell(
            `if grep -q 'This is round 2 of' "$FLOTILLA_PROMPT_FILE"; then git commit -qam resolved; else echo >> README.md; fi`,
          ),
          maxRounds: 2,
        },
      }),
    );
    expect(end.failureType).toBe('conflict');
    expect(end.result?.conflict).toEqual({ workerId: 'right', conflictsWith: ['left'], files: ['shared/names.txt'] });
    const markers = 'conflict markers left at shared/names.txt:2, shared/names.txt:4, shared/names.txt:6';
    expect(end.failureMessage).toBe(
      `1 of 2 workers failed: right: worker right conflicts with left in shared/names.txt; tried 2 resolver round(s) (last: ${markers}), ` +
        'then redoing right on the integrated tree (the agent exited with code 3)',
    );
    expect(end.result!.integration!.attempts.map((a) => [a.kind, a.round, a.state, a.reason])).toEqual([
      ['resolve', 1, 'failed', `${markers}; changed paths it may not change: README.md`],
      ['resolve', 2, 'failed', markers],
      ['redispatch', 1, 'failed', 'the agent exited with code 3'],
    ]);
    expect(await remote.head()).toBe(base);
    expect(env.sandboxesLeft()).toEqual([]);
  });
});

describe('repair', () => {
  /** Fixes grumpy's greeting in round 2; round 1 gets it wrong. Prints its prompt and a cost. */
  const lateRepair = shell(
    `cat "$FLOTILLA_PROMPT_FILE"; echo; echo '::flotilla {"costUsd": 0.25}'
if grep -q 'This is round 2 of' "$FLOTILLA_PROMPT_FILE"; then echo hello > grumpy/greeting.txt; else echo 'still grumpy' > grumpy/greeting.txt; fi`,
  );

  it('tests fail on the merged tree; the repair agent fixes them in round 2; both rounds are reported', async () => {
    const remote = await greetingsRemote();
    const end = await env.run(
      greetingsRequest(remote.url, [greet('alpha'), subTask('grumpy', writeAgent('grumpy/greeting.txt', 'go away'))], {
        repair: { agent: lateRepair, maxRounds: 3, budgetUsd: 5 },
      }),
    );
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'grumpy/greeting.txt')).toBe('hello\n');
    expect(end.result?.test).toMatchObject({ exitCode: 0 });
    expect(end.result?.test?.tail).toContain('all greetings ok');
    const [first, second, ...more] = end.result!.integration!.attempts;
    expect(more).toEqual([]);
    expect(first).toMatchObject({
      kind: 'repair',
      round: 1,
      state: 'failed',
      costUsd: 0.25,
      reason: 'the test command still exited with code 1',
    });
    expect(first.failed).toContain('FAIL: grumpy/greeting.txt does not greet');
    expect(first.diffstat).toMatch(/grumpy\/greeting\.txt \| 2 \+-/);
    expect(second).toMatchObject({ kind: 'repair', round: 2, state: 'succeeded', costUsd: 0.25 });
    expect(second.failed).toContain('FAIL: grumpy/greeting.txt does not greet');
    expect(second.diffstat).toMatch(/grumpy\/greeting\.txt \| 2 \+-/);
    expect(end.result?.integration?.costUsd).toBe(0.5);
    const prompt = env.artifact(first.logRef!);
    expect(prompt).toMatch(/BEGIN UNTRUSTED DATA [0-9a-f]{16}: the output of the failing command \(exit 1\)/);
    expect(prompt).toContain('FAIL: grumpy/greeting.txt does not greet');
    expect(prompt).toContain('Change only these paths: alpha, grumpy.');
    const log = await remote.log('main', end.result!.baseSha);
    expect(log.filter((s) => s.startsWith('Repair round'))).toEqual([
      'Repair round 2: make the tests pass',
      'Repair round 1: make the tests pass',
    ]);
  });

  it('repair rounds run out: every round is reported, a question or an edit to the test script fails its round, nothing is pushed', async () => {
    const remote = await greetingsRemote();
    const base = await remote.head();
    const cheat = shell(
      `if grep -q 'This is round 2 of' "$FLOTILLA_PROMPT_FILE"; then printf '#!/bin/bash\\nexit 0\\n' > check.sh; ` +
        `else echo hello > grumpy/greeting.txt; echo '::flotilla {"question": "may I change the greeting?"}'; fi`,
    );
    const end = await env.run(
      greetingsRequest(remote.url, [subTask('grumpy', writeAgent('grumpy/greeting.txt', 'go away'))], {
        repair: { agent: cheat, maxRounds: 2 },
      }),
    );
    expect(end.failureType).toBe('tests-failed');
    expect(end.failureMessage).toBe(
      'the test command exited with code 1 on the integrated tree; 2 repair round(s) did not fix it',
    );
    const attempts = end.result!.integration!.attempts;
    expect(attempts.map((a) => [a.kind, a.round, a.state, a.reason])).toEqual([
      ['repair', 1, 'failed', 'the repair agent stopped to ask: may I change the greeting?'],
      ['repair', 2, 'failed', 'changed paths it may not change: check.sh'],
    ]);
    expect(attempts[0].failed).toContain('FAIL: grumpy/greeting.txt does not greet');
    expect(attempts[1].failed).toContain('FAIL: grumpy/greeting.txt does not greet');
    expect(attempts[1].diffstat).toBeUndefined();
    expect(end.result?.test?.exitCode).toBe(1);
    expect(await remote.head()).toBe(base);
    expect(env.sandboxesLeft()).toEqual([]);
  });
  it('a repair budget ends the rounds once it is spent', async () => {
    const remote = await greetingsRemote();
    const spender = shell(`echo '::flotilla {"costUsd": 0.6}'; echo meh > grumpy/greeting.txt`);
    const end = await env.run(
      greetingsRequest(remote.url, [subTask('grumpy', writeAgent('grumpy/greeting.txt', 'go away'))], {
        repair: { agent: spender, maxRounds: 5, budgetUsd: 1 },
      }),
    );
    expect(end.failureType).toBe('tests-failed');
    expect(end.failureMessage).toBe(
      'the test command exited with code 1 on the integrated tree; the repair budget of $1.00 is spent after 2 round(s)',
    );
    expect(end.result!.integration!.attempts.map((a) => [a.round, a.state, a.reason, a.costUsd])).toEqual([
      [1, 'failed', 'the test command still exited with code 1', 0.6],
      [2, 'failed', 'the repair agent was stopped at its budget', 0.6],
    ]);
    expect(end.result?.integration?.costUsd).toBe(1.2);
  });
});

describe('oracle tests', () => {
  const SECRET = 'ORACLE-SECRET-7f3a91';
  /** Where the hidden test sits; no request, command or report may name it. */
  const ORACLE_PATH = 'qa7f3a/acceptance-7f3a.check.sh';
  const ORACLE = `#!/bin/bash
# ${SECRET}
grep -qx 'hello, world' alpha/greeting.txt || { echo "ORACLE FAIL: alpha must say exactly: hello, world"; exit 1; }
echo "oracle ok"
`;
  /** Runs every *.check.sh it finds: the hidden tests are picked up without being named. */
  const RUN_ALL = `./check.sh && for t in $(find . -name '*.check.sh' -not -path './.git/*'); do bash "$t" || exit 1; done`;

  it('are hidden from workers and the repair agent, gate the push, and are never committed', async () => {
    const remote = await greetingsRemote();
    const hidden = await makeRemote({ [ORACLE_PATH]: ORACLE });
    // Split, so that the agents' own commands do not carry the secret into history.
    const secret = `"${SECRET.slice(0, 6)}""${SECRET.slice(6)}"`;
    const probe = `{ find . -name '*.check.sh' -not -path './.git/*'; grep -rl ${secret} . /tmp; git log --all -p | grep -c ${secret}; }`;
    const worker = subTask('alpha', `${probe} 2>&1; ${writeAgent('alpha/greeting.txt', 'hello')}`);
    const repair = shell(
      `cat "$FLOTILLA_PROMPT_FILE"; ${probe} > alpha/probe.txt 2>&1; echo 'hello, world' > alpha/greeting.txt`,
    );
    const handle = await env.start(
      greetingsRequest(remote.url, [worker], {
        testCmd: RUN_ALL,
        oracle: { repo: hidden.url, ref: 'main' },
        repair: { agent: repair, maxRounds: 2 },
      }),
    );
    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    const result = end.result!;
    expect(result.outcome).toBe('pushed');
    // The oracle failed the first test run although the visible tests passed, and passed the last;
    // the output of both is withheld from the report (the log on the host has it, redacted).
    const [round, ...more] = result.integration!.attempts;
    expect(more).toEqual([]);
    expect(round).toMatchObject({ kind: 'repair', round: 1, state: 'succeeded' });
    expect(round.failed).toContain('hidden tests took part in this run, so its output is withheld');
    expect(round.failed).not.toContain('ORACLE FAIL');
    expect(result.test?.tail).toContain('hidden tests took part in this run, so its output is withheld');
    expect(env.artifact(result.test!.logRef)).toContain('oracle ok');
    // The repair agent was told only that hidden tests fail.
    const prompt = env.artifact(round.logRef!);
    expect(prompt).toContain('hidden tests that gate the result fail on it');
    expect(prompt).not.toContain('ORACLE FAIL');
    expect(prompt).not.toContain('hello, world');
    // Neither the worker nor the repair agent found the file, its contents or even its name.
    expect(result.workers[0].tail).not.toContain('check.sh');
    const seen = (await remote.show('main', 'alpha/probe.txt'))!;
    expect(seen).not.toContain(SECRET);
    expect(seen).not.toContain('acceptance');
    expect(seen.trim().endsWith('0')).toBe(true);
    // Pushed without it, in the tree and in every commit.
    expect(await remote.show('main', 'alpha/greeting.txt')).toBe('hello, world\n');
    expect((await remote.files()).filter((f) => f.startsWith('qa7f3a'))).toEqual([]);
    expect(await simpleGit(remote.url).raw(['log', '--all', '--full-history', '--format=%H', '--', 'qa7f3a'])).toBe('');
    // Neither its contents nor its name are anywhere in the status, the result or history.
    const status = await handle.query(statusQuery);
    for (const needle of [SECRET, 'acceptance-7f3a', 'qa7f3a', 'ORACLE FAIL']) {
      expect(JSON.stringify(status)).not.toContain(needle);
      expect(JSON.stringify(result)).not.toContain(needle);
      expect(historyHits(await handle.fetchHistory(), needle)).toEqual([]);
      expect(
        historyHits(await env.client.workflow.getHandle(`${handle.workflowId}/alpha`).fetchHistory(), needle),
      ).toEqual([]);
    }
    expect(env.sandboxesLeft()).toEqual([]);
  });
});

describe('oracle source', () => {
  it('hidden tests that cannot be fetched end the run before any worker starts, saying which setting', async () => {
    const remote = await greetingsRemote();
    const base = await remote.head();
    const end = await env.run(
      greetingsRequest(remote.url, [greet('alpha')], { oracle: { repo: remote.url, ref: 'no-such-branch' } }),
    );
    expect(end.failureType).toBe('failed');
    expect(end.failureMessage).toMatch(
      /^cannot fetch the hidden tests \(oracle\.ref no-such-branch of oracle\.repo\): /,
    );
    const status = await env.client.workflow.getHandle(end.workflowId).query(statusQuery);
    expect(status.workers.map((w) => w.state)).toEqual(['queued']);
    expect(await remote.head()).toBe(base);
  });

  it('a tree with a file of its own at a hidden test path fails the run, counting it without naming it', async () => {
    const remote = await greetingsRemote();
    const hidden = await makeRemote({ 'qa/accept.check.sh': 'exit 0\n' });
    const base = await remote.head();
    const squatter = subTask('qa', writeAgent('qa/accept.check.sh', 'exit 0'));
    const end = await env.run(greetingsRequest(remote.url, [squatter], { oracle: { repo: hidden.url, ref: 'main' } }));
    expect(end.failureType).toBe('failed');
    expect(end.failureMessage).toBe(
      'the integrated tree has 1 file(s) of its own at hidden test paths; nothing is pushed',
    );
    expect(await remote.head()).toBe(base);
    expect(env.sandboxesLeft()).toEqual([]);
  });
});

describe('determinism', () => {
  it('the histories of these runs and of their workers, redone ones included, replay', async () => {
    const { replayed, errors } = await replayFinishedRuns(env);
    expect(errors).toEqual([]);
    // 11 leaders; 19 workers, of which 3 redone (and one not started); the keepers of the
    // integration's sandboxes of the 10 runs that made one.
    expect(replayed).toBe(40);
  });
});
