/**
 * The leader of runs started before the living plan (PATCHES.livingPlan), kept as it was so
 * that they replay: resolves the base, passes the plan gate, fans out one sub-task workflow per
 * sub-task at once from the base, integrates their commits once the last has ended, runs the
 * tests, passes the push gate and pushes with a lease. Any failure ends the run.
 */
import type { RunResult } from '../../contracts/reports';
import type { LeaderRequestInput, PlannedRequest } from '../../contracts/request';
import { msOfMinutes, msOfSeconds } from '../durations';
import { integrate } from '../integration/integration';
import { FanOut } from './fan-out';
import { passGate, planRows } from './gates';
import { parseRequest } from './request';
import { Run } from './run';
import { checkIsolation, fetchOracle, push, resolveBase, settle } from './steps';

export async function fixedPlanLeader(input: LeaderRequestInput): Promise<RunResult> {
  // The status exists, and every handler is registered, before the first await.
  const run = new Run();
  // A refused request fails the workflow with the refusal, before the run has begun.
  const req = await parseRequest(input).catch((err: unknown) => run.refuse(input, err));
  run.begin(req);
  try {
    await checkIsolation(run, req);
    const { baseSha, targetSha } = await resolveBase(run, req);
    const oracleSha = await fetchOracle(run, req);
    const plan = await settle(run, req, baseSha);
    await passGate(run, 'plan', req.gates.plan, { plan: planRows(plan) });
    const fanOut = new FanOut(run, plan, baseSha);
    await fanOut.all();
    const integrated = await integrateAll(run, fanOut, { plan, baseSha, oracleSha });
    if (integrated.sha === baseSha) return run.succeed('unchanged', 'no sub-task changed anything; nothing to push');
    const { sha, diffstat, testSummary } = integrated;
    await passGate(run, 'push', req.gates.push, { sha, diffstat, testSummary });
    return await push(run, req, sha, targetSha);
  } catch (err) {
    return run.failed(err);
  } finally {
    await run.close();
  }
}

/** Merges, tests and repairs the sub-tasks' work: the integrated commit, or the run's end. */
async function integrateAll(
  run: Run,
  fanOut: FanOut,
  { plan, baseSha, oracleSha }: { plan: PlannedRequest; baseSha: string; oracleSha?: string },
) {
  let integrated: Awaited<ReturnType<typeof integrate>>;
  try {
    integrated = await integrate({
      req: plan,
      runKey: run.key,
      baseSha,
      oracleSha,
      status: run.status,
      result: run.result,
      commandTimeoutMs: msOfMinutes(plan.limits.commandTimeoutMinutes),
      heartbeatTimeoutMs: msOfSeconds(plan.limits.heartbeatTimeoutSeconds),
      subTaskInput: (task) => fanOut.input(task),
      runSubTask: (given) => fanOut.redo(given),
    });
  } finally {
    // Integration walks the result's sub-tasks: the redone ones join them once it is over.
    run.result.workers.push(...fanOut.redone);
  }
  if (!integrated.ok) run.fail(integrated.outcome, integrated.message);
  run.result.integratedSha = run.status.integratedSha = integrated.sha;
  return integrated;
}
