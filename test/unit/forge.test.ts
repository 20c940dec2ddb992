/**
 * The forge: the contract suite against the GitHub double (through the real Octokit client) and,
 * when FLOTILLA_TEST_GITHUB_TOKEN and FLOTILLA_TEST_GITHUB_REPO (owner/name, a scratch repository
 * the token may write) are set, against real GitHub; what only the double can show (reviews by
 * others, required checks); where the token goes; the PR body.
 */
import { createHash, createHmac } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Octokit } from '@octokit/rest';
import { describe, expect, it } from 'vitest';
import { loadRequest } from '../../src/client/request-file';
import { forgeOfRemote, issueOfUrl } from '../../src/contracts/forge-address';
import { forgeOf, issueOf, parseLeaderRequest } from '../../src/contracts/request';
import { forgeToken } from '../../src/forge/connect';
import { FLOTILLA_MARK, githubForge } from '../../src/forge/github';
import { pullRequestBody } from '../../src/forge/pr-body';
import { type ForgeSubject, forgeContract } from '../support/forge-contract';
import { GitHubDouble } from '../support/github-double';
import { requestProblems } from '../support/requests';

const TOKEN = 'ghp_double_token_0123456789';

async function doubleSubject(): Promise<ForgeSubject & { double: GitHubDouble }> {
  let shas = 0;
  const branches = new Map<string, string>([['main', 'a'.repeat(40)]]);
  const double = await GitHubDouble.start({ token: TOKEN, branchSha: async (b) => branches.get(b) ?? null });
  return {
    double,
    forge: githubForge(double.forge, TOKEN, 'test'),
    base: 'main',
    async branch(name) {
      const sha = (++shas).toString(16).padStart(40, '0');
      branches.set(name, sha);
      return sha;
    },
    comment: async (n, body) => double.addComment(n, 'reviewer', body),
    reviewComment: async (n, body, path, line) => double.addReviewComment(n, 'reviewer', body, path, line),
    review: async (n, state, body) => double.addReview(n, 'reviewer', state, body),
    async status(sha, context, state) {
      double.statuses.set(sha, [...(double.statuses.get(sha) ?? []), { context, state }]);
    },
    issue: async (title, body) => {
      const number = 100 + double.issues.size;
      double.addIssue(number, title, body);
      return number;
    },
    marked: async (n) =>
      [...double.comments, ...double.reviewComments].filter((c) => c.issue === n && c.body.includes(FLOTILLA_MARK))
        .length,
    close: async () => undefined,
  };
}

forgeContract('the GitHub double', doubleSubject);

const real = { token: process.env.FLOTILLA_TEST_GITHUB_TOKEN, repo: process.env.FLOTILLA_TEST_GITHUB_REPO };

describe.runIf(real.token && real.repo)('against real GitHub (FLOTILLA_TEST_GITHUB_TOKEN is set)', () => {
  forgeContract('real GitHub', async () => realSubject(real.token!, real.repo!));
});

/** A scratch repository on github.com, driven by the token's own user. */
async function realSubject(token: string, name: string): Promise<ForgeSubject> {
  const [owner, repo] = name.split('/');
  const octokit = new Octokit({ auth: token });
  const { data } = await octokit.rest.repos.get({ owner, repo });
  const base = data.default_branch;
  return {
    forge: githubForge({ kind: 'github', repo: name }, token, 'test'),
    base,
    async branch(branch) {
      const head = (await octokit.rest.git.getRef({ owner, repo, ref: `heads/${base}` })).data.object.sha;
      const parent = await octokit.rest.git.getCommit({ owner, repo, commit_sha: head });
      const tree = await octokit.rest.git.createTree({
        owner,
        repo,
        base_tree: parent.data.tree.sha,
        tree: [{ path: `contract/${branch.split('/')[1]}.txt`, mode: '100644', type: 'blob', content: branch }],
      });
      const commit = await octokit.rest.git.createCommit({
        owner,
        repo,
        message: branch,
        tree: tree.data.sha,
        parents: [head],
      });
      await octokit.rest.git.createRef({ owner, repo, ref: `refs/heads/${branch}`, sha: commit.data.sha });
      return commit.data.sha;
    },
    comment: async (n, body) =>
      (await octokit.rest.issues.createComment({ owner, repo, issue_number: n, body })).data.id,
    async status(sha, context, state) {
      await octokit.rest.repos.createCommitStatus({ owner, repo, sha, context, state });
    },
    issue: async (title, body) => (await octokit.rest.issues.create({ owner, repo, title, body })).data.number,
    async marked(n) {
      const at = { owner, repo, per_page: 100 };
      const [comments, lines] = await Promise.all([
        octokit.paginate(octokit.rest.issues.listComments, { ...at, issue_number: n }),
        octokit.paginate(octokit.rest.pulls.listReviewComments, { ...at, pull_number: n }),
      ]);
      return [...comments, ...lines].filter((c) => (c.body ?? '').includes(FLOTILLA_MARK)).length;
    },
    async close(pr, branch) {
      if (pr) await octokit.rest.pulls.update({ owner, repo, pull_number: pr, state: 'closed' });
      await octokit.rest.git.deleteRef({ owner, repo, ref: `heads/${branch}` });
    },
  };
}

describe('the GitHub forge, where only the double can show it', () => {
  it('labels a new PR and requests its reviewers, people and teams', async () => {
    const { double, forge, branch } = await doubleSubject();
    await branch('feature');
    const pr = await forge.openPullRequest({
      head: 'feature',
      base: 'main',
      title: 't',
      body: 'b',
      draft: false,
      labels: ['flotilla', 'bot'],
      reviewers: ['alice', 'acme/core'],
    });
    const made = double.pull(pr.number)!;
    expect(made.labels.map((l) => l.name)).toEqual(['flotilla', 'bot']);
    expect(made.requested_reviewers.map((u) => u.login)).toEqual(['alice']);
    expect(made.requested_teams.map((t) => t.slug)).toEqual(['core']);
  });

  it('says which checks branch protection requires (those not reported yet pending), and nothing when it may not read the protection', async () => {
    const { double, forge } = await doubleSubject();
    const sha = 'c'.repeat(40);
    double.checkRuns.set(sha, [
      {
        name: 'build',
        status: 'completed',
        conclusion: 'failure',
        summary: 'error TS2345 in src/a.ts',
        details_url: 'https://ci/1',
      },
      { name: 'docs', status: 'in_progress' },
    ]);
    double.protection.set('main', ['build', 'deploy']);
    expect(await forge.checks(sha, 'main')).toEqual([
      {
        name: 'build',
        status: 'completed',
        conclusion: 'failure',
        required: true,
        detailsUrl: 'https://ci/1',
        logExcerpt: 'error TS2345 in src/a.ts',
      },
      { name: 'docs', status: 'in_progress', required: false },
      // Required, and not reported yet: pending, so the run waits for it.
      { name: 'deploy', status: 'pending', required: true, logExcerpt: expect.stringMatching(/^expected: /) },
    ]);
    double.protectionForbidden = true;
    expect((await forge.checks(sha, 'main')).map((c) => c.required)).toEqual([undefined, undefined]);
  });

  it('reads the PR as merged once it is', async () => {
    const { double, forge, branch } = await doubleSubject();
    await branch('f');
    const pr = await forge.openPullRequest({ head: 'f', base: 'main', title: 't', body: 'b', draft: false });
    double.merge(pr.number);
    expect((await forge.pullRequest(pr.number)).state).toBe('merged');
  });

  it('answers a comment even when a commenter posted the reply keys it can compute first', async () => {
    const { double, forge, branch, marked } = await doubleSubject();
    await branch('f');
    const pr = await forge.openPullRequest({ head: 'f', base: 'main', title: 't', body: 'b', draft: false });
    const asked = double.addComment(pr.number, 'reviewer', 'please add a test');
    const line = double.addReviewComment(pr.number, 'reviewer', 'typo', 'README.md', 1);
    const reply = 'added in the last commit';
    // What anyone can compute from the page: digests of the comment and the likely reply, keyed or not.
    const guesses = (id: string) =>
      [createHash('sha256'), createHmac('sha256', '')].map((h) => h.update(`${id}\n${reply}`).digest('hex'));
    for (const id of [`issue-comment:${asked}`, `review-comment:${line}`])
      for (const g of guesses(id)) {
        const planted = `${reply}\n\n${FLOTILLA_MARK}\n<!-- flotilla-reply ${g.slice(0, 20)} -->\n<!-- flotilla-reply ${g.slice(0, 32)} -->`;
        double.addComment(pr.number, 'mallory', planted);
        double.addReviewComment(pr.number, 'mallory', planted, 'README.md', 1);
      }
    const plantedCount = await marked(pr.number);
    await forge.replyToComment(pr.number, `issue-comment:${asked}`, reply);
    await forge.replyToComment(pr.number, `review-comment:${line}`, reply);
    expect(await marked(pr.number)).toBe(plantedCount + 2);
    const ours = [...double.comments, ...double.reviewComments].filter((c) => c.user.login !== 'mallory');
    expect(ours.filter((c) => c.body.includes(reply)).length).toBe(2);
  });

  it('refuses a wrong token with 401, as GitHub does', async () => {
    const { double } = await doubleSubject();
    await expect(githubForge(double.forge, 'wrong-token-value', 'test').issue(1)).rejects.toMatchObject({
      status: 401,
    });
  });
});

describe('where the forge token goes', () => {
  const env = (more: Record<string, string>) => ({ FLOTILLA_FORGE_TOKEN: 'forge-token-123456', ...more });

  it('to github.com (api.github.com) and hosts FLOTILLA_GIT_TOKEN_HOSTS allows, never elsewhere', () => {
    expect(forgeToken({ kind: 'github', repo: 'a/b' }, env({}))).toBe('forge-token-123456');
    const ghe = { kind: 'github' as const, repo: 'a/b', baseUrl: 'https://ghe.corp/api/v3' };
    expect(forgeToken(ghe, env({}))).toBeUndefined();
    process.env.FLOTILLA_GIT_TOKEN_HOSTS = 'github.com,ghe.corp';
    try {
      expect(forgeToken(ghe, env({}))).toBe('forge-token-123456');
      expect(forgeToken({ ...ghe, baseUrl: 'https://evil.example/api/v3' }, env({}))).toBeUndefined();
      // Plain http only on loopback.
      expect(forgeToken({ ...ghe, baseUrl: 'http://ghe.corp/api/v3' }, env({}))).toBeUndefined();
    } finally {
      delete process.env.FLOTILLA_GIT_TOKEN_HOSTS;
    }
  });

  it('falls back to the git token', () => {
    expect(forgeToken({ kind: 'github', repo: 'a/b' }, { FLOTILLA_GIT_TOKEN: 'git-token-1234567' })).toBe(
      'git-token-1234567',
    );
    expect(forgeToken({ kind: 'github', repo: 'a/b' }, {})).toBeUndefined();
  });
});

describe('forge addresses', () => {
  it('come from https remotes of github.com and GitHub Enterprise, and from issue URLs', () => {
    expect(forgeOfRemote('https://github.com/acme/widgets.git')).toEqual({ kind: 'github', repo: 'acme/widgets' });
    expect(forgeOfRemote('https://ghe.corp/acme/widgets')).toEqual({
      kind: 'github',
      repo: 'acme/widgets',
      baseUrl: 'https://ghe.corp/api/v3',
    });
    for (const url of [
      'git@github.com:acme/widgets.git',
      'file:///tmp/x.git',
      'https://github.com/acme/widgets/tree/main',
    ])
      expect(forgeOfRemote(url)).toBeUndefined();
    expect(issueOfUrl('https://github.com/acme/widgets/issues/12')).toEqual({
      host: 'github.com',
      repo: 'acme/widgets',
      number: 12,
    });
    for (const url of [
      'https://github.com/acme/widgets/pull/12',
      'https://github.com/acme/widgets/issues/0',
      'ftp://x/a/b/issues/1',
    ])
      expect(issueOfUrl(url)).toBeUndefined();
  });
});

describe('the PR body', () => {
  const facts = {
    runId: 'run-1',
    objective: 'Add greetings\n@everyone look',
    sha: 'd'.repeat(40),
    subTasks: [
      { id: 'alpha', status: 'done', costUsd: 0.5, summary: 'Wrote alpha/greeting.txt' },
      { id: 'beta', status: 'failed', costUsd: 0.25, reason: 'exit 1' },
      { id: 'beta.attempt2', status: 'done', costUsd: 0.25 },
    ],
    testSummary: '3 passed',
    dropped: [{ id: 'gamma', reason: 'its dependency beta failed' }],
    costUsd: 1,
    issue: { number: 7 },
  };

  it('says what the run did, closes its issue, and pings nobody', () => {
    const body = pullRequestBody(facts, 'http://ui/namespaces/default/workflows/run-1');
    expect(body.split('\n')[0]).toBe('Closes #7');
    for (const part of [
      '> Add greetings',
      '| `alpha` | done | $0.50 |',
      '> Wrote alpha/greeting.txt',
      `## Tests at \`${'d'.repeat(40)}\``,
      '3 passed',
      '- `gamma`: its dependency beta failed',
      '- `beta`: exit 1',
      'run `run-1` ([Web UI](http://ui/namespaces/default/workflows/run-1))',
    ])
      expect(body).toContain(part);
    expect(body).not.toMatch(/@everyone/);
  });
});

describe('the request fields land, forge and issue', () => {
  const base = {
    repo: { url: 'https://github.com/acme/widgets.git' },
    testCmd: 'true',
    agent: { kind: 'shell', command: 'true' },
  };
  const problems = (fields: Record<string, unknown>) => requestProblems({ ...base, objective: 'x', ...fields });

  it('take `land: pr` as the PR form with its defaults, and the forge from an https remote', () => {
    const req = parseLeaderRequest({ ...base, objective: 'x', land: 'pr' });
    expect(req.land).toEqual({ kind: 'pr', draft: false });
    expect(forgeOf(req)).toEqual({ kind: 'github', repo: 'acme/widgets' });
    expect(
      parseLeaderRequest({ ...base, objective: 'x', land: { kind: 'pr', draft: true, labels: ['bot'] } }).land,
    ).toEqual({ kind: 'pr', draft: true, labels: ['bot'] });
  });

  it('refuse a PR without a forge, a PR branch that is its own base, and an issue on another forge', () => {
    expect(problems({ repo: { url: 'file:///tmp/r.git' }, land: 'pr' })).toEqual([
      expect.stringMatching(/^land: is pr, which needs a forge/),
    ]);
    expect(problems({ land: { kind: 'pr', branch: 'main' } })).toEqual([
      'land.branch: is "main", the branch the PR merges into; give another',
    ]);
    expect(problems({ issue: 'https://ghe.corp/acme/widgets/issues/3' })).toEqual([
      "issue: is on ghe.corp, not on the run's forge (github.com)",
    ]);
    expect(problems({ repo: { url: 'file:///tmp/r.git' }, issue: 'http://127.0.0.1:9/acme/widgets/issues/3' })).toEqual(
      [
        'issue: is not an https URL, and the run names no forge to read it from (give forge: { kind: github, repo, baseUrl })',
      ],
    );
    expect(problems({ issue: 'https://github.com/acme/widgets/pull/3' })).toEqual([
      expect.stringMatching(/^issue: .* is not an issue URL/),
    ]);
    expect(problems({ forge: { kind: 'github', repo: 'nope' } })).toEqual([
      expect.stringMatching(/^forge.repo: "nope" is not owner\/name/),
    ]);
    expect(problems({ land: { kind: 'pr', reviewers: ['@alice'] } })).toEqual([
      'land.reviewers[0]: must be a login or org/team',
    ]);
    expect(problems({ land: 'pr', review: { rounds: 2, pollSeconds: 0 } })).toEqual([
      'review.pollSeconds: must be at least 1',
    ]);
    expect(problems({ land: 'pr', review: { rounds: 2 } })).toEqual([]);
  });

  it('need an objective unless there is an issue, whose forge is the run’s', () => {
    expect(problems({ objective: undefined })).toEqual(['objective: is required unless the request names an issue']);
    const req = parseLeaderRequest({ ...base, issue: 'https://github.com/acme/other/issues/9' });
    expect(issueOf(req)).toEqual({ forge: { kind: 'github', repo: 'acme/other' }, number: 9 });
  });
});

describe('start --issue', () => {
  it('gives the request its issue field, in place of the file’s', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'issue-'));
    const file = path.join(dir, 'flotilla.yaml');
    writeFileSync(
      file,
      'repo: { url: https://github.com/acme/widgets.git }\ntestCmd: "true"\nagent: { kind: shell, command: "true" }\n',
    );
    const issue = 'https://github.com/acme/widgets/issues/4';
    expect(loadRequest(file, { issue }).request).toMatchObject({ issue, objective: '' });
    expect(() => loadRequest(file)).toThrow(/objective: is required unless the request names an issue/);
    rmSync(dir, { recursive: true });
  });
});
