/**
 * Settling the plan: the caller's sub-tasks, or a planner agent's proposal validated exactly like
 * a caller's plan. An invalid proposal is retried once with the reasons; after that the run falls
 * back to a single sub-task with the whole objective, and says so.
 */
import { CancellationScope, patched } from '@temporalio/workflow';
import type { Activities, SandboxRef } from '../../activities';
import type { RunStatus } from '../../contracts/messages';
import type { PlanningReport } from '../../contracts/reports';
import { type LeaderRequest, type PlannedRequest, RequestError, parseLeaderRequest } from '../../contracts/request';
import { msOfSeconds } from '../durations';
import { SandboxHome } from '../host-affinity';
import { activityOptions, commandOptions } from '../options';
import { PATCHES } from '../patches';

const PLANNER_ATTEMPTS = 2;
const MAX_PLANNED_SUBTASKS = 12;

interface PlanningContext {
  runKey: string;
  baseSha: string;
  status: RunStatus;
  heartbeatTimeoutMs: number;
  /** The planner's time limit. */
  timeoutMs: number;
}

type Proposal = Awaited<ReturnType<Activities['proposePlan']>>;

export async function settlePlan(
  req: LeaderRequest,
  ctx: PlanningContext,
): Promise<{ request: PlannedRequest; planning: PlanningReport }> {
  if (req.subTasks)
    return {
      request: { ...req, subTasks: req.subTasks },
      planning: { source: 'request', attempts: 0, costUsd: 0, problems: [] },
    };
  // The planner's sandbox stays on the host that claims it: a planner whose host is lost fails the run.
  const home = SandboxHome.open('the planner', {
    hostTimeoutMs: msOfSeconds(req.limits.hostTimeoutSeconds),
    heartbeatTimeoutMs: ctx.heartbeatTimeoutMs,
  });
  await home.claim();
  const ops = home.on(activityOptions(ctx.heartbeatTimeoutMs));
  ctx.status.phase = 'planning';
  const planning: PlanningReport = { source: 'planner', attempts: 0, costUsd: 0, problems: [] };
  ctx.status.planning = planning;
  const sandbox: SandboxRef = { key: `${ctx.runKey}/planner`, ...req.sandbox };
  try {
    await ops.provisionSandbox(sandbox);
    await ops.seedWorkspace({
      sandbox,
      runKey: ctx.runKey,
      baseSha: ctx.baseSha,
      branch: `flotilla/${ctx.runKey}/planner`,
      author: 'Flotilla planner',
    });
    const proposed = await propose(req, planning, home.on(commandOptions(ctx.timeoutMs, ctx.heartbeatTimeoutMs)), {
      sandbox,
      timeoutMs: ctx.timeoutMs,
    });
    if (proposed) return { request: proposed, planning };
  } finally {
    await CancellationScope.nonCancellable(() => ops.destroySandbox(sandbox));
  }
  planning.source = 'fallback';
  const subTasks = [{ id: 'objective', prompt: req.objective, ownedPaths: ['.'] }];
  return { request: { ...req, subTasks }, planning };
}

/**
 * The planner's proposals, each retry told why the last was refused: the first valid one as
 * the run's plan, or undefined when none was.
 */
async function propose(
  req: LeaderRequest,
  planning: PlanningReport,
  { proposePlan }: Pick<ReturnType<SandboxHome['on']>, 'proposePlan'>,
  planner: { sandbox: SandboxRef; timeoutMs: number },
): Promise<PlannedRequest | undefined> {
  const byActivity = patched(PATCHES.planValidatedByActivity.id);
  while (planning.attempts < PLANNER_ATTEMPTS) {
    planning.attempts++;
    const proposal = await proposePlan({
      ...(byActivity && { request: { ...req, subTasks: undefined } }),
      sandbox: planner.sandbox,
      // Validation guarantees a planner or a default agent when there are no sub-tasks.
      agent: (req.planner ?? req.agent)!,
      objective: req.objective,
      maxSubTasks: MAX_PLANNED_SUBTASKS,
      problems: planning.problems,
      timeoutMs: planner.timeoutMs,
      budgetUsd: req.limits.subTaskBudgetUsd,
    });
    planning.costUsd += proposal.costUsd;
    const judged = judge(req, proposal, byActivity);
    if (!Array.isArray(judged)) return judged;
    planning.problems = judged;
  }
  return undefined;
}

/** A proposal as the run's plan, or why it is refused. */
function judge(req: LeaderRequest, proposal: Proposal, byActivity: boolean): PlannedRequest | string[] {
  if (proposal.problem) return [proposal.problem];
  if (byActivity)
    return proposal.plan
      ? { ...req, subTasks: proposal.plan }
      : (proposal.problems ?? ["the planner's proposal was refused"]);
  // Runs started before proposals were validated by the activity validate them here, as then.
  try {
    const checked = parseLeaderRequest({ ...req, subTasks: proposal.subTasks });
    return { ...checked, subTasks: checked.subTasks! };
  } catch (err) {
    if (!(err instanceof RequestError)) throw err;
    return err.problems;
  }
}
