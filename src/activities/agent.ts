/** Running a sub-task's agent and collecting what it did. */
import { Context } from '@temporalio/activity';
import { harnessFor } from '../agents';
import { CarryingParser, readCarryOver } from '../agents/carry-over';
import type { AgentOutcome } from '../agents/types';
import { BUNDLE_REF, runRef } from '../gitstore';
import { type AgentSpec, normalizeRepoPath, pathIsUnder } from '../spec';
import type { Sandbox } from '../sandbox/types';
import { type ActivityDeps, type SandboxRef, openSandbox } from './deps';
import { type CommandReport, execTracked, script, sh } from './exec';

export interface AgentRunReport extends CommandReport {
  budgetExceeded: boolean;
  /** The run's outcome; its costUsd is what this run alone cost, interrupted attempts included. */
  agent: AgentOutcome;
  /** What the agent's session has cost so far, for the next resumed run. */
  sessionCostUsd: number;
}

/** A report names at most this many out-of-scope paths; the count says how many there were. */
const MAX_LISTED_PATHS = 20;

export interface CollectedWork {
  ref?: string;
  headSha: string;
  commits: number;
  filesChanged: number;
  /** Changed paths outside the allowed paths (at most MAX_LISTED_PATHS), and how many there were. */
  outOfScope: string[];
  outOfScopeCount: number;
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
  /** Dollars this run may spend; the agent is stopped when its cost so far passes it. */
  budgetUsd?: number;
  /** What the resumed session had cost before this run. */
  sessionCostUsd?: number;
  /** Run with the workspace mounted read-only (a planner looks, it does not touch). */
  readOnly?: boolean;
  /** Variables for this role beyond what the harness sets (a planner's plan file). */
  extraEnv?: Record<string, string>;
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
export async function runHarness(deps: ActivityDeps, sb: Sandbox, input: AgentRunInput): Promise<AgentRunReport> {
  const info = Context.current().info;
  const carried = readCarryOver(info.heartbeatDetails);
  const sessionId = carried.sessionId ?? input.sessionId;
  // What the resumed session had cost before this run, as the agent will count it: a session
  // the interrupted attempt started never finished cleanly, so it starts from nothing. (An agent
  // that counts the interrupted attempt anyway, as Codex's thread totals may, overstates the
  // cost: the safe side for a budget.)
  const sessionCostUsd = sessionId && sessionId === input.sessionId ? (input.sessionCostUsd ?? 0) : 0;
  const remainingUsd = input.budgetUsd === undefined ? undefined : Math.max(0, input.budgetUsd - carried.costUsd);
  const harness = harnessFor(input.agent);
  const run = harness.invocation({
    workerId: input.workerId,
    objective: input.objective,
    prompt: input.prompt,
    inputDir: sb.scratch,
    sessionId,
    message: input.message,
    maxTurns: input.maxTurns,
    interrupted: info.attempt > 1,
    sessionBudgetUsd: remainingUsd === undefined ? undefined : sessionCostUsd + remainingUsd,
  });
  for (const [file, content] of Object.entries(run.files)) await sb.writeFile(file, content);
  const env = { ...run.env, ...input.extraEnv };
  for (const name of harness.passEnv) {
    const value = process.env[name];
    if (value !== undefined) env[name] = value;
  }
  const parser = new CarryingParser(harness.parser(sessionCostUsd), carried);
  const report = await execTracked(deps, sb, run.command, {
    env,
    timeoutMs: input.timeoutMs,
    label: `agent ${input.workerId}`,
    parser,
    budgetUsd: input.budgetUsd,
    readOnly: input.readOnly,
  });
  const outcome = parser.finish(report.exitCode);
  return {
    ...report,
    budgetExceeded: report.budgetExceeded || outcome.hitBudget,
    agent: outcome,
    sessionCostUsd: sessionCostUsd + outcome.costUsd - carried.costUsd,
  };
}

export function agentActivities(deps: ActivityDeps) {
  return {
    /** One run of a sub-task's agent in its worker's sandbox. */
    async runAgent(input: AgentRunInput & { sandbox: SandboxRef }): Promise<AgentRunReport> {
      return runHarness(deps, await openSandbox(deps, input.sandbox), input);
    },

    /**
     * Commits anything the agent left uncommitted (so it is not lost), checks the changed paths
     * against the paths it may change and copies the commits into the staging repository. Safe to repeat.
     */
    async collectWork(input: {
      sandbox: SandboxRef;
      runKey: string;
      workerId: string;
      baseSha: string;
      /** The sub-task's ownedPaths plus the request's sharedPaths. */
      allowedPaths: string[];
    }): Promise<CollectedWork> {
      const sb = await openSandbox(deps, input.sandbox);
      const base = sh(input.baseSha);
      const out = await script(
        sb,
        `git add -A
git diff --cached --quiet || git commit -q --no-verify -m ${sh(`flotilla: uncommitted work left by ${input.workerId}`)}
if ! git merge-base --is-ancestor ${base} HEAD; then echo "the worker's branch no longer descends from the base commit" >&2; exit 3; fi
echo "HEAD $(git rev-parse HEAD)"
echo "COUNT $(git rev-list --count ${base}..HEAD)"
git -c core.quotepath=off diff --name-only --no-renames ${base} HEAD | sed 's/^/PATH /'`,
        'collecting the worker\'s commits',
      );
      const lines = out.split('\n');
      const field = (name: string) => lines.find((l) => l.startsWith(`${name} `))?.slice(name.length + 1) ?? '';
      const headSha = field('HEAD');
      const commits = Number(field('COUNT'));
      const paths = lines.filter((l) => l.startsWith('PATH ')).map((l) => l.slice(5));
      const allowed = input.allowedPaths.map(normalizeRepoPath);
      const outside = paths.filter((p) => !allowed.some((o) => pathIsUnder(p, o)));
      const result: CollectedWork = {
        headSha,
        commits,
        filesChanged: paths.length,
        outOfScope: outside.slice(0, MAX_LISTED_PATHS),
        outOfScopeCount: outside.length,
      };
      if (commits === 0) return result;
      const bundle = `${sb.scratch}/work.bundle`;
      await script(sb, `git update-ref ${BUNDLE_REF} HEAD\ngit bundle create -q ${sh(bundle)} ${BUNDLE_REF} ^${base}`, 'bundling the worker\'s commits');
      const staging = await deps.staging();
      const ref = runRef(input.runKey, `workers/${input.workerId}`);
      await staging.importBundle(await sb.readFile(bundle), ref);
      return { ...result, ref };
    },
  };
}
