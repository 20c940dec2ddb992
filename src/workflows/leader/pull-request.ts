/**
 * A run that works with the forge (PATCHES.pullRequests): it takes its objective from an issue
 * and says on the issue which run works on it, and it lands as a pull request: the tested commit
 * pushed to the PR's branch with the usual compare-and-swap, then exactly one PR opened (or the
 * one already open for that branch reused: a retried activity, a worker killed after GitHub made
 * it) with a body Flotilla writes. The run ends there, with outcome pr-opened; with land.checks
 * (PATCHES.prChecks) once the PR's checks have passed or its CI-fix rounds have done what they
 * could (checks.ts); with `review` (PATCHES.pullRequestReview) it then waits for the PR's review
 * (pr-review.ts) and ends once the PR is merged or closed, its body kept up to date.
 */
import { CancellationScope, patched, setCurrentDetails, uuid4 } from '@temporalio/workflow';
import type { OpenPullRequestInput } from '../../activities/forge';
import type { PullRequestFacts } from '../../forge/pr-body';
import type { ForgeAddress } from '../../contracts/forge-address';
import { issueObjective } from '../../contracts/prompts';
import type { IssueRef, RunResult } from '../../contracts/reports';
import { type LeaderRequest, forgeOf, issueOf } from '../../contracts/request';
import { firstLine } from '../../contracts/text';
import { PATCHES } from '../patches';
import { CheckWatch } from './checks';
import type { PlanRun } from './plan-run';
import { reviewPullRequest } from './pr-review';
import type { Run } from './run';
import { hostless, pushTo } from './steps';

/** What the run's end says of the tested commit: its SHA, its tests, and what it holds. */
export interface Tested {
  sha: string;
  testSummary: string;
  landed: string;
}

export class ForgeRun {
  private issue?: IssueRef & { forge: ForgeAddress; added: string };
  /** The branch the PR merges into; undefined when the run does not land as a PR. */
  private base?: string;
  /** The last commit pushed to the PR's branch, and its tests: what the PR's body says. */
  private tested?: Pick<Tested, 'sha' | 'testSummary'>;
  /** The PR's checks after each push (land.checks), once the PR is open. */
  private checkWatch?: CheckWatch;

  private constructor(
    private readonly run: Run,
    private readonly req: LeaderRequest,
  ) {
    const land = req.land;
    if (land?.kind !== 'pr') return;
    // The PR's branch is where the run pushes; the PR merges it into the target ref.
    const base = run.result.targetRef;
    const branch = land.branch ?? `flotilla/${run.key}`;
    run.result.targetRef = run.status.targetRef = branch;
    this.base = base;
  }

  /** The forge steps of a run that has any (an issue, land: pr); undefined for one that has none, as every run before them. */
  static of(run: Run, req: LeaderRequest): ForgeRun | undefined {
    const wants = req.land?.kind === 'pr' || req.issue !== undefined;
    return wants && patched(PATCHES.pullRequests.id) ? new ForgeRun(run, req) : undefined;
  }

  /** The issue the run took, for the run that continues it when it rolls over. */
  get takenIssue(): ForgeRun['issue'] {
    return this.issue && { ...this.issue };
  }

  /**
   * The request with the issue's title and body as its objective, the issue told which run works
   * on it; a run that rolled over takes up the issue its chain took (`taken`), with no comment.
   */
  async takeIssue(taken?: ForgeRun['issue']): Promise<LeaderRequest> {
    const { run, req } = this;
    const at = issueOf(req);
    if (!at) return req;
    if (taken) {
      this.issue = taken;
      return { ...req, objective: run.status.objective };
    }
    const forge = hostless(req);
    const issue = await forge.readIssue(at);
    await forge.commentOnIssue({ ...at, runId: run.id });
    this.issue = { number: issue.number, url: issue.url, title: issue.title, forge: at.forge, added: req.objective };
    const ref = { number: issue.number, url: issue.url, title: issue.title };
    run.status.issue = run.result.issue = ref;
    const objective = issueObjective(issue, req.objective, uuid4());
    run.status.objective = objective;
    return { ...req, objective };
  }

  /** Whether the run lands as a pull request. */
  get opensPullRequest(): boolean {
    return this.base !== undefined;
  }

  /**
   * Pushes the tested commit to the PR's branch and opens (or reuses) the PR; with land.checks,
   * awaits its checks and CI-fix rounds; then the run ends, or, with `review`, waits for the PR's
   * review (pr-review.ts) until it is merged or closed.
   */
  async land(tested: Tested, expectedSha: string | null, living: PlanRun): Promise<RunResult> {
    const { run, req } = this;
    await this.pushHead(tested, expectedSha);
    const input = this.openInput(tested);
    const opened = await CancellationScope.nonCancellable(() => hostless(req).openPullRequest(input));
    const pr = { number: opened.number, url: opened.url, branch: input.head, base: input.base };
    run.status.pullRequest = run.result.pullRequest = pr;
    const how = opened.reused ? 'reused' : 'opened';
    setCurrentDetails(`**Pull request ${how}**: ${pr.url} (${pr.branch} into ${pr.base})`);
    const checked = await this.awaitChecks(tested, living);
    const message = `${tested.landed}, tests passed, pull request #${pr.number} ${how}: ${pr.url}${checked.message}`;
    if (req.review && patched(PATCHES.pullRequestReview.id))
      return await reviewPullRequest({ run, req, living, pr: this, tested: { ...tested, sha: checked.sha } }, message);
    return run.succeed('pr-opened', message);
  }

  /**
   * Every push to the PR's branch goes through here, the first and each review round's: the
   * compare-and-swap against `expectedSha`, then (once they are awaited) the checks on it and
   * their CI-fix rounds; returns what the branch holds. The tested commit is kept for the PR's body.
   */
  async pushHead(tested: Pick<Tested, 'sha' | 'testSummary'>, expectedSha: string | null): Promise<string> {
    const pushed = await pushTo(this.run, this.req, tested.sha, expectedSha);
    this.tested = { sha: pushed, testSummary: tested.testSummary };
    return this.checkWatch ? await this.checkWatch.afterPush(pushed, tested.testSummary) : pushed;
  }

  /** Rewrites the PR's body from the run as it is now: the last pushed commit's tests, the plan's costs, the rounds, the checks. */
  async updateBody(): Promise<void> {
    const { run, req } = this;
    const number = run.result.pullRequest!.number;
    const facts = this.factsOf(this.tested!);
    await CancellationScope.nonCancellable(() =>
      hostless(req).updatePullRequest({ forge: forgeOf(req)!, number, facts }),
    );
  }

  /**
   * With land.checks (PATCHES.prChecks): waits for the checks on the pushed commit and runs the
   * CI-fix rounds (checks.ts), keeping the PR's body current; what the branch then holds, and
   * what the run's message adds. The watch stays for the pushes of review rounds (pushHead).
   */
  private async awaitChecks(tested: Tested, living: PlanRun): Promise<{ sha: string; message: string }> {
    const { run, req } = this;
    const spec = req.land?.kind === 'pr' ? req.land.checks : undefined;
    if (!spec || !patched(PATCHES.prChecks.id)) return { sha: tested.sha, message: '' };
    const update = async (sha: string, testSummary: string) => {
      this.tested = { sha, testSummary };
      await this.updateBody();
    };
    const context = { run, req, living, spec, forge: forgeOf(req)!, base: this.base!, update };
    const watch = new CheckWatch(context, tested.sha);
    const sha = await watch.afterPush(tested.sha, tested.testSummary);
    this.checkWatch = watch;
    return { sha, message: `; ${watch.summary()}` };
  }

  private openInput(tested: Tested): OpenPullRequestInput {
    const { run, req, issue } = this;
    const land = req.land as Extract<LeaderRequest['land'], { kind: 'pr' }>;
    return {
      forge: forgeOf(req)!,
      head: run.result.targetRef,
      base: this.base!,
      title: land.title ?? (firstLine(issue?.title ?? req.objective) || 'Flotilla run'),
      draft: land.draft,
      ...(land.labels && { labels: land.labels }),
      ...(land.reviewers && { reviewers: land.reviewers }),
      facts: this.factsOf(tested),
    };
  }

  /** What the PR's body says of the run at the tested commit. */
  private factsOf(tested: Pick<Tested, 'sha' | 'testSummary'>): PullRequestFacts {
    const { run, req, issue } = this;
    const forge = forgeOf(req)!;
    const objective = issue ? [issue.title, issue.added].filter(Boolean).join('\n\n') : req.objective;
    return {
      runId: run.id,
      objective,
      sha: tested.sha,
      subTasks: run.result.workers.map((w) => ({
        id: w.workerId,
        status: w.status,
        costUsd: w.costUsd,
        ...(w.summary && { summary: w.summary }),
        ...(w.reason && { reason: w.reason }),
      })),
      testSummary: tested.testSummary,
      ...(run.status.dropped?.length && { dropped: run.status.dropped }),
      ...(run.result.checks && { checks: run.result.checks }),
      ...(run.result.review?.rounds.length && { rounds: roundsOf(run) }),
      costUsd: run.spent(),
      ...(issue && {
        issue: { number: issue.number, ...(issue.forge.repo !== forge.repo && { repo: issue.forge.repo }) },
      }),
    };
  }
}

/** The review rounds so far, as the PR's body says them. */
function roundsOf(run: Run): PullRequestFacts['rounds'] {
  return (run.result.review?.rounds ?? []).map((r) => ({
    round: r.round,
    comments: r.comments.length,
    outcome: r.outcome ?? 'failed',
    message: r.message ?? '',
  }));
}
