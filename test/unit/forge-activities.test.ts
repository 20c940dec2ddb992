/**
 * The forge activities against the GitHub double, through the real Octokit client: the PR found
 * by its head before one is made, the review phase's pollPullRequest and replyToComment, the
 * issue comment made once, and failures no retry fixes said as ForgeRefused.
 */
import { ApplicationFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ActivityDeps } from '../../src/activities/deps';
import { type OpenedPullRequest, forgeActivities } from '../../src/activities/forge';
import { GitHubDouble } from '../support/github-double';

const TOKEN = 'ghp_activities_token_0123456789';
let double: GitHubDouble;
let forge: ReturnType<typeof forgeActivities>;
const env = new MockActivityEnvironment({ workflowExecution: { workflowId: 'run-7', runId: 'r' } });

beforeEach(async () => {
  double = await GitHubDouble.start({ token: TOKEN });
  Object.assign(process.env, { FLOTILLA_FORGE_TOKEN: TOKEN, FLOTILLA_GIT_TOKEN_HOSTS: double.host });
  const deps = { workflowLink: (ns: string, id: string) => `http://ui/namespaces/${ns}/workflows/${id}` };
  forge = forgeActivities(deps as unknown as ActivityDeps);
});
afterEach(() => {
  delete process.env.FLOTILLA_FORGE_TOKEN;
  delete process.env.FLOTILLA_GIT_TOKEN_HOSTS;
});

const facts = { runId: 'run-7', objective: 'greet', sha: 'a'.repeat(40), subTasks: [], costUsd: 0 };
const open = (objective = 'greet'): Promise<OpenedPullRequest> =>
  env.run(() =>
    forge.openPullRequest({
      forge: double.forge,
      head: 'flotilla/run-7',
      base: 'main',
      title: 'Greet',
      draft: false,
      facts: { ...facts, objective },
    }),
  );

describe('the forge activities', () => {
  it('open one PR per branch: run again, they find it and bring its body up to date', async () => {
    const first = await open();
    expect(first).toEqual({ number: 1, url: `${double.url}/acme/widgets/pull/1`, reused: false });
    expect(double.pulls[0].body).toContain('([Web UI](http://ui/namespaces/default/workflows/run-7))');
    const again = await open('greet better');
    expect(again).toEqual({ ...first, reused: true });
    expect(double.pulls).toHaveLength(1);
    expect(double.pulls[0].body).toContain('> greet better');
  });

  it('poll a PR for its state and the review activity after a cursor, and reply where a comment was made', async () => {
    const { number } = await open();
    const id = double.addReviewComment(number, 'bob', 'rename this', 'src/a.ts', 3);
    double.addReview(number, 'bob', 'CHANGES_REQUESTED', 'see the comment');
    const polled = await forge.pollPullRequest({ forge: double.forge, number });
    expect(polled).toMatchObject({ state: 'open', headSha: double.pulls[0].head.sha });
    expect(polled.comments).toEqual([
      { id: `review-comment:${id}`, author: 'bob', body: 'rename this', path: 'src/a.ts', line: 3, kind: 'comment' },
      expect.objectContaining({ author: 'bob', body: 'see the comment', kind: 'changes-requested' }),
    ]);
    await forge.replyToComment({ forge: double.forge, number, commentId: `review-comment:${id}`, body: 'renamed' });
    const reply = double.reviewComments.find((c) => c.in_reply_to_id === id);
    expect(reply?.body).toMatch(/^renamed\n/);
    double.merge(number);
    const after = await forge.pollPullRequest({ forge: double.forge, number, cursor: polled.cursor });
    expect(after).toMatchObject({ state: 'merged', comments: [] });
  });

  it('comment on an issue once, however often they run', async () => {
    double.addIssue(5, 'Bug', 'It breaks');
    for (let i = 0; i < 2; i++)
      await env.run(() => forge.commentOnIssue({ forge: double.forge, number: 5, runId: 'run-7' }));
    expect(double.comments.filter((c) => c.issue === 5)).toHaveLength(1);
    expect(await forge.readIssue({ forge: double.forge, number: 5 })).toEqual({
      number: 5,
      url: `${double.url}/acme/widgets/issues/5`,
      title: 'Bug',
      body: 'It breaks',
    });
  });

  it('fail for good, as ForgeRefused and without the token, when the forge refuses', async () => {
    const err = await forge.pollPullRequest({ forge: double.forge, number: 99 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApplicationFailure);
    expect(err).toMatchObject({ type: 'ForgeRefused', nonRetryable: true });
    expect((err as Error).message).toMatch(/^cannot read the pull request: the forge answered 404/);
    expect((err as Error).message).not.toContain(TOKEN);
  });
});
