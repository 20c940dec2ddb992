/**
 * Checks after the push (land: pr with land.checks), against the GitHub double, whose CI looks at
 * what was pushed, and a real git remote, with shell agents in real sandboxes: a failing required
 * check starts a CI-fix round whose fix is integrated, tested and pushed to the PR's branch, and
 * the check passing then ends the run; a check attributed as external is shown and starts no
 * other round; a mapping that leaves a check out, and a hostile mapping file (a symlink, a FIFO,
 * a huge file), are refused with a reason and nothing is pushed.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { awaitRun } from '../../src/client/index';
import { releaseAtEnd } from '../support/cleanup';
import { TestEnv } from '../support/env';
import { GitHubDouble } from '../support/github-double';
import { makeRemote } from '../support/remotes';
import { describeReplay } from '../support/replay';
import { shell, shellRequest, subTask } from '../support/requests';
import { waitForStatus } from '../support/runs';

const TOKEN = `ghp_e2e_${Math.random().toString(36).slice(2)}_checks_token`;

/**
 * A remote, and a GitHub double whose branches are the remote's and whose CI runs two checks on
 * each commit: ci/test passes once one/fixed.txt exists; ci/deploy (when `deploy`) always fails.
 * main requires both.
 */
async function forgeWithCi({ deploy = false } = {}) {
  const remote = await makeRemote({ 'README.md': 'x\n' });
  const double = await GitHubDouble.start({ token: TOKEN, branchSha: (b) => remote.head(b) });
  double.protection.set('main', deploy ? ['ci/test', 'ci/deploy'] : ['ci/test']);
  double.ci = async (sha) => {
    const fixed = (await remote.show(sha, 'one/fixed.txt')) !== null;
    return {
      checkRuns: [
        {
          name: 'ci/test',
          status: 'completed',
          conclusion: fixed ? 'success' : 'failure',
          summary: fixed ? 'all good' : 'FAIL: one/fixed.txt is missing',
          details_url: `${double.url}/acme/widgets/runs/1`,
        },
      ],
      statuses: deploy ? [{ context: 'ci/deploy', state: 'error', description: 'the deploy runner is down' }] : [],
    };
  };
  Object.assign(process.env, { FLOTILLA_FORGE_TOKEN: TOKEN, FLOTILLA_GIT_TOKEN_HOSTS: double.host });
  releaseAtEnd(() => {
    delete process.env.FLOTILLA_FORGE_TOKEN;
    delete process.env.FLOTILLA_GIT_TOKEN_HOSTS;
  });
  return { remote, double };
}

/**
 * Sub-task one: greets; in a CI-fix round (its prompt lists [check] lines) runs `fix`, whose
 * $FLOTILLA_CI_FIX_FILE is where the mapping goes.
 */
const fixer = (fix: string) =>
  subTask(
    'one',
    `mkdir -p one && if printf '%s\\n' "$FLOTILLA_PROMPT" | grep -q '^\\[check\\] '; then ${fix}; else echo hello > one/greeting.txt && git add -A && git commit -qm one; fi`,
  );

/** Fixes ci/test (the file holds what the agent was told of the check) and maps it to the fix. */
const FIX =
  `printf '%s\\n' "$FLOTILLA_PROMPT" | grep -A1 '^\\[check\\] "ci/test"' > one/fixed.txt && git add -A && git commit -qm fix` +
  ` && printf '%s' '{"ci/test": {"fix": "added one/fixed.txt"}}' > "$FLOTILLA_CI_FIX_FILE"`;

const checksRequest = (url: string, double: GitHubDouble, fix: string, checks: object = {}) =>
  shellRequest(url, [fixer(fix)], {
    forge: double.forge,
    land: { kind: 'pr', checks: { pollSeconds: 1, timeoutMinutes: 2, ...checks } },
  });

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

describe('checks after the push', () => {
  it('a failing required check starts a CI-fix round whose fix is pushed to the PR; the check passing ends the run', async () => {
    const { remote, double } = await forgeWithCi();
    const end = await awaitRun(await env.start(checksRequest(remote.url, double, FIX)));
    expect(end.failureMessage).toBeUndefined();
    const result = end.result!;
    expect(result.outcome).toBe('pr-opened');
    const branch = result.targetRef;
    const checks = result.checks!;
    expect(checks.rounds).toHaveLength(1);
    const [round] = checks.rounds;
    expect(round).toMatchObject({
      round: 1,
      checks: ['ci/test'],
      subTaskId: 'one',
      attemptId: 'one.attempt2',
      outcome: 'pushed',
      mapping: { 'ci/test': { fix: 'added one/fixed.txt' } },
    });
    // The round's commit was tested and pushed on top of the first push, to the PR's branch.
    expect(round.pushedSha).toBe(await remote.head(branch));
    expect(round.sha).not.toBe(round.pushedSha);
    expect(checks.headSha).toBe(round.pushedSha);
    expect(result.pushedSha).toBe(round.pushedSha);
    // The agent was told the check's name and log excerpt.
    expect(await remote.show(branch, 'one/fixed.txt')).toBe(
      '[check] "ci/test": failure (' + double.url + '/acme/widgets/runs/1)\nFAIL: one/fixed.txt is missing\n',
    );
    expect(checks.checks).toEqual([
      expect.objectContaining({ name: 'ci/test', conclusion: 'success', passed: true, required: true }),
    ]);
    expect(checks.ended).toBe('passed');
    expect(result.message).toContain('checks: 1 of 1 passed, 1 CI-fix round(s) (passed)');
    // One PR, whose body shows the checks on the last push and the round.
    expect(double.pulls).toHaveLength(1);
    const body = double.pulls[0].body!;
    expect(body).toContain(`## Checks on \`${round.pushedSha}\` (passed)`);
    expect(body).toContain('| `ci/test` | success | yes | fixed: added one/fixed.txt |');
    expect(body).toContain(`## Tests at \`${round.pushedSha}\``);
  });

  it('a required check CI reports late is waited for, though the others have completed', async () => {
    const { remote, double } = await forgeWithCi();
    let reads = 0;
    double.ci = async () => ({
      checkRuns: [
        { name: 'lint', status: 'completed' as const, conclusion: 'success' },
        // Each read asks for check runs and statuses: from the third read on, ci/test is there.
        ...(++reads > 4 ? [{ name: 'ci/test', status: 'completed' as const, conclusion: 'success' }] : []),
      ],
    });
    const end = await awaitRun(await env.start(checksRequest(remote.url, double, 'true', { rounds: 0 })));
    expect(end.result?.outcome, end.failureMessage).toBe('pr-opened');
    expect(end.result!.checks!.checks).toContainEqual(
      expect.objectContaining({ name: 'ci/test', conclusion: 'success', passed: true, required: true }),
    );
    expect(end.result!.checks!.ended).toBe('passed');
  });

  it('a check attributed as external is shown and starts no other round', async () => {
    const { remote, double } = await forgeWithCi({ deploy: true });
    const fix = FIX.replace(
      `{"ci/test": {"fix": "added one/fixed.txt"}}`,
      `{"ci/test": {"fix": "added one/fixed.txt"}, "ci/deploy": {"external": "the deploy runner is down"}}`,
    );
    const end = await awaitRun(await env.start(checksRequest(remote.url, double, fix, { rounds: 3 })));
    expect(end.failureMessage).toBeUndefined();
    const checks = end.result!.checks!;
    expect(checks.rounds.map((r) => r.outcome)).toEqual(['pushed']);
    expect(checks.rounds[0].checks.sort()).toEqual(['ci/deploy', 'ci/test']);
    expect(checks.ended).toBe('failing only as external: ci/deploy');
    expect(checks.checks).toContainEqual(
      expect.objectContaining({
        name: 'ci/deploy',
        conclusion: 'error',
        passed: false,
        attribution: { external: 'the deploy runner is down' },
      }),
    );
    expect(double.pulls[0].body).toContain('| `ci/deploy` | error | yes | external: the deploy runner is down |');
  });

  it('a round whose mapping leaves a check unmapped is refused: nothing is pushed, the reason is in the result', async () => {
    const { remote, double } = await forgeWithCi();
    const unmapped = FIX.replace(`{"ci/test": {"fix": "added one/fixed.txt"}}`, '{}');
    const handle = await env.start(checksRequest(remote.url, double, unmapped));
    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    const result = end.result!;
    expect(result.outcome).toBe('pr-opened');
    const [round] = result.checks!.rounds;
    expect(round).toMatchObject({
      outcome: 'refused',
      message: 'refused: the mapping leaves check(s) unmapped: "ci/test"',
    });
    expect(round.pushedSha).toBeUndefined();
    // The branch holds the first push only; its check still fails.
    expect(await remote.head(result.targetRef)).toBe(round.sha);
    expect(await remote.show(result.targetRef, 'one/fixed.txt')).toBeNull();
    expect(result.checks!.checks[0]).toMatchObject({ name: 'ci/test', conclusion: 'failure', passed: false });
    expect(result.message).toContain('CI-fix round 1 refused: refused: the mapping leaves check(s) unmapped');
  });

  it('a hostile mapping file (a symlink to a host file, a FIFO, a huge file) is refused with a reason; no run hangs', async () => {
    const hostile: [string, RegExp][] = [
      [`ln -s /etc/passwd "$FLOTILLA_CI_FIX_FILE"`, /not a regular file \(it is a symbolic link\); refused unread/],
      [`mkfifo "$FLOTILLA_CI_FIX_FILE"`, /not a regular file \(it is a fifo\); refused unread/],
      [
        `head -c 1000000 /dev/zero | tr '\\0' ' ' > "$FLOTILLA_CI_FIX_FILE"`,
        /larger than 16 KiB \(1000000 bytes\); refused unread/,
      ],
    ];
    // One repository and forge for the three runs: each pushes to a PR branch of its own.
    const { remote, double } = await forgeWithCi();
    await Promise.all(
      hostile.map(async ([plant, reason]) => {
        const fix = `echo fixed > one/fixed.txt && git add -A && git commit -qm fix && ${plant}`;
        const end = await awaitRun(await env.start(checksRequest(remote.url, double, fix)));
        expect(end.failureMessage).toBeUndefined();
        const [round] = end.result!.checks!.rounds;
        expect(round.outcome).toBe('refused');
        expect(round.message).toMatch(reason);
        expect(await remote.show(end.result!.targetRef, 'one/fixed.txt')).toBeNull();
      }),
    );
  });
});

describe('checks with review on the PR', () => {
  it("a review round's push is followed by its checks: the check it broke is fixed in a CI-fix round before the run waits again", async () => {
    const { remote, double } = await forgeWithCi();
    // ci/test fails while one/review.txt is there without one/fixed.txt: the review round breaks it.
    const ci = double.ci!;
    double.ci = async (sha) => {
      const broken = (await remote.show(sha, 'one/review.txt')) !== null;
      return broken ? ci(sha) : { checkRuns: [{ name: 'ci/test', status: 'completed', conclusion: 'success' }] };
    };
    // A review round (its prompt quotes the comment) adds one/review.txt; the rest as fixer's.
    const review = `echo reviewed > one/review.txt && git add -A && git commit -qm review`;
    const one = fixer(FIX);
    const agent = `if printf '%s\\n' "$FLOTILLA_PROMPT" | grep -q 'please review'; then mkdir -p one && ${review}; else ${one.agent.command}; fi`;
    const request = shellRequest(remote.url, [{ ...one, agent: shell(agent) }], {
      forge: double.forge,
      land: { kind: 'pr', checks: { pollSeconds: 1, timeoutMinutes: 2 } },
      review: { rounds: 2, pollSeconds: 1 },
    });
    const handle = await env.start(request);
    const opened = await waitForStatus(
      handle,
      'the PR under review',
      (s) => s.phase === 'review' && !!s.review?.waiting,
    );
    const number = opened.pullRequest!.number;
    expect(opened.checks?.rounds).toEqual([]);
    double.addReviewComment(number, 'ana', 'please review this', 'one/greeting.txt', 1);

    const after = await waitForStatus(
      handle,
      'the review round and its CI-fix round',
      (s) => s.phase === 'review' && !!s.review?.waiting && s.review.rounds.length === 1,
    );
    const branch = after.targetRef;
    const head = (await remote.head(branch))!;
    expect(after.review!.rounds[0].outcome).toBe('pushed');
    expect(after.checks!.rounds).toEqual([expect.objectContaining({ round: 1, outcome: 'pushed', pushedSha: head })]);
    // The review phase goes on from what the branch holds after the fix, and the PR is there too.
    expect(after.review!.headSha).toBe(head);
    expect(double.pull(number)!.head.sha).toBe(head);
    expect(await remote.show(branch, 'one/review.txt')).toBe('reviewed\n');
    expect(await remote.show(branch, 'one/fixed.txt')).not.toBeNull();

    double.merge(number);
    const end = await awaitRun(handle);
    expect(end.result).toMatchObject({ outcome: 'pr-opened', pullRequest: { number, state: 'merged' } });
    expect(end.result!.checks!.ended).toBe('passed');
    const body = double.pull(number)!.body!;
    expect(body).toContain('## Review rounds (1)');
    expect(body).toContain(`## Checks on \`${head}\` (passed)`);
  });
});

describeReplay(() => env, 4);
