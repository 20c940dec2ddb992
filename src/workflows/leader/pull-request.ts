/**
 * A run that works with the forge (PATCHES.pullRequests): it takes its objective from an issue
 * and says on the issue which run works on it, and it lands as a pull request: the tested commit
 * pushed to the PR's branch with the usual compare-and-swap, then exactly one PR opened (or the
 * one already open for that branch reused: a retried activity, a worker killed after GitHub made
 * it) with a body Flotilla writes. The run ends there, with outcome pr-opened; with land.checks,
 * once the PR's checks have passed or its CI-fix rounds have done what they could (checks.ts).
 */
import { CancellationScope, patched, setCurrentDetails, uuid4 } from '@temporalio/workflow';
import type { OpenPullRequestInput } from '../../activities/forge';
import type { ForgeAddress } from '../../contracts/forge-address';
import { issueObjective } from '../../contracts/prompts';
import type { IssueRef, RunResult } from '../../contracts/reports';
import { type LeaderRequest, forgeOf, issueOf } from '../../contracts/request';
import { firstLine } from '../../contracts/text';
import { PATCHES } from '../patches';
import { CheckWatch } from './checks';
import type { PlanRun } from './plan-run';
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
  /** The PR's checks after each push (land.checks), once the PR is open. */
  checkWatch?: CheckWatch;

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

  /** The request with the issue's title and body as its objective, the issue told which run works on it. */
  async takeIssue(): Promise<LeaderRequest> {
    const { run, req } = this;
    const at = issueOf(req);
    if (!at) return req;
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
   * Pushes the tested commit to the PR's branch, opens (or reuses) the PR, and ends the run; with
   * land.checks, once its checks have passed or CI-fix rounds have done what they could (`living`).
   */
  async land(tested: Tested, expectedSha: string | null, living?: PlanRun): Promise<RunResult> {
    const { run, req } = this;
    await pushTo(run, req, tested.sha, expectedSha);
    const input = this.openInput(tested);
    const opened = await CancellationScope.nonCancellable(() => hostless(req).openPullRequest(input));
    const pr = { number: opened.number, url: opened.url, branch: input.head, base: input.base };
    run.status.pullRequest = run.result.pullRequest = pr;
    const how = opened.reused ? 'reused' : 'opened';
    setCurrentDetails(`**Pull request ${how}**: ${pr.url} (${pr.branch} into ${pr.base})`);
    const checked = living ? await this.awaitChecks(tested, living) : '';
    return run.succeed(
      'pr-opened',
      `${tested.landed}, tests passed, pull request #${pr.number} ${how}: ${pr.url}${checked}`,
    );
  }

  /**
   * With land.checks (PATCHES.prChecks): waits for the checks on the pushed commit and runs the
   * CI-fix rounds (checks.ts), keeping the PR's body current; what the run's message adds.
   * `checkWatch` is kept for rounds that push later (review rounds call its afterPush).
   */
  private async awaitChecks(tested: Tested, living: PlanRun): Promise<string> {
    const { run, req } = this;
    const spec = req.land?.kind === 'pr' ? req.land.checks : undefined;
    if (!spec || !patched(PATCHES.prChecks.id)) return '';
    const update = async (sha: string, testSummary: string) => {
      const input = this.openInput({ ...tested, sha, testSummary });
      await CancellationScope.nonCancellable(() => hostless(req).openPullRequest(input));
    };
    const context = { run, req, living, spec, forge: forgeOf(req)!, base: this.base!, update };
    this.checkWatch = new CheckWatch(context, tested.sha);
    await this.checkWatch.afterPush(tested.sha, tested.testSummary);
    return `; ${this.checkWatch.summary()}`;
  }

  private openInput(tested: Tested): OpenPullRequestInput {
    const { run, req, issue } = this;
    const land = req.land as Extract<LeaderRequest['land'], { kind: 'pr' }>;
    const forge = forgeOf(req)!;
    const objective = issue ? [issue.title, issue.added].filter(Boolean).join('\n\n') : req.objective;
    return {
      forge,
      head: run.result.targetRef,
      base: this.base!,
      title: land.title ?? (firstLine(issue?.title ?? req.objective) || 'Flotilla run'),
      draft: land.draft,
      ...(land.labels && { labels: land.labels }),
      ...(land.reviewers && { reviewers: land.reviewers }),
      facts: {
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
        costUsd: run.spent(),
        ...(issue && {
          issue: { number: issue.number, ...(issue.forge.repo !== forge.repo && { repo: issue.forge.repo }) },
        }),
      },
    };
  }
}
