/**
 * The activities that talk to the forge (GitHub): on the shared task queue, since any host holds
 * the token (from its own environment; never in these inputs or results). Each is safe to run
 * twice: a PR is looked up by its head branch before one is made, an issue comment by its mark.
 */
import { Context } from '@temporalio/activity';
import { permanent } from '../contracts/failures';
import { REVIEW_COMMENT_MAX_CHARS } from '../contracts/review';
import { clip } from '../contracts/text';
import { connectForge } from '../forge/connect';
import { type PullRequestFacts, pullRequestBody } from '../forge/pr-body';
import type { Check, Forge, ForgeAddress, PullRequest, PullRequestState, ReviewComment } from '../forge/types';
import { scrubSecrets } from '../git/remote';
import type { ActivityDeps } from './deps';

export interface OpenPullRequestInput {
  forge: ForgeAddress;
  /** The branch the run pushed its tested commit to, and the branch the PR merges into. */
  head: string;
  base: string;
  title: string;
  draft: boolean;
  labels?: string[];
  reviewers?: string[];
  facts: PullRequestFacts;
}

export interface OpenedPullRequest {
  number: number;
  url: string;
  /** True when the PR already existed (a retry, or a worker killed after GitHub made it). */
  reused: boolean;
}

export interface PolledPullRequest {
  state: PullRequestState;
  headSha: string;
  comments: ReviewComment[];
  cursor: string;
}

/** What an issue says, for the objective; its text is the issue author's, untrusted. */
export interface ReadIssue {
  number: number;
  url: string;
  title: string;
  body: string;
}

/** Characters of an issue's body the objective takes at most. */
const ISSUE_BODY_CHARS = 12_000;
/** Checks of a commit the run reads at most, and characters of each one's log excerpt. */
const MAX_CHECKS = 50;
const CHECK_EXCERPT_CHARS = 2_000;

export function forgeActivities(deps: ActivityDeps) {
  const uiLink = (runId: string) => deps.workflowLink?.(Context.current().info.workflowNamespace ?? 'default', runId);
  return {
    /** Opens the run's PR, or finds the one already open for its branch and brings its body up to date. */
    async openPullRequest(input: OpenPullRequestInput): Promise<OpenedPullRequest> {
      const body = pullRequestBody(input.facts, uiLink(input.facts.runId));
      return onForge('cannot open the pull request', async () => {
        const forge = await connectForge(input.forge);
        const found = await forge.findPullRequest(input.head);
        if (found) return reuse(forge, found, { body });
        const { head, base, title, draft, labels, reviewers } = input;
        const made = await forge
          .openPullRequest({ head, base, title, body, draft, labels, reviewers })
          .catch(async (err: unknown) => {
            // Made meanwhile (by another attempt of this activity): that one is ours.
            const again = await forge.findPullRequest(input.head);
            if (again) return again;
            throw err;
          });
        return { number: made.number, url: made.url, reused: false };
      });
    },

    /** Brings the PR's body up to date with the run (the same body is not written again). */
    async updatePullRequest(input: { forge: ForgeAddress; number: number; facts: PullRequestFacts }): Promise<void> {
      const body = pullRequestBody(input.facts, uiLink(input.facts.runId));
      await onForge('cannot update the pull request', async () => {
        const forge = await connectForge(input.forge);
        await reuse(forge, await forge.pullRequest(input.number), { body });
      });
    },

    /**
     * The PR's state and head, and the review activity after `cursor` (Flotilla's own comments
     * left out by the forge), each body clipped to what a review round keeps.
     */
    async pollPullRequest(input: { forge: ForgeAddress; number: number; cursor?: string }): Promise<PolledPullRequest> {
      return onForge('cannot read the pull request', async () => {
        const forge = await connectForge(input.forge);
        const pr = await forge.pullRequest(input.number);
        const activity = await forge.reviewActivity(input.number, input.cursor);
        const comments = activity.comments.map((c) => ({ ...c, body: clip(c.body, REVIEW_COMMENT_MAX_CHARS) }));
        return { state: pr.state, headSha: pr.headSha, comments, cursor: activity.cursor };
      });
    },

    /** Answers a review comment where it was made. */
    async replyToComment(input: {
      forge: ForgeAddress;
      number: number;
      commentId: string;
      body: string;
    }): Promise<void> {
      await onForge('cannot reply on the pull request', async () =>
        (await connectForge(input.forge)).replyToComment(input.number, input.commentId, input.body),
      );
    },

    /** The check runs and commit statuses of `sha`; `base`'s branch protection says which are required. */
    async readChecks(input: { forge: ForgeAddress; sha: string; base: string }): Promise<Check[]> {
      return onForge('cannot read the checks', async () => {
        const checks = await (await connectForge(input.forge)).checks(input.sha, input.base);
        // Bounded for the history: the first MAX_CHECKS, each text clipped.
        return checks.slice(0, MAX_CHECKS).map((c) => ({
          ...c,
          name: clip(c.name, 200),
          ...(c.detailsUrl && { detailsUrl: clip(c.detailsUrl, 500) }),
          ...(c.logExcerpt && { logExcerpt: clip(c.logExcerpt, CHECK_EXCERPT_CHARS) }),
        }));
      });
    },

    async readIssue(input: { forge: ForgeAddress; number: number }): Promise<ReadIssue> {
      return onForge('cannot read the issue', async () => {
        const issue = await (await connectForge(input.forge)).issue(input.number);
        return {
          number: issue.number,
          url: issue.url,
          title: clip(issue.title, 500),
          body: clip(issue.body, ISSUE_BODY_CHARS),
        };
      });
    },

    /** Says on the issue which run works on it, once: a comment with the run's mark is not made again. */
    async commentOnIssue(input: { forge: ForgeAddress; number: number; runId: string }): Promise<void> {
      const mark = `<!-- flotilla-run: ${input.runId.replace(/-->/g, '')} -->`;
      await onForge('cannot comment on the issue', async () => {
        const forge = await connectForge(input.forge);
        const comments = await forge.issueComments(input.number);
        if (comments.some((c) => c.body.includes(mark))) return;
        const link = uiLink(input.runId);
        const text = `Flotilla run \`${input.runId}\` is working on this issue${link ? ` ([Web UI](${link}))` : ''}; \`flotilla status ${input.runId}\` shows where it is.`;
        await forge.commentOnIssue(input.number, `${text}\n${mark}`);
      });
    },
  };
}

async function reuse(forge: Forge, pr: PullRequest, want: { body: string }): Promise<OpenedPullRequest> {
  if (pr.body !== want.body) await forge.updatePullRequest(pr.number, { body: want.body });
  return { number: pr.number, url: pr.url, reused: true };
}

/**
 * HTTP statuses no retry changes: bad credentials, no access, no such repository, PR or issue, a
 * validation error. 403 and 429 from rate limits are the client's to wait out; those that remain
 * after its own retries are retried by Temporal.
 */
function permanentStatus(err: unknown): number | undefined {
  const e = err as { status?: number; message?: string };
  if (typeof e?.status !== 'number') return undefined;
  if (e.status === 403 && /rate limit/i.test(e.message ?? '')) return undefined;
  return [400, 401, 403, 404, 410, 422].includes(e.status) ? e.status : undefined;
}

/** Runs a forge call; its failure says what failed and why, without the token. */
async function onForge<T>(what: string, step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (err) {
    const text = scrubSecrets(err instanceof Error ? err.message : String(err));
    const status = permanentStatus(err);
    const message = `${what}: ${status ? `the forge answered ${status}: ` : ''}${clip(text.trim(), 1000)}`;
    throw status ? permanent('ForgeRefused', message) : new Error(message);
  }
}
