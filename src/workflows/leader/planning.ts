/**
 * Settling the plan: the caller's sub-tasks, or a planner agent's proposal validated exactly like
 * a caller's plan. An invalid proposal is retried once with the reasons; after that the run falls
 * back to a single worker with the whole objective, and says so.
 */
import { type ActivityOptions, CancellationScope, patched } from '@temporalio/workflow';
import type { SandboxRef } from '../../activities';
import { type LeaderRequest, type PlannedRequest, RequestError, parseLeaderRequest } from '../../contracts/request';
import { type PlanningReport } from '../../contracts/reports';
import { msOfSeconds } from '../durations';
import { SandboxHome } from '../host-affinity';
import type { RunStatus } from '../../contracts/messages';
import { activityOptions, commandOptions } from '../options';
import { PATCHES } from '../patches';

const PLANNER_ATTEMPTS = 2;
const MAX_PLANNED_SUBTASKS = 12;

export async function settlePlan(
  req: LeaderRequest,
  ctx: { runKey: string; baseSha: string; status: RunStatus; heartbeatTimeoutMs: number; timeoutMs: number },
): Promise<{ request: PlannedRequest; planning: PlanningReport }> {
  if (req.subTasks)
    return {
      request: { ...req, subTasks: req.subTasks },
      planning: { source: 'request', attempts: 0, costUsd: 0, problems: [] },
    };
  // The planner's sandbox stays on the host that claims it (runs started before host affinity: the shared queue).
  const home = SandboxHome.open('the planner', {
    hostTimeoutMs: msOfSeconds(req.limits.hostTimeoutSeconds),
    heartbeatTimeoutMs: ctx.heartbeatTimeoutMs,
  });
  await home.claim();
  const proxy = (options: ActivityOptions) => home.on(options);
  const { provisionSandbox, seedWorkspace, destroySandbox } = proxy(activityOptions(ctx.heartbeatTimeoutMs));
  const { proposePlan } = proxy(commandOptions(ctx.timeoutMs, ctx.heartbeatTimeoutMs));
  // validate() guarantees a planner or a default agent when there are no sub-tasks.
  const agent = (req.planner ?? req.agent)!;
  ctx.status.phase = 'planning';
  const planning: PlanningReport = { source: 'planner', attempts: 0, costUsd: 0, problems: [] };
  ctx.status.planning = planning;
  const sandbox: SandboxRef = { key: `${ctx.runKey}/planner`, ...req.sandbox };
  try {
    await provisionSandbox(sandbox);
    await seedWorkspace({
      sandbox,
      runKey: ctx.runKey,
      baseSha: ctx.baseSha,
      branch: `flotilla/${ctx.runKey}/planner`,
      author: 'Flotilla planner',
    });
    const byActivity = patched(PATCHES.planValidatedByActivity.id);
    while (planning.attempts < PLANNER_ATTEMPTS) {
      planning.attempts++;
      const proposal = await proposePlan({
        ...(byActivity && { request: { ...req, subTasks: undefined } }),
        sandbox,
        agent,
        objective: req.objective,
        maxSubTasks: MAX_PLANNED_SUBTASKS,
        problems: planning.problems,
        timeoutMs: ctx.timeoutMs,
        budgetUsd: req.limits.subTaskBudgetUsd,
      });
      planning.costUsd += proposal.costUsd;
      if (proposal.problem) {
        planning.problems = [proposal.problem];
        continue;
      }
      if (byActivity) {
        if (proposal.plan) return { request: { ...req, subTasks: proposal.plan }, planning };
        planning.problems = proposal.problems ?? ["the planner's proposal was refused"];
        continue;
      }
      // Runs started before proposals were validated by the activity validate them here, as then.
      try {
        const checked = parseLeaderRequest({ ...req, subTasks: proposal.subTasks });
        return { request: { ...checked, subTasks: checked.subTasks! }, planning };
      } catch (err) {
        if (!(err instanceof RequestError)) throw err;
        planning.problems = err.problems;
      }
    }
  } finally {
    await CancellationScope.nonCancellable(() => destroySandbox(sandbox));
  }
  planning.source = 'fallback';
  const subTasks = [{ id: 'objective', prompt: req.objective, ownedPaths: ['.'] }];
  return { request: { ...req, subTasks }, planning };
}
