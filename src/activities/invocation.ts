/**
 * An invocation: one execution of an agent's CLI in a sandbox, from an activity (a sub-task's
 * agent, the planner, a fixer), with heartbeats that carry its progress and survive a retry.
 */
import { Context } from '@temporalio/activity';
import { harnessFor } from '../agents';
import { CarryingParser, readCarryOver } from '../agents/carry-over';
import type { AgentOutcome, AgentProgress } from '../agents/types';
import { agentTurnSignal } from '../contracts/messages';
import type { BriefContext } from '../contracts/brief';
import type { CiFixVerdict } from '../contracts/checks';
import type { AgentSpec } from '../contracts/request';
import { modelApiRules } from '../sandbox/egress/rules';
import type { Sandbox } from '../sandbox/types';
import { homeWriteError } from '../store/artifacts';
import type { ActivityDeps } from './deps';
import { type CommandReport, execTracked } from './exec';
import { forgetOutput, noteOutput } from './output-progress';

export interface AgentRunReport extends CommandReport {
  budgetExceeded: boolean;
  /** The invocation's outcome; its costUsd is what this invocation alone cost, interrupted attempts included. */
  agent: AgentOutcome;
  /** What the agent's session has cost so far, for the next invocation that resumes it. */
  sessionCostUsd: number;
  /** The agent was stopped because it printed nothing for the input's idleMs. */
  idle?: true;
  /** A CI-fix round's agent (input.ciFix): its mapping of the checks, validated, or why it was refused. */
  ciFix?: CiFixVerdict;
}

export interface AgentRunInput {
  agent: AgentSpec;
  workerId: string;
  objective: string;
  prompt: string;
  timeoutMs: number;
  sessionId?: string;
  message?: string;
  maxTurns?: number;
  /** Dollars this invocation may spend; the agent is stopped when its cost so far passes it. */
  budgetUsd?: number;
  /** What the resumed session had cost before this invocation. */
  sessionCostUsd?: number;
  /** Run with the workspace mounted read-only (a planner looks, it does not touch). */
  readOnly?: boolean;
  /** The agent's previous invocation was cut short (its sandbox's host was lost): it is told so, as after a crash. */
  interrupted?: boolean;
  /** Variables for this role beyond what the harness sets (a planner's plan file). */
  extraEnv?: Record<string, string>;
  /** A sub-task's agent is briefed (src/contracts/brief.ts); the planner and the fixers have prompts of their own. */
  brief?: BriefContext;
  /** Stop the agent once it prints nothing for this long (limits.idleMinutes). */
  idleMs?: number;
  /** What Flotilla did to the workspace since the agent last heard (paths it reverted), for it to be told. */
  notice?: string;
  /** Signal the workflow (agentTurnSignal) whenever the agent reports a new turn: a sub-task's early stops. */
  reportTurns?: boolean;
  /** A CI-fix round (leader/checks.ts): the checks the agent must map in $FLOTILLA_CI_FIX_FILE. */
  ciFix?: { checks: string[] };
}

/**
 * What the invocation does with its agent's progress as it comes: keeps it for the sandbox's
 * checkpoints (output-progress.ts) and, with `reportTurns`, tells the workflow of every new turn.
 */
function watchProgress(watchKey: string | undefined, reportTurns: boolean | undefined) {
  if (watchKey === undefined && !reportTurns) return undefined;
  const onTurn = reportTurns ? turnSignaller() : undefined;
  return (progress: AgentProgress) => {
    if (watchKey !== undefined) noteOutput(watchKey, progress);
    onTurn?.(progress.turns);
  };
}

/**
 * Gap between two agentTurn signals: turns that come faster are told once, at the end of it. Each
 * signal costs the sub-task's history a checkpoint: an agent reporting turns as fast as it can
 * adds at most one every 5 seconds.
 */
const TURN_SIGNAL_GAP_MS = 5_000;

/**
 * Signals the activity's workflow when the turn count grows, at most once per TURN_SIGNAL_GAP_MS
 * (a turn inside the gap is signalled when it ends). Never fails the invocation: a signal that is
 * lost costs only time, the next checkpoint comes anyway.
 */
function turnSignaller(): (turns: number) => void {
  const ctx = Context.current();
  let seen = 0;
  let last = 0;
  let pending: NodeJS.Timeout | undefined;
  const send = () => {
    pending = undefined;
    last = Date.now();
    const workflowId = ctx.info.workflowExecution?.workflowId;
    if (!workflowId) return;
    try {
      ctx.client.workflow
        .getHandle(workflowId)
        .signal(agentTurnSignal)
        .catch(() => undefined);
    } catch {
      // No client (a test's mock environment): nothing to tell.
    }
  };
  return (turns) => {
    if (turns <= seen) return;
    seen = turns;
    if (pending) return;
    pending = setTimeout(send, Math.max(0, last + TURN_SIGNAL_GAP_MS - Date.now()));
    pending.unref();
  };
}

/**
 * Runs any agent in a sandbox: the harness builds the command and the files that carry its
 * input, its output is parsed into progress and an outcome, only the variables the harness names
 * are passed from the host.
 *
 * A retry after a crash (attempt > 1) runs in the same workspace and tells the agent so, so it
 * inspects what is there before redoing it; and it resumes the session the interrupted attempt
 * reported in its heartbeats, whose cost counts too (see carry-over.ts).
 */
export async function runHarness(
  deps: ActivityDeps,
  sb: Sandbox,
  input: AgentRunInput,
  runKey: string,
  /** The sandbox's key, under which the agent's output progress is kept for its checkpoints (output-progress.ts). */
  watchKey?: string,
): Promise<AgentRunReport> {
  const info = Context.current().info;
  const carried = readCarryOver(info.heartbeatDetails);
  const sessionId = carried.sessionId ?? input.sessionId;
  // What the resumed session had cost before this invocation, as the agent will count it: a session
  // the interrupted attempt started never finished cleanly, so it starts from nothing. (An agent
  // that counts the interrupted attempt anyway, as Codex's thread totals may, overstates the
  // cost: the safe side for a budget.)
  const sessionCostUsd = sessionId && sessionId === input.sessionId ? (input.sessionCostUsd ?? 0) : 0;
  const remainingUsd = input.budgetUsd === undefined ? undefined : Math.max(0, input.budgetUsd - carried.costUsd);
  const harness = harnessFor(input.agent);
  const run = harness.invocation({
    subTaskId: input.workerId,
    objective: input.objective,
    prompt: input.prompt,
    ...(input.brief && { brief: input.brief }),
    inputDir: sb.scratch,
    sessionId,
    message: input.message,
    ...(input.notice && { notice: input.notice }),
    maxTurns: input.maxTurns,
    interrupted: input.interrupted || info.attempt > 1,
    sessionBudgetUsd: remainingUsd === undefined ? undefined : sessionCostUsd + remainingUsd,
  });
  for (const [file, content] of Object.entries(run.files))
    await sb.writeFile(file, content).catch((err: unknown) => {
      throw homeWriteError(err, `writing the input of agent ${input.workerId}`, sb.scratch);
    });
  const env = { ...run.env, ...input.extraEnv };
  for (const name of harness.passEnv) {
    const value = process.env[name];
    if (value !== undefined) env[name] = value;
  }
  const parser = new CarryingParser(harness.parser(sessionCostUsd), carried);
  const report = await execTracked(deps, sb, run.command, {
    idleMs: input.idleMs,
    onProgress: watchProgress(watchKey, input.reportTurns),
    env,
    timeoutMs: input.timeoutMs,
    label: `agent ${input.workerId}`,
    parser,
    budgetUsd: input.budgetUsd,
    readOnly: input.readOnly,
    egress: modelApiRules(harness.modelApi),
    run: runKey,
  }).finally(() => watchKey !== undefined && forgetOutput(watchKey));
  const outcome = parser.finish(report.exitCode);
  return {
    ...report,
    budgetExceeded: report.budgetExceeded || outcome.hitBudget,
    agent: outcome,
    sessionCostUsd: sessionCostUsd + outcome.costUsd - carried.costUsd,
  };
}
