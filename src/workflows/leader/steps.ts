/**
 * The leader's steps that every flow takes, in the order a run takes them: the isolation check,
 * the base, the hidden tests, the plan, and the push.
 */
import { ActivityFailure, ApplicationFailure, CancellationScope, proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../../activities';
import { isFailure, rootMessage } from '../../contracts/failures';
import type { RunResult } from '../../contracts/reports';
import type { AgentSpec, LeaderRequest, PlannedRequest } from '../../contracts/request';
import { msOfMinutes, msOfSeconds } from '../durations';
import { activityOptions } from '../options';
import { settlePlan } from './planning';
import { type Run, queued } from './run';

/** The activities that need no sandbox: any host, on the shared queue. */
export function hostless(req: LeaderRequest) {
  return proxyActivities<Activities>(activityOptions(msOfSeconds(req.limits.heartbeatTimeoutSeconds)));
}

/**
 * Refuses before anything starts when this worker would run the sandboxes unisolated without
 * being told to, or lacks the CLI or the credentials of an agent the request names.
 */
export async function checkIsolation(run: Run, req: LeaderRequest): Promise<void> {
  const checked = await hostless(req)
    .checkIsolation({ key: `${run.key}/preflight`, ...req.sandbox, agents: agentKinds(req) })
    .catch((err: unknown) => {
      if (isFailure(err, 'IsolationUnavailable') || isFailure(err, 'AgentUnavailable'))
        return { refused: rootMessage(err) };
      throw err;
    });
  if ('refused' in checked) run.fail('failed', checked.refused);
  run.status.isolation = run.result.isolation = checked.isolation;
}

/** Every kind of agent the request names: the planner, the default, the sub-tasks' own and the fixers. */
function agentKinds(req: LeaderRequest): AgentSpec['kind'][] {
  const agents = [
    req.planner,
    req.agent,
    ...(req.subTasks ?? []).map((t) => t.agent),
    req.resolver?.agent,
    req.repair?.agent,
    req.review?.reviser,
    req.land?.kind === 'pr' ? req.land.checks?.fixer : undefined,
  ];
  return [...new Set(agents.flatMap((a) => (a ? [a.kind] : [])))];
}

export async function resolveBase(run: Run, req: LeaderRequest) {
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
export async function fetchOracle(run: Run, req: LeaderRequest): Promise<string | undefined> {
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
export async function settle(run: Run, req: LeaderRequest, baseSha: string): Promise<PlannedRequest> {
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

/**
 * Not cancellable: once started, the push runs to its end, so the result can say whether it
 * landed. `landed` says what the commit holds, in the message the run ends with.
 */
export async function push(
  run: Run,
  req: LeaderRequest,
  sha: string,
  expectedSha: string | null,
  landed = `${run.result.workers.length} sub-task(s) integrated`,
): Promise<RunResult> {
  await pushTo(run, req, sha, expectedSha);
  return run.succeed('pushed', `${landed}, tests passed, pushed to ${run.result.targetRef}`);
}

/** Pushes `sha` with a compare-and-swap against `expectedSha`; a lost race ends the run. Returns what the branch holds. */
export async function pushTo(run: Run, req: LeaderRequest, sha: string, expectedSha: string | null): Promise<string> {
  const { targetRef } = run.result;
  run.status.phase = 'pushing';
  const pushed = await CancellationScope.nonCancellable(() =>
    hostless(req).pushResult({ url: req.repo.url, targetRef, sha, expectedSha, runKey: run.key }),
  );
  if (pushed.outcome === 'raced') run.fail('raced', `not pushed: ${pushed.message}`);
  run.result.pushedSha = pushed.remoteSha;
  return pushed.remoteSha;
}
