/**
 * One sub-task: a sandbox of its own, the agent run in it, its commits collected and checked
 * against the paths it may change. An agent that runs out of budget or turns, asks a question,
 * or is paused by an operator suspends the worker instead of failing it: the sandbox is kept
 * and the worker waits for `resume`. An agent run that fails (exits non-zero, times out, or its
 * activity fails for good) still has its work collected into staging first, reported as
 * `salvaged` (unverified) so a person can recover it. The sandbox is destroyed however the
 * worker ends.
 */
import {
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  condition,
  getExternalWorkflowHandle,
  isCancellation,
  patched,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { Activities, AgentRunReport, CommandReport, SandboxRef } from '../activities';
import type { WorkerSeed } from '../activities/integrate';
import { rootMessage } from '../failures';
import type { AgentSpec, CommitPolicy, Isolation, WorkerReport } from '../spec';
import { MAX_CHARS } from '../spec';
import { ResumeInput, type WorkerProgress, parseMessage, pauseSignal, resumeSignal, workerProgressSignal } from './messages';
import { activityOptions, commandOptions } from './options';
import { clip } from './text';

export interface WorkerInput {
  runKey: string;
  objective: string;
  task: { id: string; prompt: string; ownedPaths: string[]; sharedPaths: string[] };
  agent: AgentSpec;
  baseSha: string;
  /** Start from this commit instead of the base: the integrated tree, for a sub-task redone on top of it. */
  seed?: WorkerSeed;
  sandbox: Omit<SandboxRef, 'key'>;
  setupCmd?: string;
  workerTimeoutMs: number;
  commandTimeoutMs: number;
  heartbeatTimeoutMs: number;
  budgetUsd?: number;
  maxTurns?: number;
  suspendTimeoutMs: number;
  /** What the worker's commits may contain (absent in runs started before it existed). */
  policy?: CommitPolicy;
  /** Proves to the leader that progress comes from this child; nobody else has it. */
  progressToken: string;
}

/** Why an agent run stopped short of finishing and the worker should wait for a person. */
function suspension(run: AgentRunReport, spentUsd: number, budgetUsd: number | undefined, maxTurns: number | undefined): string | undefined {
  if (run.agent.question) return 'the agent needs an answer';
  if (run.budgetExceeded) return `the agent used its budget ($${spentUsd.toFixed(2)} of $${(budgetUsd ?? 0).toFixed(2)})`;
  // Agents that cannot enforce a limit themselves (shell commands) are held to it here.
  if (run.agent.hitTurnLimit || (maxTurns !== undefined && run.agent.turns > maxTurns)) return `the agent reached its turn limit (${maxTurns ?? 'its own'})`;
  return undefined;
}

/** Runs started before failed agent runs had their work salvaged destroy the sandbox at once, as they did then. */
const SALVAGE_FAILED_RUNS = 'salvage-failed-agent-runs';

export async function workerWorkflow(input: WorkerInput): Promise<WorkerReport> {
  const { provisionSandbox, seedWorkspace, checkoutSeed, collectWork, destroySandbox, pauseSandbox, resumeSandbox } = proxyActivities<Activities>(
    activityOptions(input.heartbeatTimeoutMs),
  );
  const { runCommand } = proxyActivities<Activities>(commandOptions(input.commandTimeoutMs, input.heartbeatTimeoutMs));
  // Salvage is best effort after a failure already decided: a workspace that cannot be collected holds the worker only briefly.
  const salvageWork = proxyActivities<Activities>({
    ...activityOptions(input.heartbeatTimeoutMs),
    scheduleToCloseTimeout: Math.max(2 * 60_000, 4 * input.heartbeatTimeoutMs),
  }).collectWork;
  const { runAgent } = proxyActivities<Activities>(commandOptions(input.workerTimeoutMs, input.heartbeatTimeoutMs));
  const { task } = input;
  const sandbox: SandboxRef = { key: `${input.runKey}/worker/${task.id}`, ...input.sandbox };
  const started = Date.now();
  let isolation: Isolation = 'none';
  let costUsd = 0;
  let turns = 0;
  let runs = 0;
  let budget = input.budgetUsd;

  // ---- Messages: pause and resume arrive from the leader ----
  let pauseRequested = false;
  let resume: ResumeInput | undefined;
  let agentScope: CancellationScope | undefined;
  // The leader validated these; anyone else signalling the child directly is held to the same schema.
  setHandler(pauseSignal, () => {
    pauseRequested = true;
    agentScope?.cancel();
  });
  setHandler(resumeSignal, (raw: unknown) => {
    const parsed = parseMessage(ResumeInput, raw);
    if (parsed.ok) resume = parsed.value;
  });
  const parentId = workflowInfo().parent?.workflowId;
  const tellLeader = async (state: WorkerProgress['state'], extra: { reason?: string; question?: string } = {}) => {
    if (!parentId) return;
    const progress: WorkerProgress = {
      token: input.progressToken,
      id: task.id,
      state,
      costUsd,
      turns,
      reason: extra.reason && clip(extra.reason, MAX_CHARS.comment - 100),
      question: extra.question && clip(extra.question, MAX_CHARS.message - 100),
    };
    // A leader that has closed cannot be told; the worker's own result still says how it ended.
    await getExternalWorkflowHandle(parentId)
      .signal(workerProgressSignal, progress)
      .catch(() => undefined);
  };

  const report = (fields: Partial<WorkerReport> & Pick<WorkerReport, 'status'>): WorkerReport => ({
    workerId: task.id,
    commits: 0,
    filesChanged: 0,
    isolation,
    durationMs: Date.now() - started,
    costUsd,
    turns,
    runs,
    ...fields,
  });
  const failedCommand = (what: string, run: CommandReport): WorkerReport =>
    report({
      status: 'failed',
      reason: run.timedOut ? `${what} timed out` : `${what} exited with code ${run.exitCode}`,
      exitCode: run.exitCode,
      tail: run.tail,
      logRef: run.logRef,
    });
  const collect = (collectWith = collectWork) =>
    collectWith({
      sandbox,
      runKey: input.runKey,
      workerId: task.id,
      baseSha: input.seed?.sha ?? input.baseSha,
      allowedPaths: [...task.ownedPaths, ...task.sharedPaths],
      policy: input.policy,
    });
  /**
   * A failed agent run's report, with the work it left collected into staging before the sandbox
   * goes: unverified (no tests ran on it), but recoverable. A failure to collect is reported
   * beside the reason, never in its place.
   */
  const salvage = async (failed: WorkerReport): Promise<WorkerReport> => {
    if (!patched(SALVAGE_FAILED_RUNS)) return failed;
    try {
      const work = await collect(salvageWork);
      if (work.commits === 0 || !work.ref) return failed;
      return { ...failed, salvaged: { ref: work.ref, headSha: work.headSha, commits: work.commits } };
    } catch (err) {
      if (isCancellation(err)) throw err;
      return { ...failed, salvageFailed: clip(rootMessage(err), 500) };
    }
  };

  try {
    ({ isolation } = await provisionSandbox(sandbox));
    await seedWorkspace({
      sandbox,
      runKey: input.runKey,
      baseSha: input.baseSha,
      branch: `flotilla/${input.runKey}/${task.id}`,
      author: `Flotilla worker ${task.id}`,
    });
    if (input.seed) await checkoutSeed({ sandbox, baseSha: input.baseSha, seed: input.seed });
    if (input.setupCmd) {
      const setup = await runCommand.executeWithOptions({ summary: `setup ${task.id}: ${input.setupCmd}`.slice(0, 200) }, [
        { sandbox, command: input.setupCmd, timeoutMs: input.commandTimeoutMs, label: 'setup' },
      ]);
      if (setup.exitCode !== 0 || setup.timedOut) return failedCommand('the setup command', setup);
    }

    // ---- The agent, as many runs as suspensions and resumptions take ----
    let sessionId: string | undefined;
    let sessionCostUsd = 0;
    let message: string | undefined;
    /** One agent run, or undefined when an operator's pause cut it short. */
    const runAgentOnce = async (): Promise<AgentRunReport | undefined> => {
      runs++;
      agentScope = new CancellationScope();
      try {
        return await agentScope.run(() =>
          runAgent.executeWithOptions({ summary: `agent ${input.agent.kind} on ${task.id}, run ${runs}` }, [{
            sandbox,
            agent: input.agent,
            workerId: task.id,
            objective: input.objective,
            prompt: task.prompt,
            timeoutMs: input.workerTimeoutMs,
            sessionId,
            message,
            maxTurns: input.maxTurns,
            budgetUsd: budget === undefined ? undefined : Math.max(0, budget - costUsd),
            sessionCostUsd,
          }]),
        );
      } catch (err) {
        // A pause cancels only the agent's scope; a cancellation of the worker itself goes on up.
        if (isCancellation(err) && pauseRequested && !CancellationScope.current().consideredCancelled) return undefined;
        throw err;
      } finally {
        agentScope = undefined;
      }
    };
    let finished: AgentRunReport | undefined;
    while (!finished) {
      let run: AgentRunReport | undefined;
      try {
        run = pauseRequested ? undefined : await runAgentOnce();
      } catch (err) {
        // Cancelled: nothing is collected. Failed for good (a sandbox limit, its time bound spent): its work is.
        // Runs from before salvage fail the worker with the error, as they did then.
        if (isCancellation(err) || !(err instanceof ActivityFailure) || !patched(SALVAGE_FAILED_RUNS)) throw err;
        return await salvage(report({ status: 'failed', reason: rootMessage(err) }));
      }
      if (run) {
        costUsd += run.agent.costUsd;
        turns += run.agent.turns;
        sessionId = run.agent.sessionId ?? sessionId;
        sessionCostUsd = run.sessionCostUsd;
      }
      const why = run ? suspension(run, costUsd, budget, input.maxTurns) : 'paused by an operator';
      if (run && !why) {
        finished = run;
        break;
      }

      // ---- Suspended: the sandbox stays, the worker waits for resume ----
      // Cleared before the leader hears of it: a resume sent while the sandbox is pausing is kept.
      resume = undefined;
      await tellLeader('suspended', { reason: why, question: run?.agent.question });
      await pauseSandbox(sandbox);
      setCurrentDetails(`**Suspended** (${why}): waiting for a person\nResume: \`flotilla resume ${parentId ?? 'RUN'} --worker ${task.id} --message "..."\``);
      const resumed = await condition(() => resume !== undefined, input.suspendTimeoutMs, { summary: `${task.id} suspended: waiting for resume` });
      setCurrentDetails('');
      if (!resumed) {
        const minutes = Math.round(input.suspendTimeoutMs / 60_000);
        return report({ status: 'failed', reason: `suspended (${why}) and not resumed within ${minutes} minute(s)` });
      }
      await resumeSandbox(sandbox);
      pauseRequested = false;
      message = resume!.message;
      if (resume!.addBudgetUsd) budget = (budget ?? costUsd) + resume!.addBudgetUsd;
      await tellLeader('running');
    }
    const run = finished;
    if (run.exitCode !== 0 || run.timedOut) return await salvage(failedCommand('the agent', run));

    let work;
    try {
      work = await collect();
    } catch (err) {
      // Work that cannot be collected (too large, refused by the policy) fails the worker with the reason.
      if (!(err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.nonRetryable)) throw err;
      return report({ status: 'failed', reason: `its work was not collected: ${err.cause.message}`, exitCode: run.exitCode, tail: run.tail, logRef: run.logRef });
    }
    const common = {
      ref: work.ref,
      headSha: work.headSha,
      commits: work.commits,
      filesChanged: work.filesChanged,
      exitCode: run.exitCode,
      tail: run.tail,
      logRef: run.logRef,
    };
    if (work.outOfScopeCount > 0) {
      const more = work.outOfScopeCount > work.outOfScope.length ? ` and ${work.outOfScopeCount - work.outOfScope.length} more` : '';
      return report({
        ...common,
        status: 'failed',
        reason: `changed ${work.outOfScopeCount} path(s) outside its ownedPaths (${task.ownedPaths.join(', ')}): ${work.outOfScope.join(', ')}${more}`,
        outOfScope: work.outOfScope,
      });
    }
    return report({ ...common, status: 'done' });
  } finally {
    await CancellationScope.nonCancellable(() => destroySandbox(sandbox));
  }
}

/** Child workflow id of a sub-task: deterministic, so a replayed leader finds its children. */
export function workerWorkflowId(leaderId: string, taskId: string): string {
  return `${leaderId}/${taskId}`;
}
