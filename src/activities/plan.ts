/** The planner: an agent that looks at the repository (read-only) and proposes sub-tasks. */
import { randomUUID } from 'node:crypto';
import { type ReplanContext, replanBrief } from '../contracts/prompts';
import { tail } from '../store/artifacts';
import {
  type AgentSpec,
  type LeaderRequest,
  RequestError,
  type SubTask,
  parseLeaderRequest,
} from '../contracts/request';
import { missingForAgents } from './agent-preflight';
import { runHarness } from './invocation';
import { type ActivityDeps, type SandboxRef, openSandbox, runOfSandbox } from './deps';

/** A plan larger than this is refused rather than carried through workflow history. */
const MAX_PLAN_BYTES = 32 * 1024;

function plannerPrompt(objective: string, maxSubTasks: number, problems: string[], replan?: ReplanContext): string {
  const lines = [
    'You plan the work of a team of coding agents that will work on this repository in parallel.',
    '',
    `Objective: ${objective}`,
    '',
    'Inspect the repository (it is read-only for you) and split the objective into sub-tasks',
    `(at most ${maxSubTasks}). Sub-tasks that own disjoint paths run at the same time; a sub-task that`,
    "needs another's result lists it in dependsOn, and starts once that one is integrated, on top of it.",
    'Write the plan as JSON to the file named by $FLOTILLA_PLAN_FILE, or end your final message with it:',
    '',
    '{"subTasks": [{"id": "short-id", "prompt": "precisely what to do", "ownedPaths": ["dir/or/file"], "dependsOn": []}]}',
    '',
    'Rules: ids use letters, digits, "-" and "_"; ownedPaths are relative to the repository root; a',
    'sub-task may change only what it owns. Two sub-tasks whose owned paths overlap never run at once:',
    'the later one waits for the earlier, so prefer disjoint paths. dependsOn names ids of the plan.',
    'A sub-task may give its own "limits": {"subTaskBudgetUsd": dollars, "maxTurns": n, "agentTimeoutMinutes": n}',
    "(each optional) where it needs more or less than the run's; leave them out otherwise.",
  ];
  if (replan) lines.push('', replanBrief(replan, randomUUID()));
  if (problems.length) {
    lines.push('', 'Your previous plan was refused for these reasons; fix them:', ...problems.map((p) => `- ${p}`));
  }
  return lines.join('\n');
}

/** The last JSON object in `text` that has a subTasks field, if any. */
export function extractPlan(text: string): unknown {
  for (let start = text.lastIndexOf('{'); start >= 0; start = text.lastIndexOf('{', start - 1)) {
    const end = text.lastIndexOf('}');
    for (let stop = end; stop > start; stop = text.lastIndexOf('}', stop - 1)) {
      try {
        const value = JSON.parse(text.slice(start, stop + 1));
        if (value && typeof value === 'object' && 'subTasks' in value) return value;
        break;
      } catch {
        // Not a complete object yet; try a shorter or an earlier span.
      }
    }
  }
  return undefined;
}

/**
 * A proposal parsed and defaulted like a caller's plan, or every reason it is refused. The
 * request's own sub-tasks (a replan's plan as it stands) are validated with it: only the
 * proposal's come back, and its problems are numbered as the planner numbered its sub-tasks.
 */
function validatePlan(
  request: LeaderRequest,
  proposed: unknown,
  provider: SandboxRef['provider'],
): { plan: SubTask[] } | { problems: string[] } {
  const existing = request.subTasks ?? [];
  const subTasks = existing.length && Array.isArray(proposed) ? [...existing, ...proposed] : proposed;
  try {
    const plan = parseLeaderRequest({ ...request, subTasks }).subTasks!.slice(existing.length);
    const missing = missingForAgents(
      plan.flatMap((t) => (t.agent ? [t.agent.kind] : [])),
      provider,
    );
    if (missing.length) return { problems: missing.map((m) => `subTasks: ${m} (use another agent kind)`) };
    return { plan };
  } catch (err) {
    if (!(err instanceof RequestError)) throw err;
    const renumber = (p: string) =>
      p.replace(/^subTasks\[(\d+)\]/, (_m, i: string) =>
        Number(i) >= existing.length
          ? `subTasks[${Number(i) - existing.length}]`
          : `the plan's sub-task ${existing[Number(i)].id}`,
      );
    return { problems: err.problems.map(renumber) };
  }
}

export function planActivities(deps: ActivityDeps) {
  return {
    /**
     * Runs the planner once. With `request`, validates the proposal exactly like a caller's plan
     * and returns it parsed and defaulted (`plan`), or every reason it is refused (`problems`):
     * the result is in history, so a later release's schema cannot change a run in flight.
     * Without it (runs started before that), the sub-tasks come back as the agent wrote them.
     */
    async proposePlan(input: {
      sandbox: SandboxRef;
      agent: AgentSpec;
      objective: string;
      maxSubTasks: number;
      /** Why the previous proposal was refused, for the retry. */
      problems: string[];
      timeoutMs: number;
      budgetUsd?: number;
      /**
       * The run's request, to validate the proposal against. For a replan, its sub-tasks are the
       * plan as it stands: the proposal is validated together with them, and only its own returned.
       */
      request?: LeaderRequest;
      /** A replan round (onFailure: replan): what failed, what is integrated, what is still planned. */
      replan?: ReplanContext;
    }): Promise<{
      subTasks?: unknown;
      plan?: SubTask[];
      problems?: string[];
      problem?: string;
      costUsd: number;
      tail: string;
      logRef: string;
    }> {
      const sb = await openSandbox(deps, input.sandbox);
      const planFile = `${sb.scratch}/plan.json`;
      await sb.writeFile(planFile, '');
      const run = await runHarness(
        deps,
        sb,
        {
          agent: input.agent,
          workerId: 'planner',
          objective: input.objective,
          prompt: plannerPrompt(input.objective, input.maxSubTasks, input.problems, input.replan),
          timeoutMs: input.timeoutMs,
          budgetUsd: input.budgetUsd,
          readOnly: true,
          extraEnv: { FLOTILLA_PLAN_FILE: planFile },
        },
        runOfSandbox(input.sandbox),
      );
      const common = { costUsd: run.agent.costUsd, tail: run.tail, logRef: run.logRef };
      if (run.exitCode !== 0 || run.timedOut)
        return { ...common, problem: `the planner ${run.timedOut ? 'timed out' : `exited with code ${run.exitCode}`}` };
      const written = Buffer.from(await sb.readFile(planFile)).toString('utf8');
      const source = written.trim()
        ? written
        : (run.agent.finalMessage ?? (await deps.artifacts.get(run.logRef)).toString('utf8'));
      if (Buffer.byteLength(source) > MAX_PLAN_BYTES * 4 && !written.trim()) {
        return { ...common, problem: 'the planner wrote no plan file and its output is too long to search for one' };
      }
      const plan = extractPlan(source) as { subTasks?: unknown } | undefined;
      if (!plan)
        return { ...common, problem: `the planner produced no JSON plan (its output ends: ${tail(source, 300)})` };
      if (Buffer.byteLength(JSON.stringify(plan.subTasks)) > MAX_PLAN_BYTES) {
        return { ...common, problem: `the plan is larger than ${MAX_PLAN_BYTES / 1024} KiB` };
      }
      if (!input.request) return { ...common, subTasks: plan.subTasks };
      return { ...common, ...validatePlan(input.request, plan.subTasks, input.sandbox.provider) };
    },
  };
}
