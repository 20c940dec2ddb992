/**
 * Settling the plan: the caller's sub-tasks, or a planner agent's proposal validated exactly like
 * a caller's plan. An invalid proposal is retried once with the reasons; after that the run falls
 * back to a single sub-task with the whole objective, and says so. A living plan's replan rounds
 * (onFailure: replan) ask the planner again, on the integration head, for the sub-tasks still
 * needed.
 */
import { CancellationScope, patched } from '@temporalio/workflow';
import type { Activities, SandboxRef } from '../../activities';
import type { SubTaskSeed } from '../../activities/integration';
import type { RunStatus } from '../../contracts/messages';
import type { PlanningReport } from '../../contracts/reports';
import {
  type LeaderRequest,
  type PlannedRequest,
  RequestError,
  type SubTask,
  parseLeaderRequest,
} from '../../contracts/request';
import { firstLine } from '../../contracts/text';
import { msOfSeconds } from '../durations';
import { SandboxHome } from '../host-affinity';
import { activityOptions, commandOptions } from '../options';
import { PATCHES } from '../patches';

const PLANNER_ATTEMPTS = 2;
const MAX_PLANNED_SUBTASKS = 12;

export interface PlanningContext {
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
  ctx.status.phase = 'planning';
  const planning: PlanningReport = { source: 'planner', attempts: 0, costUsd: 0, problems: [] };
  ctx.status.planning = planning;
  const proposed = await withPlanner(req, ctx, { what: 'the planner', key: `${ctx.runKey}/planner` }, (ops, sandbox) =>
    propose(req, planning, ops, { sandbox, timeoutMs: ctx.timeoutMs }),
  );
  if (proposed) return { request: proposed as PlannedRequest, planning };
  planning.source = 'fallback';
  const subTasks = [{ id: 'objective', prompt: req.objective, ownedPaths: ['.'] }];
  return { request: { ...req, subTasks }, planning };
}

/** What a replan round tells the planner, and how its proposal is judged beyond the request's rules. */
export interface ReplanRound {
  /** The integration head the planner's checkout starts from. */
  seed: SubTaskSeed;
  context: NonNullable<Parameters<Activities['proposePlan']>[0]['replan']>;
  /** Why the proposed sub-tasks cannot join the plan as it stands (a dependency that will never be integrated). */
  problems(proposed: SubTask[]): string[];
}

/**
 * onFailure: replan: the planner, on a checkout of the integration head, proposes the sub-tasks
 * still needed, validated against the plan as it stands; undefined when no proposal was valid.
 * `planning` counts the round's attempts and cost.
 */
export async function replanRemaining(
  plan: PlannedRequest,
  ctx: PlanningContext,
  planning: PlanningReport,
  round: ReplanRound,
): Promise<SubTask[] | undefined> {
  const key = `${ctx.runKey}/planner-replan-${round.context.round}`;
  const where = { what: `the planner (replan ${round.context.round})`, key, seed: round.seed };
  const proposed = await withPlanner(plan, ctx, where, (ops, sandbox) =>
    propose(plan, planning, ops, { sandbox, timeoutMs: ctx.timeoutMs }, round),
  );
  return proposed && 'tasks' in proposed ? proposed.tasks : undefined;
}

/**
 * A planner sandbox for one use: a host claimed, the sandbox provisioned and seeded with the base
 * (and moved onto `seed`), then `use`, then the sandbox destroyed however it went. The planner's
 * sandbox stays on the host that claims it: a planner whose host is lost fails the run.
 */
async function withPlanner<T>(
  req: LeaderRequest,
  ctx: PlanningContext,
  where: { what: string; key: string; seed?: SubTaskSeed },
  use: (ops: Pick<ReturnType<SandboxHome['on']>, 'proposePlan'>, sandbox: SandboxRef) => Promise<T>,
): Promise<T> {
  const home = SandboxHome.open(where.what, {
    hostTimeoutMs: msOfSeconds(req.limits.hostTimeoutSeconds),
    heartbeatTimeoutMs: ctx.heartbeatTimeoutMs,
  });
  await home.claim();
  const ops = home.on(activityOptions(ctx.heartbeatTimeoutMs));
  const sandbox: SandboxRef = { key: where.key, ...req.sandbox };
  try {
    await ops.provisionSandbox(sandbox);
    await ops.seedWorkspace({
      sandbox,
      runKey: ctx.runKey,
      baseSha: ctx.baseSha,
      branch: `flotilla/${where.key}`,
      author: 'Flotilla planner',
    });
    if (where.seed) await ops.checkoutSeed({ sandbox, baseSha: ctx.baseSha, seed: where.seed });
    return await use(home.on(commandOptions(ctx.timeoutMs, ctx.heartbeatTimeoutMs)), sandbox);
  } finally {
    await CancellationScope.nonCancellable(() => ops.destroySandbox(sandbox));
  }
}

/**
 * The planner's proposals, each retry told why the last was refused: the first valid one (the
 * run's plan, or a replan round's sub-tasks), or undefined when none was.
 */
async function propose(
  req: LeaderRequest,
  planning: PlanningReport,
  { proposePlan }: Pick<ReturnType<SandboxHome['on']>, 'proposePlan'>,
  planner: { sandbox: SandboxRef; timeoutMs: number },
  replan?: ReplanRound,
): Promise<PlannedRequest | { tasks: SubTask[] } | undefined> {
  const byActivity = patched(PATCHES.planValidatedByActivity.id);
  while (planning.attempts < PLANNER_ATTEMPTS) {
    planning.attempts++;
    const proposal = await proposePlan({
      // A replan's proposal is validated with the plan as it stands (prompts cut short: they were validated).
      ...(byActivity && { request: { ...req, subTasks: replan ? validated(req.subTasks!) : undefined } }),
      sandbox: planner.sandbox,
      // Validation guarantees a planner or a default agent when there are no sub-tasks, or when replanning.
      agent: (req.planner ?? req.agent)!,
      objective: req.objective,
      maxSubTasks: MAX_PLANNED_SUBTASKS,
      problems: planning.problems,
      timeoutMs: planner.timeoutMs,
      budgetUsd: req.limits.subTaskBudgetUsd,
      ...(replan && { replan: replan.context }),
    });
    planning.costUsd += proposal.costUsd;
    const judged = replan ? judgeReplan(proposal, replan) : judge(req, proposal, byActivity);
    if (!Array.isArray(judged)) return judged;
    planning.problems = judged;
  }
  return undefined;
}

/** The sub-tasks of the plan as the activity validates a replan's proposal against them. */
function validated(subTasks: SubTask[]): SubTask[] {
  return subTasks.map((t) => ({ ...t, prompt: firstLine(t.prompt) || t.id }));
}

/** A replan round's proposal as the sub-tasks to add, or why it is refused. */
function judgeReplan(proposal: Proposal, round: ReplanRound): { tasks: SubTask[] } | string[] {
  if (proposal.problem) return [proposal.problem];
  if (!proposal.plan) return proposal.problems ?? ["the planner's proposal was refused"];
  const problems = round.problems(proposal.plan);
  return problems.length ? problems : { tasks: proposal.plan };
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
