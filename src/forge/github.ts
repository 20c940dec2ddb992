/**
 * The forge on GitHub and GitHub Enterprise, through Octokit: GitHub's own REST client, kept by
 * GitHub, with its plugins for retries (server errors, abuse limits) and throttling (rate limits),
 * so Flotilla handles neither. Runs on the host only: it holds the token.
 */
import { createHmac } from 'node:crypto';
import { Octokit } from '@octokit/rest';
import { retry } from '@octokit/plugin-retry';
import { throttling } from '@octokit/plugin-throttling';
import { clip } from '../contracts/text';
import { GITHUB_API } from '../contracts/forge-address';
import type {
  Check,
  Forge,
  ForgeAddress,
  Issue,
  IssueComment,
  NewPullRequest,
  PullRequest,
  ReviewActivity,
  ReviewComment,
} from './types';

/** What a required check that has not been reported says. */
const EXPECTED = 'expected: branch protection requires it, and it has not been reported on this commit yet';

/** Set in everything Flotilla writes on a forge, so its own comments are never read back as review. */
export const FLOTILLA_MARK = '<!-- flotilla -->';

const Client = Octokit.plugin(retry, throttling);
type Client = InstanceType<typeof Client>;

/** Rate-limited requests are waited out this many times before they fail (then the activity retries). */
const RATE_LIMIT_RETRIES = 2;
const LOG_EXCERPT_CHARS = 2_000;

/** The forge at `address`, authenticated with `token` (none: anonymous, public data only). */
export function githubForge(address: ForgeAddress, token: string | undefined, version: string): Forge {
  const octokit = new Client({
    ...(token && { auth: token }),
    baseUrl: (address.baseUrl ?? GITHUB_API).replace(/\/+$/, ''),
    userAgent: `flotilla/${version}`,
    // Octokit logs warnings to the console by default; the activity reports what failed itself.
    log: { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined },
    throttle: {
      onRateLimit: (_after: number, _options: unknown, _client: unknown, count: number) => count < RATE_LIMIT_RETRIES,
      onSecondaryRateLimit: (_after: number, _options: unknown, _client: unknown, count: number) =>
        count < RATE_LIMIT_RETRIES,
    },
  });
  const [owner, repo] = address.repo.split('/');
  return new GitHubForge(octokit, owner, repo, token ?? '');
}

/** What of GitHub's pull request object (in a list or alone) a PullRequest is made of. */
interface PullData {
  number: number;
  html_url: string;
  state: string;
  merged_at: string | null;
  draft?: boolean;
  head: { ref: string; sha: string };
  base: { ref: string };
  title: string;
  body: string | null;
}

function pullOf(p: PullData): PullRequest {
  return {
    number: p.number,
    url: p.html_url,
    state: p.merged_at ? 'merged' : p.state === 'open' ? 'open' : 'closed',
    draft: p.draft ?? false,
    head: p.head.ref,
    headSha: p.head.sha,
    base: p.base.ref,
    title: p.title,
    body: p.body ?? '',
  };
}

/** The cursor: the highest review comment, comment and review ids seen. */
interface Seen {
  rc: number;
  ic: number;
  rv: number;
}

function parseCursor(cursor: string | undefined): Seen {
  const [rc, ic, rv] = (cursor ?? '').split('.').map((n) => Number(n) || 0);
  return { rc: rc ?? 0, ic: ic ?? 0, rv: rv ?? 0 };
}

const REVIEW_KINDS: Record<string, ReviewComment['kind'] | undefined> = {
  CHANGES_REQUESTED: 'changes-requested',
  APPROVED: 'approved',
  COMMENTED: 'comment',
};

class GitHubForge implements Forge {
  constructor(
    private readonly octokit: Client,
    private readonly owner: string,
    private readonly repo: string,
    /** Keys the replies (see replyToComment): what a commenter cannot compute. */
    private readonly replySecret: string,
  ) {}

  private get at() {
    return { owner: this.owner, repo: this.repo };
  }

  async findPullRequest(head: string): Promise<PullRequest | undefined> {
    const { data } = await this.octokit.rest.pulls.list({ ...this.at, head: `${this.owner}:${head}`, state: 'open' });
    const found = data.find((p) => p.head.ref === head);
    return found && pullOf(found);
  }

  async openPullRequest(pr: NewPullRequest): Promise<PullRequest> {
    const { head, base, title, body, draft, labels, reviewers } = pr;
    const { data } = await this.octokit.rest.pulls.create({ ...this.at, head, base, title, body, draft });
    if (labels?.length) await this.octokit.rest.issues.addLabels({ ...this.at, issue_number: data.number, labels });
    if (reviewers?.length) {
      // "org/team" names a team; anything else a person.
      const teams = reviewers.filter((r) => r.includes('/')).map((r) => r.split('/')[1]);
      const people = reviewers.filter((r) => !r.includes('/'));
      await this.octokit.rest.pulls.requestReviewers({
        ...this.at,
        pull_number: data.number,
        reviewers: people,
        team_reviewers: teams,
      });
    }
    return pullOf(data);
  }

  async updatePullRequest(number: number, change: { title?: string; body?: string; draft?: boolean }) {
    const { title, body, draft } = change;
    let pr = await this.pullRequest(number);
    if (title !== undefined || body !== undefined)
      pr = pullOf((await this.octokit.rest.pulls.update({ ...this.at, pull_number: number, title, body })).data);
    if (draft !== undefined && draft !== pr.draft) {
      // REST cannot change a PR's draft state; GraphQL can.
      const { data } = await this.octokit.rest.pulls.get({ ...this.at, pull_number: number });
      const mutation = draft ? 'convertPullRequestToDraft' : 'markPullRequestReadyForReview';
      await this.octokit.graphql(
        `mutation($id: ID!) { ${mutation}(input: { pullRequestId: $id }) { clientMutationId } }`,
        {
          id: data.node_id,
        },
      );
      pr = await this.pullRequest(number);
    }
    return pr;
  }

  async pullRequest(number: number): Promise<PullRequest> {
    return pullOf((await this.octokit.rest.pulls.get({ ...this.at, pull_number: number })).data);
  }

  async reviewActivity(number: number, cursor?: string): Promise<ReviewActivity> {
    const seen = parseCursor(cursor);
    const at = { ...this.at, per_page: 100 };
    const { paginate, rest } = this.octokit;
    const [reviewComments, comments, reviews] = await Promise.all([
      paginate(rest.pulls.listReviewComments, { ...at, pull_number: number }),
      paginate(rest.issues.listComments, { ...at, issue_number: number }),
      paginate(rest.pulls.listReviews, { ...at, pull_number: number }),
    ]);
    const dated: { at: string; comment: ReviewComment }[] = [];
    const ours = (body: string | null | undefined) => (body ?? '').includes(FLOTILLA_MARK);
    for (const c of reviewComments)
      if (c.id > seen.rc && !ours(c.body))
        dated.push({
          at: c.created_at,
          comment: {
            id: `review-comment:${c.id}`,
            author: c.user?.login ?? 'ghost',
            body: c.body,
            path: c.path,
            ...(typeof c.line === 'number' && { line: c.line }),
            kind: 'comment',
          },
        });
    for (const c of comments)
      if (c.id > seen.ic && !ours(c.body))
        dated.push({
          at: c.created_at,
          comment: {
            id: `issue-comment:${c.id}`,
            author: c.user?.login ?? 'ghost',
            body: c.body ?? '',
            kind: 'comment',
          },
        });
    for (const r of reviews) {
      const kind = REVIEW_KINDS[r.state];
      // A plain "commented" review without a body is only the envelope of its review comments.
      if (r.id <= seen.rv || !kind || ours(r.body) || (kind === 'comment' && !r.body)) continue;
      dated.push({
        at: r.submitted_at ?? '',
        comment: { id: `review:${r.id}`, author: r.user?.login ?? 'ghost', body: r.body ?? '', kind },
      });
    }
    const max = (ids: { id: number }[], floor: number) => Math.max(floor, ...ids.map((x) => x.id));
    return {
      comments: dated.sort((a, b) => a.at.localeCompare(b.at)).map((d) => d.comment),
      cursor: [max(reviewComments, seen.rc), max(comments, seen.ic), max(reviews, seen.rv)].join('.'),
    };
  }

  /**
   * At most once per comment and text: an activity retried after GitHub took its reply (the
   * answer lost on the way back) finds the reply by the key it carries and posts nothing. The key
   * is an HMAC under the token, so nobody else can post it first to have a reply skipped.
   */
  async replyToComment(number: number, commentId: string, body: string): Promise<void> {
    const [kind, raw] = commentId.split(':');
    const id = Number(raw);
    if (!Number.isSafeInteger(id) || !['review-comment', 'issue-comment', 'review'].includes(kind))
      throw new Error(`commentId: "${commentId}" is not a comment id this forge gave`);
    const mac = createHmac('sha256', this.replySecret).update(`${commentId}\n${body}`).digest('hex');
    const key = `<!-- flotilla-reply ${mac.slice(0, 32)} -->`;
    const marked = `${body}\n\n${FLOTILLA_MARK}\n${key}`;
    const { paginate, rest } = this.octokit;
    const at = { ...this.at, per_page: 100 };
    if (kind === 'review-comment') {
      const thread = await paginate(rest.pulls.listReviewComments, { ...at, pull_number: number });
      if (thread.some((c) => c.in_reply_to_id === id && c.body.includes(key))) return;
      await rest.pulls.createReplyForReviewComment({ ...this.at, pull_number: number, comment_id: id, body: marked });
      return;
    }
    // Comments and reviews have no threads: the answer goes on the PR, linking what it answers.
    const comments = await paginate(rest.issues.listComments, { ...at, issue_number: number });
    if (comments.some((c) => (c.body ?? '').includes(key))) return;
    const { url } = await this.pullRequest(number);
    const anchor = kind === 'review' ? `pullrequestreview-${id}` : `issuecomment-${id}`;
    await rest.issues.createComment({
      ...this.at,
      issue_number: number,
      body: `In reply to ${url}#${anchor}:\n\n${marked}`,
    });
  }

  async checks(sha: string, base?: string): Promise<Check[]> {
    const { paginate, rest } = this.octokit;
    const [runs, combined, required] = await Promise.all([
      paginate(rest.checks.listForRef, { ...this.at, ref: sha, per_page: 100 }),
      rest.repos.getCombinedStatusForRef({ ...this.at, ref: sha }),
      base ? this.requiredChecks(base) : Promise.resolve(undefined),
    ]);
    const isRequired = (name: string) => (required ? { required: required.has(name) } : {});
    const fromRuns: Check[] = runs.map((r) => ({
      name: r.name,
      status: r.status === 'completed' ? 'completed' : r.status === 'in_progress' ? 'in_progress' : 'queued',
      ...(r.conclusion && { conclusion: r.conclusion }),
      ...isRequired(r.name),
      ...(r.details_url && { detailsUrl: r.details_url }),
      ...excerpt([r.output.title, r.output.summary, r.output.text]),
    }));
    const fromStatuses: Check[] = combined.data.statuses.map((s) => ({
      name: s.context,
      status: s.state === 'pending' ? 'pending' : 'completed',
      ...(s.state !== 'pending' && { conclusion: s.state }),
      ...isRequired(s.context),
      ...(s.target_url && { detailsUrl: s.target_url }),
      ...excerpt([s.description]),
    }));
    const reported = new Set([...fromRuns, ...fromStatuses].map((c) => c.name));
    // A required check CI has not reported yet is one to wait for, as GitHub shows it ("Expected"):
    // without it, the others completing would end the wait before it ran.
    const expected: Check[] = [...(required ?? [])]
      .filter((name) => !reported.has(name))
      .map((name) => ({ name, status: 'pending', required: true, logExcerpt: EXPECTED }));
    return [...fromRuns, ...fromStatuses, ...expected];
  }

  /** The checks branch protection requires of `branch`: none when it is unprotected, undefined when we may not read it. */
  private async requiredChecks(branch: string): Promise<Set<string> | undefined> {
    try {
      const { data } = await this.octokit.rest.repos.getStatusChecksProtection({ ...this.at, branch });
      return new Set([...(data.contexts ?? []), ...(data.checks ?? []).map((c) => c.context)]);
    } catch (err) {
      if ((err as { status?: number }).status === 404) return new Set();
      return undefined;
    }
  }

  async issue(number: number): Promise<Issue> {
    const { data } = await this.octokit.rest.issues.get({ ...this.at, issue_number: number });
    return {
      number: data.number,
      url: data.html_url,
      title: data.title,
      body: data.body ?? '',
      state: data.state === 'closed' ? 'closed' : 'open',
    };
  }

  async issueComments(number: number): Promise<IssueComment[]> {
    const { paginate, rest } = this.octokit;
    const comments = await paginate(rest.issues.listComments, { ...this.at, issue_number: number, per_page: 100 });
    return comments.map((c) => ({ id: c.id, author: c.user?.login ?? 'ghost', body: c.body ?? '' }));
  }

  async commentOnIssue(number: number, body: string): Promise<IssueComment> {
    const { data } = await this.octokit.rest.issues.createComment({
      ...this.at,
      issue_number: number,
      body: `${body}\n\n${FLOTILLA_MARK}`,
    });
    return { id: data.id, author: data.user?.login ?? 'ghost', body: data.body ?? '' };
  }
}

function excerpt(parts: (string | null | undefined)[]): { logExcerpt?: string } {
  const text = parts.filter(Boolean).join('\n\n').trim();
  return text ? { logExcerpt: clip(text, LOG_EXCERPT_CHARS) } : {};
}
