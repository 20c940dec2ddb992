/**
 * Checks after the push (land: pr with land.checks; PATCHES.prChecks). After each push to the
 * PR's branch the run reads the forge's check runs and commit statuses on the pushed commit,
 * with a durable timer between reads, until the required ones (all of them, when none is known
 * to be required) have completed or the wait times out. Failing ones start a CI-fix round: one
 * more attempt of the first integrated sub-task (with land.checks.fixer's agent when given),
 * told each failing check's name and log excerpt as untrusted text, which must map every check
 * it was given to a fix or to "external" with a reason, in a file the host validates
 * (activities/ci-fix.ts). A round whose mapping is missing or invalid is refused: nothing is
 * pushed. Otherwise its commit is integrated, tested and pushed like a review round's
 * (rounds.ts), and its checks are awaited in turn. A check attributed as external is shown and
 * never given to another round; land.checks.rounds and the run's budget bound the rounds.
 */
import { setCurrentDetails, sleep } from '@temporalio/workflow';
import {
  type CheckOutcome,
  type ChecksReport,
  type CiFixMapping,
  type CiFixRound,
  type FailingCheck,
  PASSING_CONCLUSIONS,
  checkLine,
} from '../../contracts/checks';
import type { SubTaskStatus } from '../../contracts/messages';
import type { SubTaskReport } from '../../contracts/reports';
import type { ChecksSpec, LeaderRequest } from '../../contracts/request';
import { clip } from '../../contracts/text';
import type { Check, ForgeAddress } from '../../forge/types';
import { msOfMinutes, msOfSeconds } from '../durations';
import type { PlanRun } from './plan-run';
import { budgetSpent } from './reports';
import { landRound } from './rounds';
import type { Run } from './run';
import { hostless } from './steps';

/** Where the checks are read and what the run tells the PR once they change. */
export interface ChecksContext {
  run: Run;
  req: LeaderRequest;
  living: PlanRun;
  spec: ChecksSpec;
  forge: ForgeAddress;
  /** The branch the PR merges into: its protection says which checks are required. */
  base: string;
  /** Brings the PR's body up to date: the branch is at `sha`, whose tests said `testSummary`. */
  update(sha: string, testSummary: string): Promise<void>;
}

export class CheckWatch {
  private readonly report: ChecksReport;
  /** Checks a round attributed as external, and why: shown, never given to another round. */
  private readonly external = new Map<string, string>();

  constructor(
    private readonly ctx: ChecksContext,
    pushedSha: string,
  ) {
    this.report = { headSha: pushedSha, checks: [], waiting: false, rounds: [], maxRounds: ctx.spec.rounds };
    ctx.run.status.checks = ctx.run.result.checks = this.report;
  }

  /**
   * Call after each push to the PR's branch (the run's first, a review round's): waits for the
   * checks on `sha`, fixes failing ones in CI-fix rounds, and returns what the branch holds then.
   */
  async afterPush(sha: string, testSummary: string): Promise<string> {
    const { report } = this;
    let tested = { sha, testSummary };
    report.headSha = sha;
    for (;;) {
      const failing = await this.settled(tested.sha);
      await this.ctx.update(tested.sha, tested.testSummary);
      if (!failing) break;
      const stop = this.noRound(failing);
      if (stop) return this.end(stop);
      const round = await this.fixRound(tested.sha, failing);
      if (!round.pushedSha) return this.end(`CI-fix round ${round.round} ${round.outcome}: ${round.message}`);
      tested = { sha: round.pushedSha, testSummary: round.testSummary };
      report.headSha = round.pushedSha;
    }
    return report.headSha;
  }

  /** The checks in one line, for the run's last message. */
  summary(): string {
    const { checks, rounds, ended } = this.report;
    const passed = checks.filter((c) => c.passed).length;
    return `checks: ${passed} of ${checks.length} passed${rounds.length ? `, ${rounds.length} CI-fix round(s)` : ''}${ended ? ` (${ended})` : ''}`;
  }

  private end(why: string): string {
    this.report.ended = clip(why, 1000);
    return this.report.headSha;
  }

  /**
   * Reads the checks on `sha` until those that count have completed: the failing ones not
   * attributed as external, or undefined when there are none (or the wait timed out).
   */
  private async settled(sha: string): Promise<FailingCheck[] | undefined> {
    const { req, spec, forge, base } = this.ctx;
    const deadline = Date.now() + msOfMinutes(spec.timeoutMinutes);
    this.show(sha, true);
    let checks: Check[];
    for (;;) {
      checks = await hostless(req).readChecks({ forge, sha, base });
      this.record(checks);
      if (checks.length && counted(checks).every((c) => c.status === 'completed')) break;
      if (Date.now() >= deadline) {
        this.show(sha, false);
        const pending = counted(checks).filter((c) => c.status !== 'completed');
        const what = pending.length ? `for ${pending.map((c) => c.name).join(', ')}` : 'and no check was reported';
        this.end(`waited ${spec.timeoutMinutes} minute(s) for the checks on ${sha} ${what}`);
        return undefined;
      }
      await sleep(Math.min(msOfSeconds(spec.pollSeconds), Math.max(1, deadline - Date.now())));
    }
    this.show(sha, false);
    const failing = counted(checks).filter((c) => !passes(c) && !this.external.has(c.name));
    const external = counted(checks).filter((c) => !passes(c) && this.external.has(c.name));
    if (!failing.length)
      this.end(external.length ? `failing only as external: ${external.map((c) => c.name).join(', ')}` : 'passed');
    return failing.length ? failing.map(failingOf) : undefined;
  }

  /** Why no round starts for these failing checks, when none may. */
  private noRound(failing: FailingCheck[]): string | undefined {
    const { run, req, spec } = this.ctx;
    const names = failing.map((c) => c.name).join(', ');
    if (this.report.rounds.length >= spec.rounds)
      return `${names} failing, and the run has taken its ${spec.rounds} CI-fix round(s) (land.checks.rounds)`;
    const spent = budgetSpent(req.limits, run.spent());
    return spent && `${names} failing; no CI-fix round: ${spent}`;
  }

  /** One CI-fix round on `sha`'s failing checks: its commit pushed, or why not. */
  private async fixRound(sha: string, failing: FailingCheck[]): Promise<CiFixRound & { testSummary: string }> {
    const { run, req, living, spec } = this.ctx;
    const fixer = living.schedule.all().find((e) => e.state === 'integrated')!.task.id;
    const round: CiFixRound = {
      round: this.report.rounds.length + 1,
      sha,
      checks: failing.map((c) => c.name),
      subTaskId: fixer,
    };
    this.report.rounds.push(round);
    const heading = `This is CI-fix round ${round.round} of this run, in a fresh checkout of the commit it pushed to its pull request. These checks of the pull request failed on that commit.`;
    const routed = new Map([[fixer, { checks: failing, ...(spec.fixer && { agent: spec.fixer }) }]]);
    const outcome = await living.revise(routed, heading);
    const line = living.lines.get(fixer)!;
    const attempt = [...run.result.workers].reverse().find((w) => w.workerId === line.id);
    Object.assign(round, { attemptId: line.id, costUsd: line.costUsd });
    const refused = refusalOf(line, attempt);
    if (refused) {
      living.integration.rewind(sha);
      return Object.assign(round, refused, { testSummary: '' });
    }
    const { mapping } = attempt!.ciFix as { mapping: CiFixMapping };
    round.mapping = mapping;
    for (const [name, a] of Object.entries(mapping)) if ('external' in a) this.external.set(name, a.external);
    const landed = await landRound(run, req, living, sha, outcome);
    return Object.assign(round, landed, { testSummary: outcome.ok ? outcome.testSummary : '' });
  }

  /** The checks as read, each with what a round put it down to. */
  private record(checks: Check[]): void {
    const attributions = new Map(this.report.rounds.flatMap((r) => Object.entries(r.mapping ?? {})));
    this.report.checks = checks.map((c): CheckOutcome => ({
      name: c.name,
      conclusion: c.status === 'completed' ? (c.conclusion ?? 'completed') : 'pending',
      passed: passes(c),
      ...(c.required !== undefined && { required: c.required }),
      ...(c.detailsUrl && { detailsUrl: c.detailsUrl }),
      ...(attributions.has(c.name) && { attribution: attributions.get(c.name) }),
    }));
  }

  /** The status and the Web UI while the run waits for the checks of `sha`. */
  private show(sha: string, waiting: boolean): void {
    const { run } = this.ctx;
    this.report.waiting = waiting;
    if (!waiting) return setCurrentDetails('');
    run.status.phase = 'checks';
    const lines = this.report.checks.map((c) => `- ${checkLine(c)}`);
    setCurrentDetails([`**Waiting for the checks** on ${sha} (${run.result.targetRef})`, ...lines].join('\n'));
  }
}

/** The checks that decide: the required ones, or all of them when none is known to be required. */
function counted(checks: Check[]): Check[] {
  const required = checks.filter((c) => c.required);
  return required.length ? required : checks;
}

function passes(c: Check): boolean {
  return c.status === 'completed' && PASSING_CONCLUSIONS.includes(c.conclusion ?? '');
}

function failingOf(c: Check): FailingCheck {
  return {
    name: c.name,
    conclusion: c.conclusion ?? 'failed',
    ...(c.detailsUrl && { detailsUrl: c.detailsUrl }),
    ...(c.logExcerpt && { logExcerpt: c.logExcerpt }),
  };
}

/** Why a round's attempt yields nothing to push: its agent failed, or its mapping is missing or refused. */
function refusalOf(
  line: SubTaskStatus,
  attempt: SubTaskReport | undefined,
): Pick<CiFixRound, 'outcome' | 'message'> | undefined {
  if (!attempt || attempt.status !== 'done' || line.state === 'failed')
    return {
      outcome: 'failed',
      message: `the CI-fix agent failed: ${clip(line.reason ?? attempt?.reason ?? 'it failed', 500)}`,
    };
  const verdict = attempt.ciFix;
  if (!verdict || 'problem' in verdict)
    return { outcome: 'refused', message: `refused: ${verdict?.problem ?? 'no mapping came back'}` };
  return undefined;
}
