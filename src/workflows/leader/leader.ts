/**
 * The leader: resolves the base, settles the plan and passes the plan gate, runs the plan as a
 * living plan (plan-run.ts: sub-tasks start when what they wait for allows, each is merged onto
 * the integration head as it ends, failures are retried and then handled by onFailure, people
 * amend the plan as it runs), tests the final tree, passes the push gate and pushes with a lease
 * (or, with land: pr, pushes to its PR's branch and opens the pull request: pull-request.ts).
 * Anything short of a push ends the workflow as failed, with the full RunResult attached to the
 * failure, so the Web UI shows red and clients still get the report.
 *
 * Runs started before the living plan (PATCHES.livingPlan) keep the fixed plan they started with
 * (fixed-plan.ts): their first workflow task has no marker for it.
 */
import { patched, setHandler } from '@temporalio/workflow';
import { planQuery } from '../../contracts/messages';
import type { RunResult } from '../../contracts/reports';
import type { LeaderRequestInput } from '../../contracts/request';
import { PATCHES } from '../patches';
import { adopt } from './continuation';
import { fixedPlanLeader } from './fixed-plan';
import { passGate, planRows } from './gates';
import { PlanRun } from './plan-run';
import { ForgeRun } from './pull-request';
import { parseRequest } from './request';
import { Run } from './run';
import { checkIsolation, fetchOracle, push, resolveBase, settle } from './steps';

export async function leaderWorkflow(input: LeaderRequestInput): Promise<RunResult> {
  if (!patched(PATCHES.livingPlan.id)) return fixedPlanLeader(input);
  // The status exists, and every handler is registered, before the first await.
  const run: Run = new Run({ living: true });
  // A refused request fails the workflow with the refusal, before the run has begun.
  const parsed = await parseRequest(input).catch((err: unknown) => run.refuse(input, err));
  run.begin(parsed);
  try {
    await checkIsolation(run, parsed);
    // Issues in and pull requests out; nothing for a run that names neither.
    const forge = ForgeRun.of(run, parsed);
    const req = forge ? await forge.takeIssue() : parsed;
    const { baseSha, targetSha } = await resolveBase(run, req);
    const oracleSha = await fetchOracle(run, req);
    const plan = await settle(run, req, baseSha);
    await passGate(run, 'plan', req.gates.plan, { plan: planRows(plan) });
    const adopted = await adopt(run, plan, baseSha);
    const living = new PlanRun(run, plan, { baseSha, oracleSha, adopted });
    setHandler(planQuery, () => ({ subTasks: living.standingPlan() }));
    const integrated = await living.settle();
    if (!integrated.ok) run.fail(integrated.outcome, integrated.message);
    run.result.integratedSha = run.status.integratedSha = integrated.sha;
    if (integrated.sha === baseSha) return run.succeed('unchanged', 'no sub-task changed anything; nothing to push');
    const { sha, diffstat, testSummary } = integrated;
    const dropped = run.status.dropped?.length ? { dropped: run.status.dropped } : {};
    await passGate(run, 'push', req.gates.push, { sha, diffstat, testSummary, ...dropped });
    if (forge?.opensPullRequest) return await forge.land({ sha, testSummary, landed: living.landed() }, targetSha);
    return await push(run, req, sha, targetSha, living.landed());
  } catch (err) {
    return run.failed(err);
  } finally {
    await run.close();
  }
}
