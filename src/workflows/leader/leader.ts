/**
 * The leader: resolves the base, settles the plan and passes the plan gate, runs the plan as a
 * living plan (plan-run.ts: sub-tasks start when what they wait for allows, each is merged onto
 * the integration head as it ends, failures are retried and then handled by onFailure, people
 * amend the plan as it runs), tests the final tree, passes the push gate and pushes with a lease
 * (or, with land: pr, pushes to its PR's branch and opens the pull request: pull-request.ts).
 * Anything short of a push ends the workflow as failed, with the full RunResult attached to the
 * failure, so the Web UI shows red and clients still get the report.
 *
 * With request.review the run does not end at its push: it waits in the review phase, and each
 * round of comments is revised, tested and pushed to the same branch (review.ts); with land: pr
 * too, the comments come from the PR itself, until it is merged or closed (pr-review.ts).
 *
 * Runs started before the living plan (PATCHES.livingPlan) keep the fixed plan they started with
 * (fixed-plan.ts): their first workflow task has no marker for it.
 */
import { continueAsNew, patched, setHandler } from '@temporalio/workflow';
import { planQuery } from '../../contracts/messages';
import type { RunResult } from '../../contracts/reports';
import type { LeaderRequest } from '../../contracts/request';
import type { LeaderInput, Rollover } from '../../contracts/rollover';
import { PATCHES } from '../patches';
import { enableAutoResume } from './auto-resume';
import { adopt } from './continuation';
import { withinDeadline } from './deadline';
import { fixedPlanLeader } from './fixed-plan';
import { passGate, planRows } from './gates';
import { PlanRun } from './plan-run';
import { ForgeRun } from './pull-request';
import { parseRequest } from './request';
import { Run } from './run';
import { removeRunMirrors } from './run-mirrors';
import { ReviewPhase } from './review';
import { PlanParts } from './plan-parts';
import { RolloverDue, carriedPlan, lend, planAsGiven, planDiff, readBack, splitInput, takeCarry } from './rollover';
import { checkIsolation, fetchOracle, push, pushTo, resolveBase, settle } from './steps';

export async function leaderWorkflow(input: LeaderInput): Promise<RunResult> {
  if (!patched(PATCHES.livingPlan.id)) return fixedPlanLeader(input);
  // The status exists, and every handler is registered, before the first await.
  const parts = PlanParts.of(input);
  const run: Run = new Run({ living: true, planParts: parts });
  // A refused request fails the workflow with the refusal, before the run has begun.
  const { request, carried } = splitInput(run, input);
  const parsed = await parseRequest(request, parts, carried?.from).catch((err: unknown) => run.refuse(request, err));
  run.begin(parsed);
  let rollover: Rollover | undefined;
  try {
    const carry = carried && (await takeCarry(parsed, carried));
    if (carry) run.resume(carry);
    enableAutoResume(run, parsed);
    return await withinDeadline(run, parsed, () => runToThePush(run, parsed, carry));
  } catch (err) {
    if (!(err instanceof RolloverDue)) return run.failed(err);
    rollover = err.carry;
  } finally {
    // A run that rolls over keeps its mirrors and sends no "ended": the run goes on in the next history.
    if (rollover) await run.handOver();
    else {
      await run.close();
      await removeRunMirrors(run);
    }
  }
  // The next run's input stays small: it names this run, which answers the handOver query.
  const carrying = patched(PATCHES.carryByReference.id) ? lend(run, rollover, parts) : rollover;
  return continueAsNew<typeof leaderWorkflow>({ ...request, rollover: carrying });
}

/** The run's steps from the isolation check to the push; a step that fails ends the run. */
async function runToThePush(run: Run, parsed: LeaderRequest, carry?: Rollover): Promise<RunResult> {
  await checkIsolation(run, parsed);
  // Issues in and pull requests out; nothing for a run that names neither.
  const forge = ForgeRun.of(run, parsed);
  const req = forge ? await forge.takeIssue(carry?.issue) : parsed;
  const given = planAsGiven(req);
  const start = carry ? await takeUp(run, req, carry) : await planned(run, req);
  const { baseSha, targetSha, plan: settled } = start;
  const living = new PlanRun(run, settled, { ...start, restored: carry });
  setHandler(planQuery, () => ({ subTasks: living.standingPlan() }));
  try {
    return await landPlan(run, req, living, { baseSha, targetSha, forge });
  } catch (err) {
    if (!(err instanceof RolloverDue)) throw err;
    const issue = forge?.takenIssue;
    throw new RolloverDue({ ...err.carry, ...planDiff(given, settled), ...(issue && { issue }) });
  } finally {
    // The integration's sandboxes are destroyed while the run pushes: it ends once they are gone.
    if (living.integration.keepsSandboxes) await living.integration.sandboxesGone();
  }
}

/** A new run's start: the base, the hidden tests, the plan and its gate, and what a failed run it continues left. */
async function planned(run: Run, req: LeaderRequest) {
  const { baseSha, targetSha } = await resolveBase(run, req);
  const oracleSha = await fetchOracle(run, req);
  const plan = await settle(run, req, baseSha);
  await passGate(run, 'plan', req.gates.plan, { plan: planRows(plan) });
  const adopted = await adopt(run, plan, baseSha);
  return { baseSha, targetSha, oracleSha, plan, adopted };
}

/** A run that continues one that rolled over starts where it stopped: same base, same plan, its gate passed. */
async function takeUp(run: Run, req: LeaderRequest, carry: Rollover) {
  await readBack(run, req, carry);
  const { baseSha, targetSha, oracleSha } = carry;
  return { baseSha, targetSha, oracleSha, plan: carriedPlan(req, carry) };
}

/** The plan run to its end, then the push gate and the push (or the pull request, or the review phase). */
async function landPlan(
  run: Run,
  req: LeaderRequest,
  living: PlanRun,
  at: { baseSha: string; targetSha: string | null; forge: ReturnType<typeof ForgeRun.of> },
): Promise<RunResult> {
  const { baseSha, targetSha, forge } = at;
  const integrated = await living.settle();
  if (!integrated.ok) run.fail(integrated.outcome, integrated.message);
  run.result.integratedSha = run.status.integratedSha = integrated.sha;
  if (integrated.sha === baseSha) return run.succeed('unchanged', 'no sub-task changed anything; nothing to push');
  const { sha, diffstat, testSummary } = integrated;
  const dropped = run.status.dropped?.length ? { dropped: run.status.dropped } : {};
  const candidates = run.status.candidates?.length ? { candidates: run.status.candidates } : {};
  const { evidence } = run.status;
  const held = evidence?.measure?.hold;
  // A measured regression holds the push for a person, whatever the gate's mode.
  const gate = held ? { ...req.gates.push, mode: 'manual' as const } : req.gates.push;
  await passGate(run, 'push', gate, {
    sha,
    diffstat,
    testSummary,
    ...dropped,
    ...candidates,
    ...(evidence && { evidence }),
    ...(held && { held }),
  });
  if (forge?.opensPullRequest)
    return await forge.land({ sha, testSummary, landed: living.landed() }, targetSha, living);
  if (!(req.review && patched(PATCHES.reviewRounds.id))) return await push(run, req, sha, targetSha, living.landed());
  // Review rounds: the run waits for comments, and pushes each round's commit to the same branch.
  const review = new ReviewPhase(run, req, living, await pushTo(run, req, sha, targetSha));
  await review.wait();
  const pushedTo = `tests passed, pushed to ${run.result.targetRef}`;
  return run.succeed('pushed', `${living.landed()}, ${pushedTo}; ${review.summary()}`);
}
