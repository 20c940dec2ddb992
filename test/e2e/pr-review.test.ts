/**
 * Review rounds on the pull request (issue 20 item 3), against the GitHub double and a real git
 * remote: with land: pr and review, the run waits on its PR and reads it; a review comment starts
 * one round whose commit is pushed to the same PR and answered on the comment (Flotilla's own
 * reply starts nothing); "changes requested" twice, then an approval and the merge, end the run
 * with both rounds; the PR closed ends the run. The PR's body follows the rounds, and every run
 * replays.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { awaitRun } from '../../src/client/index';
import type { RunStatus } from '../../src/contracts/messages';
import { releaseAtEnd } from '../support/cleanup';
import { TestEnv } from '../support/env';
import { GitHubDouble } from '../support/github-double';
import { waitFor } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { startWebhookReceiver } from '../../src/webhooks/receiver';
import { signBody } from '../../src/webhooks/signature';
import { reviewEndedReason } from '../../src/workflows/leader/deadline';
import { describeReplay } from '../support/replay';
import { reviewed, shellRequest } from '../support/requests';
import { waitForStatus } from '../support/runs';

const TOKEN = `ghp_e2e_${Math.random().toString(36).slice(2)}_review_token`;

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

/** A remote, its GitHub double, and the worker (this process) allowed to reach the double with the token. */
async function forgeAndRemote() {
  const remote = await makeRemote({ 'README.md': 'x\n' });
  const double = await GitHubDouble.start({ token: TOKEN, branchSha: (b) => remote.head(b) });
  Object.assign(process.env, { FLOTILLA_FORGE_TOKEN: TOKEN, FLOTILLA_GIT_TOKEN_HOSTS: double.host });
  releaseAtEnd(() => {
    delete process.env.FLOTILLA_FORGE_TOKEN;
    delete process.env.FLOTILLA_GIT_TOKEN_HOSTS;
  });
  return { remote, double };
}

/** A run on a PR, reviewed: reads the PR every second (unless told otherwise). */
async function startReviewed(remote: { url: string }, double: GitHubDouble, rounds = 3, pollSeconds = 1) {
  const request = shellRequest(remote.url, [reviewed('a'), reviewed('b')], {
    forge: double.forge,
    land: 'pr',
    review: { rounds, pollSeconds },
  });
  const handle = await env.start(request);
  const waiting = await waitForStatus(handle, 'the PR under review', (s) => waitingAfter(s, 0));
  return { handle, number: waiting.pullRequest!.number, url: waiting.pullRequest!.url };
}

/** The run waits for review, `rounds` rounds taken. */
const waitingAfter = (s: RunStatus, rounds: number) =>
  s.phase === 'review' && s.review?.waiting === true && s.review.rounds.length === rounds && !!s.pullRequest;

/** Resolves once the run has read the PR's reviews again, after what the test did last. */
function nextRead(double: GitHubDouble): Promise<void> {
  const reads = () => double.calls.filter((c) => c.method === 'GET' && c.path.endsWith('/reviews')).length;
  const before = reads();
  return waitFor('the run to read the PR again', async () => (reads() > before ? true : undefined)).then(() => {});
}

describe('review rounds on the pull request', () => {
  it('a deadline that passes while the run waits on its PR ends it pr-opened, with its push and the PR open', async () => {
    const { remote, double } = await forgeAndRemote();
    const request = shellRequest(remote.url, [reviewed('a')], {
      forge: double.forge,
      land: 'pr',
      review: { rounds: 2, pollSeconds: 1 },
      limits: { runTimeoutMinutes: 0.3 },
    });
    const end = await awaitRun(await env.start(request));
    expect(end.result?.outcome, end.failureMessage).toBe('pr-opened');
    const pr = double.pulls[0];
    expect(end.result?.message).toContain(reviewEndedReason(0.3, (await remote.head(pr.head.ref))!, pr.head.ref));
    // Neither merged nor closed: the PR stays open for the people who review it.
    expect(end.result?.pullRequest).toEqual(expect.objectContaining({ number: pr.number, branch: pr.head.ref }));
    expect(end.result?.pullRequest?.state).toBeUndefined();
    expect(pr.state).toBe('open');
  });

  it('a review comment starts one round, pushed to the same PR and answered on the comment; the merge ends the run', async () => {
    const { remote, double } = await forgeAndRemote();
    const { handle, number } = await startReviewed(remote, double);
    const pr = double.pull(number)!;
    const commentId = double.addReviewComment(number, 'ana', 'please say bonjour', 'a/greeting.txt', 1);

    const after = await waitForStatus(handle, 'round 1 to end', (s) => waitingAfter(s, 1));
    const round = after.review!.rounds[0];
    const branch = pr.head.ref;
    const pushed = (await remote.head(branch))!;
    expect(round).toMatchObject({ round: 1, by: 'ana', outcome: 'pushed', pushedSha: pushed });
    expect(round.comments).toEqual([
      expect.objectContaining({ id: `review-comment:${commentId}`, author: 'ana', path: 'a/greeting.txt' }),
    ]);
    expect(round.subTasks).toEqual([expect.objectContaining({ subTaskId: 'a', state: 'changed' })]);
    expect(await remote.show(branch, 'a/review.txt')).toBe('please say bonjour\n');
    // The same PR, now at the round's commit; one reply, in the comment's thread.
    expect(double.pulls).toHaveLength(1);
    expect(pr.head.sha).toBe(pushed);
    const replies = double.reviewComments.filter((c) => c.in_reply_to_id === commentId);
    expect(replies).toHaveLength(1);
    expect(replies[0].body).toContain(`Flotilla, review round 1: changed 1 file(s) (sub-task a) in ${pushed}`);
    // The body says the new commit's tests and the round.
    expect(pr.body).toContain(`## Tests at \`${pushed}\``);
    expect(pr.body).toContain('## Review rounds (1)\n- round 1, 1 comment(s): pushed: tests passed, pushed');

    // Flotilla's own reply, read back, starts nothing; the merge ends the run.
    await nextRead(double);
    expect((await waitForStatus(handle, 'still waiting', (s) => waitingAfter(s, 1))).review!.rounds).toHaveLength(1);
    double.merge(number);
    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    const result = end.result!;
    expect(result.outcome).toBe('pr-opened');
    expect(result.pullRequest).toMatchObject({ number, state: 'merged' });
    expect(result.review).toMatchObject({ endedBy: 'the pull request', ended: `pull request #${number} was merged` });
    expect(result.message).toContain(
      `pull request #${number} merged: ${result.pullRequest!.url}; 1 review round(s), 1 pushed`,
    );
  });

  it('"changes requested" twice, an approval and the merge: two rounds in the result, the approval starts none', async () => {
    const { remote, double } = await forgeAndRemote();
    const { handle, number } = await startReviewed(remote, double);
    const first = double.addReview(number, 'bob', 'CHANGES_REQUESTED', 'say hi');
    await waitForStatus(handle, 'round 1 to end', (s) => waitingAfter(s, 1));
    const second = double.addReview(number, 'bob', 'CHANGES_REQUESTED', 'say hi again');
    const after2 = await waitForStatus(handle, 'round 2 to end', (s) => waitingAfter(s, 2));
    double.addReview(number, 'bob', 'APPROVED');
    await nextRead(double);
    double.merge(number);

    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    const review = end.result!.review!;
    expect(review.rounds.map((r) => [r.round, r.outcome, r.comments.map((c) => [c.id, c.kind])])).toEqual([
      [1, 'pushed', [[`review:${first}`, 'changes-requested']]],
      [2, 'pushed', [[`review:${second}`, 'changes-requested']]],
    ]);
    expect(end.result!.pullRequest?.state).toBe('merged');
    expect(after2.review!.headSha).toBe(double.pull(number)!.head.sha);
    // Each review heard back on the PR, linking what it answers; the approval did not.
    const answers = double.comments.filter((c) => c.issue === number && c.body.includes('In reply to'));
    expect(answers.map((c) => /#pullrequestreview-(\d+)/.exec(c.body)?.[1])).toEqual([`${first}`, `${second}`]);
    expect(double.pull(number)!.body).toContain('## Review rounds (2)');
  });

  it('the PR closed without a merge ends the run, no round taken', async () => {
    const { remote, double } = await forgeAndRemote();
    const { handle, number } = await startReviewed(remote, double);
    double.close(number);
    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(end.result).toMatchObject({ outcome: 'pr-opened', pullRequest: { number, state: 'closed' } });
    expect(end.result!.review!.rounds).toEqual([]);
    expect(end.result!.message).toContain(`pull request #${number} closed`);
  });
});

describe("GitHub's webhooks", () => {
  const SECRET = `whsec_${Math.random().toString(36).slice(2)}`;

  /** Delivers `payload` as GitHub does: the event's name, and the body's HMAC under `secret`. */
  async function deliver(url: string, event: string, payload: object, secret = SECRET) {
    const body = JSON.stringify(payload);
    const res = await fetch(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-github-event': event,
        'x-hub-signature-256': signBody(secret, body),
      },
      body,
    });
    return { status: res.status, text: await res.text() };
  }

  it('a delivery makes the run read its PR at once (its poll is hourly); a bad signature is refused and wakes nothing', async () => {
    const { remote, double } = await forgeAndRemote();
    const { handle, number, url } = await startReviewed(remote, double, 3, 3600);
    const receiver = await startWebhookReceiver({
      client: env.client,
      secret: SECRET,
      listen: '127.0.0.1:0',
      warn: () => {},
    });
    releaseAtEnd(() => receiver.close());
    const pr = { html_url: url };
    double.addReviewComment(number, 'ana', 'please say bonjour', 'a/greeting.txt', 1);
    const commented = {
      action: 'created',
      pull_request: { number, html_url: pr.html_url },
      comment: { body: 'ignored' },
    };

    const forged = await deliver(receiver.url, 'pull_request_review_comment', commented, 'not the secret');
    expect(forged.status).toBe(401);
    expect(forged.text).toMatch(/X-Hub-Signature-256/);
    const signals = async () =>
      ((await handle.fetchHistory()).events ?? []).filter(
        (e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'pullRequestActivity',
      ).length;
    expect(await signals()).toBe(0);

    const heard = await deliver(receiver.url, 'pull_request_review_comment', commented);
    expect(heard).toEqual({ status: 202, text: `1 run(s) reading ${pr.html_url}\n` });
    const after = await waitForStatus(handle, 'round 1 to end', (s) => waitingAfter(s, 1));
    expect(after.review!.rounds[0]).toMatchObject({ by: 'ana', outcome: 'pushed' });

    double.merge(number);
    const closed = await deliver(receiver.url, 'pull_request', {
      action: 'closed',
      pull_request: { number, html_url: pr.html_url },
    });
    expect(closed.status).toBe(202);
    const end = await awaitRun(handle);
    expect(end.result).toMatchObject({ outcome: 'pr-opened', pullRequest: { number, state: 'merged' } });
    expect(await signals()).toBe(2);
    // Another PR's delivery, and an event that is not review activity, reach no run.
    expect(
      (await deliver(receiver.url, 'issue_comment', { issue: { pull_request: { html_url: `${pr.html_url}0` } } })).text,
    ).toBe(`0 run(s) reading ${pr.html_url}0\n`);
    expect((await deliver(receiver.url, 'push', { ref: 'refs/heads/main' })).text).toMatch(/^ignored: the push event/);
  });
});

describeReplay(() => env, 3);
