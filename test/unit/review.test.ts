/** The pure parts of review rounds and notifications: routing, replies, webhook URLs, signatures. */
import { describe, expect, it } from 'vitest';
import { notifyUrlProblem, parseLeaderRequest } from '../../src/contracts/request';
import { type ReviewComment, type ReviewRound, repliesOf, routeComments } from '../../src/contracts/review';
import { bodyOf, shownTarget } from '../../src/webhooks/deliver';
import { signBody, verifySignature } from '../../src/webhooks/signature';

const task = (id: string, ownedPaths: string[]) => ({ id, prompt: id, ownedPaths });
const comment = (id: string, fields: Partial<ReviewComment> = {}): ReviewComment => ({
  id,
  author: 'ana',
  body: `fix ${id}`,
  kind: 'comment',
  ...fields,
});

describe('routing review comments', () => {
  const plan = [task('api', ['src/api']), task('ui', ['src/ui', 'README.md'])];

  it('sends a comment to the sub-task owning its path, and the rest to the first sub-task; approvals nowhere', () => {
    const routed = routeComments(plan, [
      comment('1', { path: 'src/ui/button.ts', line: 3 }),
      comment('2'),
      comment('3', { path: 'docs/other.md' }),
      comment('4', { path: 'README.md' }),
      comment('5', { kind: 'approved' }),
    ]);
    expect([...routed].map(([id, cs]) => [id, cs.map((c) => c.id)])).toEqual([
      ['api', ['2', '3']],
      ['ui', ['1', '4']],
    ]);
  });

  it('replies to each comment with what its sub-task did and the pushed commit', () => {
    const round: ReviewRound = {
      round: 1,
      by: 'ana',
      startedAt: 0,
      comments: [
        comment('1', { path: 'src/api/x.ts' }),
        comment('2', { path: 'src/ui/y.ts' }),
        comment('3', { kind: 'approved' }),
      ],
      subTasks: [
        { subTaskId: 'api', attemptId: 'api.attempt2', comments: ['1'], state: 'changed', filesChanged: 2, costUsd: 0 },
        {
          subTaskId: 'ui',
          attemptId: 'ui.attempt2',
          comments: ['2'],
          state: 'failed',
          filesChanged: 0,
          reason: 'boom',
          costUsd: 0,
        },
      ],
      outcome: 'pushed',
      pushedSha: 'a'.repeat(40),
      replies: [],
    };
    expect(repliesOf(round).map((r) => r.reply)).toEqual([
      `changed 2 file(s) (sub-task api) in ${'a'.repeat(40)}`,
      'no change: sub-task ui failed (boom)',
      'no change: an approval asks for none',
    ]);
  });
});

describe('webhook URLs', () => {
  it('takes https, and http to loopback only; never credentials, and never repeats the URL', () => {
    expect(notifyUrlProblem('https://hooks.slack.com/services/T/B/x')).toBeUndefined();
    expect(notifyUrlProblem('http://127.0.0.1:8080/hook')).toBeUndefined();
    expect(notifyUrlProblem('http://localhost/hook')).toBeUndefined();
    expect(notifyUrlProblem('http://example.com/hook')).toBe(
      'uses plain http to a host other than loopback; use https',
    );
    expect(notifyUrlProblem('https://user:s3cret@example.com/')).toMatch(/^must not contain credentials/);
    expect(notifyUrlProblem('ftp://example.com/')).toMatch(/^must be an https:\/\/ URL/);
    expect(notifyUrlProblem('https://exa mple.com/')).toMatch(/^must be an https:\/\/ URL/);
  });

  it('the request names the field, and wants exactly one of url and urlEnv', () => {
    const req = (notify: unknown) => ({
      objective: 'o',
      repo: { url: 'https://x.test/r.git' },
      testCmd: 'true',
      agent: { kind: 'shell', command: 'true' },
      notify,
    });
    expect(() => parseLeaderRequest(req([{ url: 'http://example.com/h' }]))).toThrow(
      /notify\[0\]\.url: uses plain http/,
    );
    expect(() => parseLeaderRequest(req([{}]))).toThrow(/notify\[0\]\.url: give exactly one of url and urlEnv/);
    expect(() => parseLeaderRequest(req([{ urlEnv: 'lower' }]))).toThrow(
      /notify\[0\]\.urlEnv: must be an environment variable name/,
    );
    expect(parseLeaderRequest(req([{ urlEnv: 'SLACK_HOOK', format: 'slack' }])).notify).toEqual([
      { urlEnv: 'SLACK_HOOK', format: 'slack' },
    ]);
  });

  it('is shown by its variable or its origin only', () => {
    expect(shownTarget({ urlEnv: 'SLACK_HOOK' })).toBe('$SLACK_HOOK');
    expect(shownTarget({ url: 'https://hooks.example.com/services/secret?token=x' })).toBe(
      'https://hooks.example.com/…',
    );
  });

  it("Slack's shape is one text with the commands", () => {
    const n = {
      event: 'gate',
      runId: 'r1',
      title: 'the plan gate waits',
      commands: ['flotilla approve r1 --gate plan'],
      phase: 'x',
      at: 0,
    };
    expect(JSON.parse(bodyOf(n, 'slack'))).toEqual({
      text: '*Flotilla* run `r1`: the plan gate waits\n`flotilla approve r1 --gate plan`',
    });
  });
});

describe('webhook signatures', () => {
  const body = '{"event":"gate"}';
  const good = signBody('k3y-k3y-k3y', body);

  it('verifies a delivery signed with the same secret over the same bytes', () => {
    expect(good).toMatch(/^sha256=[0-9a-f]{64}$/);
    expect(verifySignature('k3y-k3y-k3y', body, good)).toBe(true);
    expect(verifySignature('k3y-k3y-k3y', Buffer.from(body), good)).toBe(true);
  });

  it('refuses a bad signature: another body, another secret, a malformed or missing header, no secret', () => {
    expect(verifySignature('k3y-k3y-k3y', '{"event":"gatf"}', good)).toBe(false);
    expect(verifySignature('other-secret', body, good)).toBe(false);
    expect(verifySignature('k3y-k3y-k3y', body, good.slice(0, -1))).toBe(false);
    expect(verifySignature('k3y-k3y-k3y', body, good.replace('sha256=', 'sha1='))).toBe(false);
    expect(verifySignature('k3y-k3y-k3y', body, undefined)).toBe(false);
    expect(verifySignature('', body, signBody('', body))).toBe(false);
  });
});
