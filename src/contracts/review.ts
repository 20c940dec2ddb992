/**
 * Review rounds (request.review): after the push a run waits in the `review` phase for comments;
 * each batch starts a revision round whose commit is pushed to the same branch. Comments reach a
 * run through one door, whatever sends them: `flotilla revise` today (the `revise` update), a
 * forge's poller or webhook receiver later. Pure: the workflow and every client share it.
 */
import { z } from 'zod';
import { pathIsUnder } from './names';
import { MAX_CHARS, type SubTask, boundedText } from './request';

/** One review comment, as a forge delivers it (GitHub's review comments and reviews map onto it). */
export interface ReviewComment {
  id: string;
  author: string;
  body: string;
  /** The file it is on; absent: a comment on the change as a whole. */
  path?: string;
  line?: number;
  kind: 'comment' | 'changes-requested' | 'approved';
}

/** Comments one revise message carries, at most. */
export const MAX_REVIEW_COMMENTS = 20;
/** The longest comment body a run keeps. */
export const REVIEW_COMMENT_MAX_CHARS = 4_000;

export const ReviewCommentInput = z
  .object({
    id: boundedText(MAX_CHARS.name).min(1, 'must not be empty').optional(),
    author: boundedText(MAX_CHARS.name).optional(),
    body: boundedText(REVIEW_COMMENT_MAX_CHARS).min(1, 'must not be empty'),
    path: boundedText(1_000).min(1, 'must not be empty').optional(),
    line: z.number().int().min(1).max(10_000_000).optional(),
    kind: z.enum(['comment', 'changes-requested', 'approved']).default('comment'),
  })
  .strict();

/** `revise`: the comments of one revision round, and who sent them. */
export const ReviseInput = z
  .object({
    comments: z
      .array(ReviewCommentInput)
      .min(1, 'must hold at least one comment')
      .max(MAX_REVIEW_COMMENTS, `at most ${MAX_REVIEW_COMMENTS} comments per round`),
    by: boundedText(MAX_CHARS.name).optional(),
  })
  .strict();
export type ReviseInput = z.infer<typeof ReviseInput>;

/** `finish`: the review phase ends; the run ends with its last push. */
export const FinishInput = z
  .object({ by: boundedText(MAX_CHARS.name).optional(), reason: boundedText(MAX_CHARS.comment).optional() })
  .strict();
export type FinishInput = z.infer<typeof FinishInput>;

/**
 * What reaches a run's review phase: comments (which start a round), or its end (a person's
 * `finish`; later, the pull request merged or closed).
 */
export type ReviewEvent =
  { kind: 'comments'; comments: ReviewComment[]; by: string } | { kind: 'finish'; by: string; reason: string };

/** A revise message's comments as ReviewComments: ids given or numbered `<round>.<n>`, authors defaulted to the sender. */
export function reviewComments(input: ReviseInput, round: number, by: string): ReviewComment[] {
  return input.comments.map((c, i) => ({ ...c, id: c.id ?? `${round}.${i + 1}`, author: c.author ?? by }));
}

/** What one sub-task did in a round. */
export interface RevisionOutcome {
  subTaskId: string;
  /** The attempt's id (`<sub-task>.attempt<n>`). */
  attemptId: string;
  /** The ids of the comments it was given. */
  comments: string[];
  state: 'changed' | 'unchanged' | 'failed';
  filesChanged: number;
  reason?: string;
  costUsd: number;
}

/** A comment's answer: what was done about it, to be posted back where it came from. */
export interface ReviewReply {
  commentId: string;
  author: string;
  path?: string;
  line?: number;
  reply: string;
}

/** One revision round as the status and the result show it. */
export interface ReviewRound {
  round: number;
  by: string;
  startedAt: number;
  endedAt?: number;
  comments: ReviewComment[];
  subTasks: RevisionOutcome[];
  /** pushed: a new commit on the branch. unchanged: nothing to push. failed: nothing pushed, with the reason. */
  outcome?: 'pushed' | 'unchanged' | 'failed';
  message?: string;
  pushedSha?: string;
  replies: ReviewReply[];
}

/** The review phase: its rounds, the limit, the commit the branch holds, and how it ended. */
export interface ReviewReport {
  rounds: ReviewRound[];
  maxRounds: number;
  /** The last commit pushed to the branch: the next round's compare-and-swap expects it. */
  headSha: string;
  /** While the run waits for comments. */
  waiting?: boolean;
  /** How to answer while it waits: the exact commands. */
  commands?: string[];
  endedBy?: string;
  ended?: string;
}

/**
 * Which sub-task each comment goes to: the one whose owned paths hold the comment's path, or
 * (a comment on no path, or on a path no sub-task owns) the reviser's sub-task, the first of the
 * plan. Approvals start nothing. Returns the comments per sub-task id, in plan order.
 */
export function routeComments(subTasks: SubTask[], comments: ReviewComment[]): Map<string, ReviewComment[]> {
  const routed = new Map<string, ReviewComment[]>();
  for (const c of comments) {
    if (c.kind === 'approved') continue;
    const id = (ownerOf(subTasks, c) ?? subTasks[0]).id;
    routed.set(id, [...(routed.get(id) ?? []), c]);
  }
  return new Map(subTasks.filter((t) => routed.has(t.id)).map((t) => [t.id, routed.get(t.id)!]));
}

/** The sub-task whose owned paths hold the comment's path; undefined for a comment on no path, or on one nobody owns. */
export function ownerOf(subTasks: SubTask[], c: ReviewComment): SubTask | undefined {
  return c.path ? subTasks.find((t) => t.ownedPaths.some((p) => pathIsUnder(c.path!, p))) : undefined;
}

/** The reply each comment gets, from what its sub-task did and what the round pushed. */
export function repliesOf(round: ReviewRound): ReviewReply[] {
  return round.comments.map((c) => {
    const done = round.subTasks.find((s) => s.comments.includes(c.id));
    const base = {
      commentId: c.id,
      author: c.author,
      ...(c.path && { path: c.path }),
      ...(c.line && { line: c.line }),
    };
    return { ...base, reply: replyText(round, done) };
  });
}

function replyText(round: ReviewRound, done: RevisionOutcome | undefined): string {
  if (!done) return 'no change: an approval asks for none';
  if (done.state === 'failed') return `no change: sub-task ${done.subTaskId} failed (${done.reason ?? 'no reason'})`;
  if (done.state === 'unchanged')
    return `no change: sub-task ${done.subTaskId}'s agent changed nothing${done.reason ? ` (${done.reason})` : ''}`;
  if (round.outcome === 'pushed')
    return `changed ${done.filesChanged} file(s) (sub-task ${done.subTaskId}) in ${round.pushedSha}`;
  return `no change pushed: ${round.message ?? 'the round did not push'}`;
}
