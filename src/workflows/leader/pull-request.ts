/**
 * A run that works with the forge (PATCHES.pullRequests): it takes its objective from an issue
 * and says on the issue which run works on it, and it lands as a pull request: the tested commit
 * pushed to the PR's branch with the usual compare-and-swap, then exactly one PR opened (or the
 * one already open for that branch reused: a retried activity, a worker killed after GitHub made
 * it) with a body Flotilla writes. The run ends there, with outcome pr-opened.
 */
import { CancellationScope, patched, setCurrentDetails, uuid4 } from '@temporalio/workflow';
import type { OpenPullRequestInput } from '../../activities/forge';
import type { ForgeAddress } from '../../contracts/forge-address';
import { issueObjective } from '../../contracts/prompts';
import type { IssueRef, RunResult } from '../../contracts/reports';
import { type LeaderRequest, forgeOf, issueOf } from '../../contracts/request';
import { firstLine } from '../../contracts/text';
import { PATCHES } from '../patches';
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

  /** Pushes the tested commit to the PR's branch, opens (or reuses) the PR, and ends the run. */
  async land(tested: Tested, expectedSha: string | null): Promise<RunResult> {
    const { run, req } = this;
    await pushTo(run, req, tested.sha, expectedSha);
    const input = this.openInput(tested);
    const opened = await CancellationScope.nonCancellable(() => hostless(req).openPullRequest(input));
    const pr = { number: opened.number, url: opened.url, branch: input.head, base: input.base };
    run.status.pullRequest = run.result.pullRequest = pr;
    const how = opened.reused ? 'reused' : 'opened';
    setCurrentDetails(`**Pull request ${how}**: ${pr.url} (${pr.branch} into ${pr.base})`);
    return run.succeed('pr-opened', `${tested.landed}, tests passed, pull request #${pr.number} ${how}: ${pr.url}`);
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
        costUsd: run.spent(),
        ...(issue && {
          issue: { number: issue.number, ...(issue.forge.repo !== forge.repo && { repo: issue.forge.repo }) },
        }),
      },
    };
  }
}
