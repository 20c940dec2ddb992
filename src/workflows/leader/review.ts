/**
 * The review phase (request.review): once a run has pushed, it waits for review comments instead
 * of ending. Each batch starts a revision round: the comments go to the sub-tasks whose owned
 * paths they touch (the rest to the reviser: the first sub-task, with review.reviser's agent when
 * given), as one more attempt of each from the pushed commit (the living plan's retry machinery);
 * the result is integrated, tested and pushed to the same branch with the compare-and-swap
 * expecting the last pushed commit. Each comment gets a reply saying what was done.
 *
 * Every source of comments comes through one door, `take` (after `problem`): the `revise` and
 * `finish` messages, and with land: pr the PR's poller (pr-review.ts), with the same events. A
 * round's push goes through its Landing, so a run on a PR pushes (and reports) its own way.
 */
import { condition, setCurrentDetails } from '@temporalio/workflow';
import type { LeaderRequest, ReviewSpec } from '../../contracts/request';
import {
  type ReviewComment,
  type ReviewEvent,
  type ReviewReport,
  type ReviewRound,
  type ReviseInput,
  type RevisionOutcome,
  ownerOf,
  repliesOf,
  reviewComments,
  routeComments,
} from '../../contracts/review';
import { clip } from '../../contracts/text';
import { msOfMinutes, timerMs } from '../durations';
import type { PlanRun } from './plan-run';
import { landRound } from './rounds';
import type { Run } from './run';
import { pushTo } from './steps';

/** What the inbox asks of the review phase: whether it takes an event now (pure: it is the update's validator), and taking it. */
export interface Reviewable {
  commentsEvent(input: ReviseInput): ReviewEvent;
  problem(event: ReviewEvent): string | undefined;
  take(event: ReviewEvent): string;
}

/** How a round's tested commit lands, and what follows a round's end; the default pushes to the run's branch. */
export interface Landing {
  /** Pushes the tested commit with the compare-and-swap against `expected`; returns what the branch holds. */
  push(tested: { sha: string; testSummary: string }, expected: string): Promise<string>;
  roundEnded?(round: ReviewRound): Promise<void>;
}

export class ReviewPhase implements Reviewable {
  private readonly report: ReviewReport;
  private readonly spec: ReviewSpec;
  /** Comments taken, for the loop to start their round. */
  private pending?: Extract<ReviewEvent, { kind: 'comments' }>;
  private finished?: Extract<ReviewEvent, { kind: 'finish' }>;
  private inRound = false;

  constructor(
    private readonly run: Run,
    private readonly req: LeaderRequest,
    private readonly living: PlanRun,
    pushedSha: string,
    private readonly landing: Landing = { push: (t, expected) => pushTo(run, req, t.sha, expected) },
  ) {
    this.spec = req.review!;
    this.report = { rounds: [], maxRounds: this.spec.rounds, headSha: pushedSha };
    run.status.review = run.result.review = this.report;
    run.crew.review = this;
  }

  commentsEvent(input: ReviseInput): ReviewEvent {
    const by = input.by ?? 'unknown';
    return { kind: 'comments', by, comments: reviewComments(input, this.report.rounds.length + 1, by) };
  }

  problem(event: ReviewEvent): string | undefined {
    const { rounds, maxRounds } = this.report;
    if (this.finished) return `the review phase has ended (${this.finished.reason})`;
    const under =
      this.inRound || this.pending ? `review round ${rounds.length + (this.pending ? 1 : 0)} is under way` : '';
    if (event.kind === 'finish') return under ? `${under}; finish once it has ended` : undefined;
    if (under) return `${under}; send more comments once it has ended (the status says when)`;
    if (rounds.length >= maxRounds)
      return `the run has taken its ${maxRounds} review round(s) (review.rounds); end it with flotilla finish ${this.run.id}`;
    const budget = this.req.limits.runBudgetUsd;
    if (budget !== undefined && this.run.spent() >= budget)
      return `the run's budget of $${budget.toFixed(2)} is spent ($${this.run.spent().toFixed(2)}); end it with flotilla finish ${this.run.id}`;
    if (event.comments.every((c) => c.kind === 'approved')) return 'only approvals: there is nothing to revise';
    return undefined;
  }

  take(event: ReviewEvent): string {
    if (event.kind === 'finish') {
      this.finished = event;
      return `the review phase ends; the run ends with its last push (${this.report.headSha})`;
    }
    this.pending = event;
    const to = [...this.routed(event.comments).keys()];
    return `review round ${this.report.rounds.length + 1} starts: its comments go to sub-task(s) ${to.join(', ')}`;
  }

  /** Whether the phase waits for comments: no round under way or about to start, not ended. */
  get idle(): boolean {
    return !this.inRound && !this.pending && !this.finished;
  }

  get ended(): boolean {
    return this.finished !== undefined;
  }

  /** Waits for comments and runs their rounds, until a person finishes the phase or it times out. */
  async wait(): Promise<void> {
    const timeoutMs = timerMs(msOfMinutes(this.spec.timeoutMinutes));
    this.show(true);
    for (;;) {
      const woken = await condition(() => this.pending !== undefined || this.finished !== undefined, timeoutMs, {
        summary: 'review: waiting for comments',
      });
      if (!woken)
        this.finished = {
          kind: 'finish',
          by: 'timeout',
          reason: `no comment in ${this.spec.timeoutMinutes} minute(s)`,
        };
      if (this.finished) break;
      await this.round(this.pending!);
      this.show(false);
    }
    Object.assign(this.report, { waiting: false, commands: undefined });
    Object.assign(this.report, { endedBy: this.finished.by, ended: clip(this.finished.reason, 300) });
    setCurrentDetails('');
  }

  /** What the review phase ended with, for the run's last message. */
  summary(): string {
    const n = this.report.rounds.length;
    const pushed = this.report.rounds.filter((r) => r.outcome === 'pushed').length;
    return `${n} review round(s), ${pushed} pushed; review ended by ${this.report.endedBy}`;
  }

  private async round(event: Extract<ReviewEvent, { kind: 'comments' }>): Promise<void> {
    const { run, report } = this;
    const number = report.rounds.length + 1;
    const round: ReviewRound = {
      round: number,
      by: event.by,
      startedAt: Date.now(),
      comments: event.comments,
      subTasks: [],
      replies: [],
    };
    report.rounds.push(round);
    Object.assign(this, { inRound: true, pending: undefined });
    Object.assign(report, { waiting: false, commands: undefined });
    const routed = this.routed(event.comments);
    run.notify('review-round-started', `review round ${number} started: ${[...routed.keys()].join(', ')}`, [
      `flotilla status ${run.id}`,
    ]);
    const heading = `This is review round ${number} of this run, in a fresh checkout of the commit it pushed. Reviewers commented on that change; address each comment below within your owned paths. If a comment asks for nothing you should change, change nothing and say why in your final message.`;
    const outcome = await this.living.revise(routed, heading);
    round.subTasks = [...routed].map(([id, { comments }]) => this.outcomeOf(id, comments));
    await this.land(round, outcome);
    round.replies = repliesOf(round);
    round.endedAt = Date.now();
    await this.landing.roundEnded?.(round);
    this.inRound = false;
    run.notify(
      'review-round-ended',
      `review round ${number} ended ${round.outcome}: ${round.message}`,
      this.commands(),
    );
  }

  /** Pushes the round's tested commit (through the push gate), or says why there is nothing to push. */
  private async land(round: ReviewRound, outcome: Awaited<ReturnType<PlanRun['revise']>>): Promise<void> {
    const push = (tested: { sha: string; testSummary: string }, expected: string) =>
      this.landing.push(tested, expected);
    const landed = await landRound(this.run, this.req, this.living, this.report.headSha, outcome, push);
    Object.assign(round, landed);
    if (landed.pushedSha) this.report.headSha = landed.pushedSha;
  }

  /** The comments per sub-task, among those integrated; the reviser's agent for comments on paths a sub-task does not own. */
  private routed(comments: ReviewComment[]) {
    const integrated = this.living.schedule
      .all()
      .filter((e) => e.state === 'integrated')
      .map((e) => e.task);
    const routes = new Map<string, { comments: ReviewComment[]; agent?: LeaderRequest['agent'] }>();
    for (const [id, given] of routeComments(integrated, comments)) {
      const task = integrated.find((t) => t.id === id)!;
      const general = given.some((c) => ownerOf(integrated, c) !== task);
      routes.set(id, { comments: given, ...(general && this.spec.reviser && { agent: this.spec.reviser }) });
    }
    return routes;
  }

  /** What a sub-task did with its comments, from its round attempt's line and report. */
  private outcomeOf(id: string, comments: ReviewComment[]): RevisionOutcome {
    const line = this.living.lines.get(id)!;
    const report = [...this.run.result.workers].reverse().find((w) => w.workerId === line.id);
    const base = { subTaskId: id, attemptId: line.id, comments: comments.map((c) => c.id), costUsd: line.costUsd };
    if (line.state === 'failed' || !report)
      return { ...base, state: 'failed', filesChanged: 0, reason: clip(line.reason ?? 'it failed', 300) };
    const changed = report.commits > 0 && report.filesChanged > 0;
    return { ...base, state: changed ? 'changed' : 'unchanged', filesChanged: report.filesChanged };
  }

  /** The status and the Web UI while the run waits for comments; on entering, the webhooks hear it too. */
  private show(entering: boolean): void {
    const { run, report } = this;
    run.status.phase = 'review';
    Object.assign(report, { waiting: true, commands: this.commands() });
    const left = report.maxRounds - report.rounds.length;
    setCurrentDetails(
      [
        `**Waiting for review** of ${report.headSha} on ${run.result.targetRef} (${left} round(s) left)`,
        ...report.commands!.map((c) => `\`${c}\``),
      ].join('\n'),
    );
    if (entering) run.notify('gate', `pushed ${report.headSha}; the run waits for review`, report.commands!);
  }

  private commands(): string[] {
    const id = this.run.id;
    return [`flotilla revise ${id} --comment "what to change" [--path FILE --line N]`, `flotilla finish ${id}`];
  }
}
