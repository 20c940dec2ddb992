/**
 * The fixers of the integration: the resolver (a conflicting merge) and the repair agent (failing
 * tests). One round is one invocation in the fixer sandbox, which never holds the hidden tests, so
 * nothing a test process leaves behind can reach a fixer. What comes back is only ever a tree,
 * checked on the host before the host commits it (src/git/edits.ts).
 */
import { randomBytes } from 'node:crypto';
import { pathIsUnder } from '../contracts/names';
import { type Intent, repairPrompt, resolverPrompt } from '../contracts/prompts';
import type { AgentSpec } from '../contracts/request';
import { mergeToResolve } from '../git/conflicts';
import { type FixerEdits, acceptEdits, resetCheckout } from '../git/edits';
import { commitTree, mergeMessage } from '../git/merge';
import { checkoutCommit } from '../git/seeding';
import type { StagingRepo } from '../git/staging';
import type { Workspace } from '../git/workspace';
import { type ActivityDeps, type SandboxRef, openWorkspace, runOfSandbox } from './deps';
import { execTracked } from './exec';
import { sandboxUse } from './integration-sandboxes';
import { runHarness } from './invocation';

/** One round of a resolver or repair agent. */
export interface FixerRound {
  ok: boolean;
  /** Why the round was rejected. */
  reason?: string;
  /** The integration head afterwards (the new commit when ok). */
  sha: string;
  diffstat?: string;
  costUsd: number;
  /** The agent's full output, when an agent ran. */
  logRef?: string;
}

interface FixerInput {
  /** The fixer sandbox: never holds the hidden tests. */
  sandbox: SandboxRef;
  runKey: string;
  baseSha: string;
  agent: AgentSpec;
  objective: string;
  round: number;
  maxRounds: number;
  /** What the agent is told to verify its work with: the setup and test commands. */
  verifyCmd: string;
  timeoutMs: number;
  /** Dollars this round may spend; the agent is stopped when it passes them. */
  budgetUsd?: number;
  /** The hidden tests' commit in the staging repository: their paths are off limits. */
  oracleSha?: string;
  /** Seconds since the epoch for the commits this round makes, so a retry makes the same ones. */
  at: number;
}

interface FixerRun {
  failure?: string;
  costUsd: number;
  logRef: string;
}

/** Runs a fixer agent on `prompt` in the fixer sandbox. */
async function runFixer(
  deps: ActivityDeps,
  ws: Workspace,
  input: FixerInput,
  role: 'resolver' | 'repair',
  prompt: string,
): Promise<FixerRun> {
  const run = await runHarness(
    deps,
    ws.sb,
    {
      agent: input.agent,
      workerId: role,
      objective: input.objective,
      prompt,
      timeoutMs: input.timeoutMs,
      budgetUsd: input.budgetUsd,
    },
    input.runKey,
  );
  // No one is there to answer a fixer mid-integration: a question ends its round, and shows in the report.
  const failure = run.budgetExceeded
    ? `the ${role} agent was stopped at its budget`
    : run.timedOut
      ? `the ${role} agent timed out`
      : run.agent.question
        ? `the ${role} agent stopped to ask: ${run.agent.question}`
        : run.exitCode !== 0
          ? `the ${role} agent exited with code ${run.exitCode}`
          : undefined;
  return { failure, costUsd: run.agent.costUsd, logRef: run.logRef };
}

function rejected(reason: string, sha: string, run: FixerRun): FixerRound {
  return { ok: false, reason, sha, costUsd: run.costUsd, logRef: run.logRef };
}

/** The end of a round whose agent finished: its edits become the host's commit, or the round is rejected. */
async function finishRound(ws: Workspace, staging: StagingRepo, run: FixerRun, edits: FixerEdits): Promise<FixerRound> {
  if (run.failure) return rejected(run.failure, edits.from, run);
  const accepted = await acceptEdits(ws, staging, edits);
  if ('problem' in accepted) return rejected(accepted.problem, edits.from, run);
  return { ok: true, sha: accepted.sha, diffstat: accepted.diffstat, costUsd: run.costUsd, logRef: run.logRef };
}

type ResolveInput = FixerInput & {
  workerId: string;
  headSha: string;
  intoSha: string;
  title: string;
  incoming: Intent;
  integrated: Intent[];
  previousFailure?: string;
};

type RepairInput = FixerInput & {
  fromSha: string;
  tasks: Intent[];
  /** The command that failed on the gate and its exit code. */
  failedCmd: string;
  exitCode: number;
  /** The gate's output, when no hidden tests took part in it. */
  logRef?: string;
  /** Per command, for the visible run. */
  commandTimeoutMs: number;
  /** Normalized: the sub-tasks' ownedPaths and sharedPaths. */
  allowedPaths: string[];
};

/**
 * What the repair agent is shown of the failure: the gate's own output when no hidden tests took
 * part in it, else a run of the visible tests here (and, when those pass, only that hidden tests fail).
 */
async function failureToShow(deps: ActivityDeps, ws: Workspace, input: RepairInput) {
  if (input.logRef)
    return {
      output: (await deps.artifacts.get(input.logRef)).toString('utf8'),
      exitCode: input.exitCode,
      hiddenOnly: false,
    };
  const visible = await execTracked(deps, ws.sb, input.verifyCmd, {
    timeoutMs: input.commandTimeoutMs,
    label: 'visible tests',
    run: runOfSandbox(input.sandbox),
  });
  const output = (await deps.artifacts.get(visible.logRef)).toString('utf8');
  await resetCheckout(ws, input.fromSha, 'resetting after the visible tests');
  return { output, exitCode: visible.exitCode, hiddenOnly: visible.exitCode === 0 && !visible.timedOut };
}

export function fixerActivities(deps: ActivityDeps) {
  const rounds = {
    /**
     * One resolver round on the host's conflicted merge of `headSha` into `intoSha`: the fixer
     * sandbox gets a checkout at `intoSha` whose working tree holds the merge with its conflict
     * markers. The round succeeds when the tree it leaves has no conflict marker or .rej file and
     * changes only files the merge touches; the host then commits the merge with that tree.
     */
    async resolveConflict(input: ResolveInput): Promise<FixerRound> {
      const ws = await openWorkspace(deps, input.sandbox);
      const staging = await deps.staging(input.runKey);
      const resolvedBy = `\nFlotilla-Resolved-By: resolver round ${input.round}`;
      const commit = {
        parents: [input.intoSha, input.headSha],
        message: mergeMessage(input.title, input.workerId, input.runKey, resolvedBy),
        at: input.at,
      };
      const merge = await mergeToResolve(staging.dir, input);
      if (merge.clean) {
        const sha = await commitTree(staging.dir, { tree: merge.tree, ...commit });
        await staging.share(input.runKey, sha);
        return { ok: true, sha, costUsd: 0 };
      }
      const at = { sandboxKey: input.sandbox.key, runKey: input.runKey, baseSha: input.baseSha };
      await checkoutCommit(ws, staging, deps.dataDir, { ...at, sha: merge.conflicted, indexAt: input.intoSha });
      const prompt = resolverPrompt({
        ...input,
        files: merge.files,
        hunks: merge.hunks,
        nonce: randomBytes(8).toString('hex'),
      });
      const run = await runFixer(deps, ws, input, 'resolver', prompt);
      return finishRound(ws, staging, run, {
        runKey: input.runKey,
        from: input.intoSha,
        allowed: (p) => merge.touched.has(p),
        oracleSha: input.oracleSha,
        commit,
        diffPaths: merge.files,
      });
    },

    /**
     * One repair round on `fromSha`, whose tests failed (see failureToShow for what the agent
     * sees). Its working tree becomes one host commit on `fromSha`, unless it changes a path
     * outside `allowedPaths` or a hidden test path, leaves conflict markers or .rej files, or
     * changes nothing.
     */
    async repairTests(input: RepairInput): Promise<FixerRound> {
      const ws = await openWorkspace(deps, input.sandbox);
      const staging = await deps.staging(input.runKey);
      const at = { sandboxKey: input.sandbox.key, runKey: input.runKey, baseSha: input.baseSha };
      await checkoutCommit(ws, staging, deps.dataDir, { ...at, sha: input.fromSha });
      const failure = await failureToShow(deps, ws, input);
      const prompt = repairPrompt({
        ...input,
        ...failure,
        failedCmd: input.logRef ? input.failedCmd : input.verifyCmd,
        hidden: !input.logRef,
        nonce: randomBytes(8).toString('hex'),
      });
      const run = await runFixer(deps, ws, input, 'repair', prompt);
      return finishRound(ws, staging, run, {
        runKey: input.runKey,
        from: input.fromSha,
        allowed: (p) => input.allowedPaths.some((a) => pathIsUnder(p, a)),
        oracleSha: input.oracleSha,
        unchanged: 'the repair agent changed nothing',
        commit: {
          parents: [input.fromSha],
          message: `Repair round ${input.round}: make the tests pass\n\nFlotilla-Repair-Round: ${input.round}\nFlotilla-Run: ${input.runKey}`,
          at: input.at,
        },
      });
    },
  };
  // Each round counts as a use of the fixer sandbox, which its keeper destroys only after it.
  const use = sandboxUse(deps);
  return {
    resolveConflict: (input: ResolveInput) => use.during(input.sandbox.key, () => rounds.resolveConflict(input)),
    repairTests: (input: RepairInput) => use.during(input.sandbox.key, () => rounds.repairTests(input)),
  };
}
