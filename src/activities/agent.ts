/** Running a sub-task's agent and collecting what it did. */
import { stat } from 'node:fs/promises';
import { Context } from '@temporalio/activity';
import { harnessFor } from '../agents';
import { CarryingParser, readCarryOver } from '../agents/carry-over';
import type { AgentOutcome } from '../agents/types';
import { tail } from '../store/artifacts';
import { permanent } from '../contracts/failures';
import { BUNDLE_REF, runRef } from '../git/staging';
import { mountedObjects } from '../git/run-mirror';
import { type AgentSpec, CommitPolicy } from '../contracts/request';
import { modelApiRules } from '../sandbox/egress/rules';
import { type VerifiedWork, verifyWork } from '../git/verify';
import type { Sandbox } from '../sandbox/types';
import { type ActivityDeps, type SandboxRef, openSandbox, runOfSandbox } from './deps';
import { type CommandReport, execTracked, runScript, sh } from './exec';
import { SEEDED_MARKER, lendObjects } from './sandbox';

type CommitPolicyInput = Partial<CommitPolicy>;

export interface AgentRunReport extends CommandReport {
  budgetExceeded: boolean;
  /** The run's outcome; its costUsd is what this run alone cost, interrupted attempts included. */
  agent: AgentOutcome;
  /** What the agent's session has cost so far, for the next resumed run. */
  sessionCostUsd: number;
}

/** Bytes of packed commits one worker may hand over. */
export const MAX_IMPORT_BYTES = 512 * 1024 * 1024;
const EXIT_NO_COMMITS = 10;
const EXIT_TOO_BIG = 11;

/** What a worker's commits are, as the staging repository sees them; `ref` is set when there are any. */
export interface CollectedWork extends VerifiedWork {
  ref?: string;
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
  /** The agent's previous run was cut short (its sandbox's host was lost): it is told so, as after a crash. */
  interrupted?: boolean;
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
export async function runHarness(
  deps: ActivityDeps,
  sb: Sandbox,
  input: AgentRunInput,
  runKey: string,
): Promise<AgentRunReport> {
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
    subTaskId: input.workerId,
    objective: input.objective,
    prompt: input.prompt,
    inputDir: sb.scratch,
    sessionId,
    message: input.message,
    maxTurns: input.maxTurns,
    interrupted: input.interrupted || info.attempt > 1,
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
    egress: modelApiRules(harness.modelApi),
    run: runKey,
  });
  const outcome = parser.finish(report.exitCode);
  return {
    ...report,
    budgetExceeded: report.budgetExceeded || outcome.hitBudget,
    agent: outcome,
    sessionCostUsd: sessionCostUsd + outcome.costUsd - carried.costUsd,
  };
}

/** A bundle over MAX_IMPORT_BYTES is refused before it is copied out of the sandbox, and after. */
export function checkImportSize(bytes: number): void {
  if (bytes > MAX_IMPORT_BYTES)
    throw permanent(
      'TooLarge',
      `the worker's commits take ${bytes} bytes packed, over the import limit of ${MAX_IMPORT_BYTES} bytes`,
    );
}

export function agentActivities(deps: ActivityDeps) {
  return {
    /** One run of a sub-task's agent in its worker's sandbox. */
    async runAgent(input: AgentRunInput & { sandbox: SandboxRef }): Promise<AgentRunReport> {
      return runHarness(deps, await openSandbox(deps, input.sandbox), input, runOfSandbox(input.sandbox));
    },

    /**
     * Commits anything the agent left uncommitted (so it is not lost), bundles the commits and
     * imports them into the staging repository, where they are checked (lineage, policy, paths
     * against the paths it may change); nothing the sandbox prints decides what is accepted (one
     * that claims there are no commits only loses its own work). Work that cannot
     * be collected (too large, refused by the policy, unrelated history) is a permanent failure
     * saying why. Safe to repeat.
     */
    async collectWork(input: {
      sandbox: SandboxRef;
      runKey: string;
      workerId: string;
      baseSha: string;
      /** The sub-task's ownedPaths plus the request's sharedPaths. */
      allowedPaths: string[];
      /** The request's policy; runs started before it existed get the defaults. */
      policy?: CommitPolicyInput;
    }): Promise<CollectedWork> {
      const policy = CommitPolicy.parse(input.policy ?? {});
      const sb = await openSandbox(deps, input.sandbox);
      const bundle = `${sb.scratch}/work.bundle`;
      const base = sh(input.baseSha);
      // The size pre-check only saves hashing a huge file just to refuse it; the host decides.
      // The agent's processes are gone by now, so an index.lock is stale (a git it killed).
      // The base's objects come through the run's store, whatever the agent made of alternates.
      const r = await runScript(
        sb,
        `rm -f ${sh(bundle)}
${lendObjects(sb, mountedObjects(deps.dataDir, input.sandbox.key))}
newer=(); if [ -f ${SEEDED_MARKER} ]; then newer=(-newer ${SEEDED_MARKER}); fi
big=$(find . -path ./.git -prune -o -type f -size +${policy.maxFileBytes}c "\${newer[@]}" -print -quit)
if [ -n "$big" ]; then echo; echo "BIG $(stat -c %s -- "$big") $big"; exit ${EXIT_TOO_BIG}; fi
rm -rf .git/index.lock
git add -A
git diff --cached --quiet || git commit -q --no-verify -m ${sh(`flotilla: uncommitted work left by ${input.workerId}`)}
if [ "$(git rev-parse HEAD)" = ${base} ]; then exit ${EXIT_NO_COMMITS}; fi
git update-ref --no-deref ${BUNDLE_REF} HEAD
git bundle create -q ${sh(bundle)} ${BUNDLE_REF} ^${base}
echo; echo "SIZE $(stat -c %s ${sh(bundle)})"`,
      );
      const last = r.output.trimEnd().split('\n').pop() ?? '';
      if (r.exitCode === EXIT_NO_COMMITS)
        return { headSha: input.baseSha, commits: 0, filesChanged: 0, outOfScope: [], outOfScopeCount: 0 };
      if (r.exitCode === EXIT_TOO_BIG && last.startsWith('BIG ')) {
        const [, size, ...name] = last.split(' ');
        throw permanent(
          'TooLarge',
          `"${name.join(' ').replace(/^\.\//, '')}" is ${size} bytes, over the limit of ${policy.maxFileBytes} bytes (policy.maxFileBytes)`,
        );
      }
      if (r.exitCode !== 0) {
        throw new Error(
          `collecting the worker's commits failed (exit ${r.exitCode}${r.timedOut ? ', timed out' : ''}): ${tail(r.output, 1500)}`,
        );
      }
      const size = /^SIZE (\d+)$/.exec(last)?.[1];
      if (size === undefined)
        throw new Error(`collecting the worker's commits did not report the bundle's size: ${tail(r.output, 500)}`);
      checkImportSize(Number(size));
      const staging = await deps.staging(input.runKey);
      const ref = runRef(input.runKey, `workers/${input.workerId}`);
      await staging.withBundleFile(async (file) => {
        await sb.copyOut(bundle, file);
        checkImportSize((await stat(file)).size);
        await staging.importBundle(file, ref);
      });
      try {
        const work = await verifyWork(staging, {
          ref,
          baseSha: input.baseSha,
          allowedPaths: input.allowedPaths,
          policy,
        });
        return { ...work, ref };
      } catch (err) {
        // Nothing may build on refused commits.
        await staging.deleteRef(ref);
        throw err;
      }
    },
  };
}
