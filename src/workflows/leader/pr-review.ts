/**
 * Review on the pull request (land: pr with request.review, PATCHES.pullRequestReview): once its
 * PR is open the run waits in the review phase (review.ts) and reads the PR itself, with an
 * activity between durable timers: each batch of new review comments, comments and "changes
 * requested" reviews goes through the review phase's one door as a revision round, whose commit
 * is pushed to the PR's branch (ForgeRun.pushHead), answered on each comment and written into the
 * PR's body. The PR merged or closed ends the phase, and the run.
 *
 * A worker's webhook receiver (src/webhooks/receiver.ts) can have it read at once, so that the
 * poll's interval may be long.
 *
 * The forge leaves out Flotilla's own comments (they carry its mark), so its replies never start
 * a round; approvals alone start nothing. The cursor of what was read lives in the workflow, so a
 * worker restarted mid-wait reads on from it; reading twice is harmless (the cursor only moves
 * once a batch is taken). Comment text stays untrusted: the round delimits it (contracts/review).
 */
import { condition, isCancellation, log } from '@temporalio/workflow';
import type { PolledPullRequest } from '../../activities/forge';
import type { PullRequestRef, RunResult } from '../../contracts/reports';
import { type LeaderRequest, forgeOf } from '../../contracts/request';
import type { ReviewComment, ReviewEvent, ReviewRound } from '../../contracts/review';
import { clip } from '../../contracts/text';
import { msOfSeconds } from '../durations';
import type { PlanRun } from './plan-run';
import type { ForgeRun, Tested } from './pull-request';
import { type Landing, ReviewPhase } from './review';
import type { Run } from './run';
import { hostless } from './steps';

/** The wait between two reads of a quiet PR grows to this (a week of waiting stays a short history). */
const QUIET_POLL_MS = 15 * 60_000;
/** A comment id the forge gave (`review-comment:<n>`, ...): the comments a reply can go back to. */
const FORGE_COMMENT = /^(review-comment|issue-comment|review):\d+$/;

interface Reviewing {
  run: Run;
  req: LeaderRequest;
  living: PlanRun;
  pr: ForgeRun;
  tested: Tested;
}

/** The review phase of a run whose PR is open; the run's result once the PR is merged or closed (or the phase ends otherwise). */
export async function reviewPullRequest(at: Reviewing, opened: string): Promise<RunResult> {
  const { run, req, living, tested } = at;
  const watch = new PullRequestWatch(run, req, at.pr);
  const review = new ReviewPhase(run, req, living, tested.sha, watch);
  await Promise.all([review.wait(), watch.poll(review)]);
  const ref = run.result.pullRequest!;
  const now = watch.state ? `pull request #${ref.number} ${watch.state}: ${ref.url}` : opened;
  return run.succeed('pr-opened', `${now}; ${review.summary()}`);
}

class PullRequestWatch implements Landing {
  /** What the run has read of the PR's review activity: the forge's cursor. */
  private cursor?: string;
  /** Set once the run saw the PR merged or closed. */
  state?: PullRequestRef['state'];
  /** Set by the webhook receiver's signal: read the PR now, not at the next poll. */
  private nudged = false;

  constructor(
    private readonly run: Run,
    private readonly req: LeaderRequest,
    private readonly pr: ForgeRun,
  ) {
    run.crew.readPullRequest = () => void (this.nudged = true);
  }

  private get number(): number {
    return this.run.result.pullRequest!.number;
  }

  push(tested: { sha: string; testSummary: string }, expected: string): Promise<string> {
    return this.pr.pushHead(tested, expected);
  }

  /** Each comment from the PR hears what its round did; the PR's body says the round. */
  async roundEnded(round: ReviewRound): Promise<void> {
    const forge = forgeOf(this.req)!;
    for (const reply of round.replies.filter((r) => FORGE_COMMENT.test(r.commentId))) {
      const body = `Flotilla, review round ${round.round}: ${reply.reply}`;
      await this.quietly(() =>
        hostless(this.req).replyToComment({ forge, number: this.number, commentId: reply.commentId, body }),
      );
    }
    await this.quietly(() => this.pr.updateBody());
  }

  /** Reads the PR while the phase waits for comments, until it ends: a round per batch, the end once the PR is merged or closed. */
  async poll(review: ReviewPhase): Promise<void> {
    const baseMs = msOfSeconds(this.req.review!.pollSeconds ?? 30);
    let waitMs = baseMs;
    for (;;) {
      await condition(() => review.idle || review.ended);
      if (review.ended) return;
      this.nudged = false;
      const polled = await hostless(this.req).pollPullRequest({
        forge: forgeOf(this.req)!,
        number: this.number,
        ...(this.cursor && { cursor: this.cursor }),
      });
      // A round that `flotilla revise` started meanwhile: read again once it has ended.
      if (!review.idle) continue;
      this.cursor = polled.cursor;
      if (polled.state !== 'open') return void this.closed(review, polled.state);
      if (await this.offer(review, polled.comments)) {
        waitMs = baseMs;
        continue;
      }
      await condition(() => !review.idle || this.nudged, waitMs);
      if (!this.nudged) waitMs = Math.min(waitMs * 2, Math.max(baseMs, QUIET_POLL_MS));
    }
  }

  /** The batch as a round, when it has anything to revise and the phase takes it; otherwise each comment hears why not. */
  private async offer(review: ReviewPhase, comments: ReviewComment[]): Promise<boolean> {
    const revisable = comments.filter((c) => c.kind !== 'approved');
    if (!revisable.length) return false;
    const by = clip([...new Set(revisable.map((c) => c.author))].join(', '), 100);
    const event: ReviewEvent = { kind: 'comments', by, comments: revisable };
    const problem = review.problem(event);
    if (!problem) {
      review.take(event);
      return true;
    }
    const forge = forgeOf(this.req)!;
    for (const c of revisable)
      await this.quietly(() =>
        hostless(this.req).replyToComment({
          forge,
          number: this.number,
          commentId: c.id,
          body: `Flotilla: no review round for this comment: ${problem}`,
        }),
      );
    return false;
  }

  private closed(review: ReviewPhase, state: Exclude<PolledPullRequest['state'], 'open'>): void {
    this.state = state;
    const ref = this.run.result.pullRequest!;
    ref.state = state;
    review.take({ kind: 'finish', by: 'the pull request', reason: `pull request #${ref.number} was ${state}` });
  }

  /** A reply or a body that cannot be written is logged: it never fails the run (its result says the same). */
  private async quietly(step: () => Promise<void>): Promise<void> {
    try {
      await step();
    } catch (err) {
      if (isCancellation(err)) throw err;
      log.warn('the pull request could not be written to', { error: err instanceof Error ? err.message : String(err) });
    }
  }
}
