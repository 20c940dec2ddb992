/**
 * The leader: resolves the base, passes the plan gate, fans out one sub-task workflow per
 * sub-task, integrates their commits, runs the tests, passes the push gate and pushes with a
 * lease. Anything short of a push ends the workflow as failed, with the full RunResult attached
 * to the failure, so the Web UI shows red and clients still get the report.
 */
import { ActivityFailure, ApplicationFailure, CancellationScope, proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../../activities';
import { isFailure, rootMessage } from '../../contracts/failures';
import type { RunResult } from '../../contracts/reports';
import type { LeaderRequest, LeaderRequestInput, PlannedRequest } from '../../contracts/request';
import { msOfMinutes, msOfSeconds } from '../durations';
import { integrate } from '../integration/integration';
import { activityOptions } from '../options';
import { FanOut } from './fan-out';
import { passGate, planRows } from './gates';
import { settlePlan } from './planning';
import { parseRequest } from './request';
import { Run, queued } from './run';

export async function leaderWorkflow(input: LeaderRequestInput): Promise<RunResult> {
  // The status exists, and every handler is registered, before the first await.
  const run = new Run();
  // A refused request fails the workflow with the refusal, before the run has begun.
  const req = await parseRequest(input);
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

/** The activities that need no sandbox: any host, on the shared queue. */
function hostless(req: LeaderRequest) {
  return proxyActivities<Activities>(activityOptions(msOfSeconds(req.limits.heartbeatTimeoutSeconds)));
}

/** Refuses before anything starts when this worker would run the sandboxes unisolated without being told to. */
async function checkIsolation(run: Run, req: LeaderRequest): Promise<void> {
  const checked = await hostless(req)
    .checkIsolation({ key: `${run.key}/preflight`, ...req.sandbox })
    .catch((err: unknown) => {
      if (isFailure(err, 'IsolationUnavailable')) return { refused: rootMessage(err) };
      throw err;
    });
  if ('refused' in checked) run.fail('failed', checked.refused);
  run.status.isolation = run.result.isolation = checked.isolation;
}

async function resolveBase(run: Run, req: LeaderRequest) {
  const base = await hostless(req).resolveBase({
    runKey: run.key,
    url: req.repo.url,
    baseRef: req.repo.baseRef,
    targetRef: run.result.targetRef,
  });
  run.status.baseSha = run.result.baseSha = base.baseSha;
  return base;
}

/** Before any agent spends anything: hidden tests that cannot be fetched or used end the run here. */
async function fetchOracle(run: Run, req: LeaderRequest): Promise<string | undefined> {
  if (!req.oracle) return undefined;
  const oracle = await hostless(req)
    .fetchOracle({ runKey: run.key, url: req.oracle.repo, ref: req.oracle.ref })
    .catch((err) => err as Error);
  if (oracle instanceof ActivityFailure && oracle.cause instanceof ApplicationFailure)
    run.fail('failed', oracle.cause.message);
  if (oracle instanceof Error) throw oracle;
  return oracle.sha;
}

/** The plan, from the request or the planner, shown in the status. */
async function settle(run: Run, req: LeaderRequest, baseSha: string): Promise<PlannedRequest> {
  const settled = await settlePlan(req, {
    runKey: run.key,
    baseSha,
    status: run.status,
    heartbeatTimeoutMs: msOfSeconds(req.limits.heartbeatTimeoutSeconds),
    timeoutMs: msOfMinutes(req.limits.agentTimeoutMinutes),
  });
  run.result.planning = run.status.planning = settled.planning;
  run.status.workers = queued(settled.request.subTasks);
  return settled.request;
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

/** Not cancellable: once started, the push runs to its end, so the result can say whether it landed. */
async function push(run: Run, req: LeaderRequest, sha: string, expectedSha: string | null): Promise<RunResult> {
  const { targetRef } = run.result;
  run.status.phase = 'pushing';
  const pushed = await CancellationScope.nonCancellable(() =>
    hostless(req).pushResult({ url: req.repo.url, targetRef, sha, expectedSha }),
  );
  if (pushed.outcome === 'raced') run.fail('raced', `not pushed: ${pushed.message}`);
  run.result.pushedSha = pushed.remoteSha;
  return run.succeed(
    'pushed',
    `${run.result.workers.length} sub-task(s) integrated, tests passed, pushed to ${targetRef}`,
  );
}
