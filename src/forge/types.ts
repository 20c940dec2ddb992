/**
 * The forge: where a repository's pull requests, reviews, checks and issues live (GitHub, GitHub
 * Enterprise). One interface, one contract suite (test/support/forge-contract.ts); workflows see
 * only these types, and every call is an activity on the host, which holds the token.
 */

import type { ForgeAddress } from '../contracts/forge-address';
import type { ReviewComment } from '../contracts/review';

export type { ForgeAddress };

export type PullRequestState = 'open' | 'merged' | 'closed';

export interface PullRequest {
  number: number;
  /** The PR's page, for people. */
  url: string;
  state: PullRequestState;
  draft: boolean;
  /** The branch it merges, and the commit that branch is at. */
  head: string;
  headSha: string;
  /** The branch it merges into. */
  base: string;
  title: string;
  body: string;
}

export interface NewPullRequest {
  head: string;
  base: string;
  title: string;
  body: string;
  draft: boolean;
  labels?: string[];
  reviewers?: string[];
}

/**
 * One piece of review activity: the review phase's own ReviewComment (contracts/review.ts). Its
 * `id` says which kind it is (`review-comment:<n>`, `issue-comment:<n>`, `review:<n>`), so a reply
 * goes where the comment is.
 */
export type { ReviewComment };

export interface ReviewActivity {
  comments: ReviewComment[];
  /** Pass it back to get only what came after. */
  cursor: string;
}

/** A check run or a commit status of a commit. */
export interface Check {
  name: string;
  /** queued / in_progress / completed for check runs; pending / completed for statuses. */
  status: 'queued' | 'in_progress' | 'pending' | 'completed';
  /** success, failure, neutral, cancelled, skipped, timed_out, action_required, error, stale; absent until completed. */
  conclusion?: string;
  /** Whether branch protection requires it; absent when the token may not read the protection. */
  required?: boolean;
  detailsUrl?: string;
  /** The check's own summary of its output, clipped. */
  logExcerpt?: string;
}

export interface Issue {
  number: number;
  url: string;
  title: string;
  body: string;
  state: 'open' | 'closed';
}

export interface IssueComment {
  id: number;
  author: string;
  body: string;
}

export interface Forge {
  /** The open PR whose head is `head` in this repository, if there is one. */
  findPullRequest(head: string): Promise<PullRequest | undefined>;
  openPullRequest(pr: NewPullRequest): Promise<PullRequest>;
  updatePullRequest(number: number, change: { title?: string; body?: string; draft?: boolean }): Promise<PullRequest>;
  pullRequest(number: number): Promise<PullRequest>;
  /** Review comments, comments and reviews that came after `cursor` (all of them without one), oldest first. */
  reviewActivity(number: number, cursor?: string): Promise<ReviewActivity>;
  /** Answers a comment where it was made: in its review thread, or on the PR quoting it. The same answer to the same comment is posted once. */
  replyToComment(number: number, commentId: string, body: string): Promise<void>;
  /**
   * The check runs and commit statuses of `sha`; `base` is the branch whose protection says which
   * are required. A required one not reported yet is there too, pending.
   */
  checks(sha: string, base?: string): Promise<Check[]>;
  issue(number: number): Promise<Issue>;
  issueComments(number: number): Promise<IssueComment[]>;
  commentOnIssue(number: number, body: string): Promise<IssueComment>;
}
