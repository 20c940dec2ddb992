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
  type ActivityOptions,
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  condition,
  getExternalWorkflowHandle,
  isCancellation,
  patched,
  setCurrentDetails,
  setHandler,
  sleep,
  workflowInfo,
} from '@temporalio/workflow';
import type { AgentRunReport, CheckpointMark, CommandReport, SandboxRef } from '../../activities';
import type { SubTaskSeed } from '../../activities/integration';
import { rootMessage } from '../../contracts/failures';
import type { AgentSpec, CommitPolicy } from '../../contracts/request';
import type { Isolation, SubTaskReport } from '../../contracts/reports';
import { MAX_CHARS } from '../../contracts/request';
import { wholeMinutes } from '../durations';
import { DEFAULT_CHECKPOINT_INTERVAL_MS, SandboxHome } from '../host-affinity';
import {
  ResumeInput,
  type SubTaskProgress,
  parseMessage,
  pauseSignal,
  resumeSignal,
  subTaskProgressSignal,
} from '../../contracts/messages';
import { activityOptions, commandOptions } from '../options';
import { PATCHES } from '../patches';
import { clip } from '../../contracts/text';

export interface SubTaskInput {
  runKey: string;
  objective: string;
  task: { id: string; prompt: string; ownedPaths: string[]; sharedPaths: string[] };
  agent: AgentSpec;
  baseSha: string;
  /** Start from this commit instead of the base: the integrated tree, for a sub-task redone on top of it. */
  seed?: SubTaskSeed;
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
  /** How long the sandbox's host may take to pick up an activity before it counts as lost (absent: the default). */
  hostTimeoutMs?: number;
  /** How often the running agent's work is checkpointed (absent: the default). */
  checkpointIntervalMs?: number;
}

/** Why an agent run stopped short of finishing and the worker should wait for a person. */
function suspension(
  run: AgentRunReport,
  spentUsd: number,
  budgetUsd: number | undefined,
  maxTurns: number | undefined,
): string | undefined {
  if (run.agent.question) return 'the agent needs an answer';
  if (run.budgetExceeded)
    return `the agent used its budget ($${spentUsd.toFixed(2)} of $${(budgetUsd ?? 0).toFixed(2)})`;
  // Agents that cannot enforce a limit themselves (shell commands) are held to it here.
  if (run.agent.hitTurnLimit || (maxTurns !== undefined && run.agent.turns > maxTurns))
    return `the agent reached its turn limit (${maxTurns ?? 'its own'})`;
  return undefined;
}

export async function workerWorkflow(input: SubTaskInput): Promise<SubTaskReport> {
  const { task } = input;
  // Runs started before host affinity send every activity to the shared queue, as they did then.
  const home = SandboxHome.open(`worker ${task.id}`, input);
  /** The sandbox's activities, on its host's queue (re-bound when it moves). */
  const bind = () => {
    const proxy = (options: ActivityOptions) => home.on(options);
    // A proxy has no keys of its own to spread: each activity is named.
    const {
      provisionSandbox,
      seedWorkspace,
      checkoutSeed,
      collectWork,
      destroySandbox,
      pauseSandbox,
      resumeSandbox,
      checkpointWork,
      restoreCheckpoint,
    } = proxy(activityOptions(input.heartbeatTimeoutMs));
    return {
      provisionSandbox,
      seedWorkspace,
      checkoutSeed,
      collectWork,
      destroySandbox,
      pauseSandbox,
      resumeSandbox,
      checkpointWork,
      restoreCheckpoint,
      runCommand: proxy(commandOptions(input.commandTimeoutMs, input.heartbeatTimeoutMs)).runCommand,
      // Salvage is best effort after a failure already decided: a workspace that cannot be collected holds the worker only briefly.
      salvageWork: proxy({
        ...activityOptions(input.heartbeatTimeoutMs),
        scheduleToCloseTimeout: Math.max(2 * 60_000, 4 * input.heartbeatTimeoutMs),
      }).collectWork,
      runAgent: proxy(commandOptions(input.workerTimeoutMs, input.heartbeatTimeoutMs)).runAgent,
    };
  };
  // Bound once the host is claimed (at once for runs started before host affinity).
  let on = home.affinity ? (undefined as unknown as ReturnType<typeof bind>) : bind();
  const sandbox: SandboxRef = { key: `${input.runKey}/worker/${task.id}`, ...input.sandbox };
  const started = Date.now();
  let isolation: Isolation = 'none';
  let costUsd = 0;
  let turns = 0;
  let runs = 0;
  let budget = input.budgetUsd;
  /** The commit the workspace was seeded with: checkpoints and collected work are made on top of it. */
  const seededAt = input.seed?.sha ?? input.baseSha;
  const branch = `flotilla/${input.runKey}/${task.id}`;
  let checkpoint: CheckpointMark | undefined;
  /** Set when the sandbox moved: the agent's next run is told it was interrupted, in a new session. */
  let interrupted = false;

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
  /** What the leader was told last: a move or a checkpoint repeats it with the new placement. */
  let told: [SubTaskProgress['state'], { reason?: string; question?: string }] = ['running', {}];
  const tellLeader = async (state: SubTaskProgress['state'], extra: { reason?: string; question?: string } = {}) => {
    told = [state, extra];
    if (!parentId) return;
    const progress: SubTaskProgress = {
      token: input.progressToken,
      id: task.id,
      state,
      costUsd,
      turns,
      reason: extra.reason && clip(extra.reason, MAX_CHARS.comment - 100),
      question: extra.question && clip(extra.question, MAX_CHARS.message - 100),
      ...(home.affinity && {
        host: home.placement?.host,
        checkpoint: checkpoint && { sha: checkpoint.sha, at: checkpoint.at },
        reprovisions: home.moves.length,
      }),
    };
    // A leader that has closed cannot be told; the worker's own result still says how it ended.
    await getExternalWorkflowHandle(parentId)
      .signal(subTaskProgressSignal, progress)
      .catch(() => undefined);
  };

  const report = (fields: Partial<SubTaskReport> & Pick<SubTaskReport, 'status'>): SubTaskReport => ({
    workerId: task.id,
    commits: 0,
    filesChanged: 0,
    isolation,
    durationMs: Date.now() - started,
    costUsd,
    turns,
    runs,
    ...(home.affinity && {
      host: home.placement?.host,
      checkpoint: checkpoint && { sha: checkpoint.sha, at: checkpoint.at },
      reprovisions: home.moves,
    }),
    ...fields,
  });
  const failedCommand = (what: string, run: CommandReport): SubTaskReport =>
    report({
      status: 'failed',
      reason: run.timedOut ? `${what} timed out` : `${what} exited with code ${run.exitCode}`,
      exitCode: run.exitCode,
      tail: run.tail,
      logRef: run.logRef,
    });
  const collect = (collectWith = on.collectWork) =>
    collectWith({
      sandbox,
      runKey: input.runKey,
      workerId: task.id,
      baseSha: seededAt,
      allowedPaths: [...task.ownedPaths, ...task.sharedPaths],
      policy: input.policy,
    });
  /**
   * A failed agent run's report, with the work it left collected into staging before the sandbox
   * goes: unverified (no tests ran on it), but recoverable. A failure to collect is reported
   * beside the reason, never in its place.
   */
  const salvage = async (failed: SubTaskReport): Promise<SubTaskReport> => {
    if (!patched(PATCHES.salvageFailedAgentRuns.id)) return failed;
    try {
      const work = await collect(on.salvageWork);
      if (work.commits === 0 || !work.ref) return failed;
      return { ...failed, salvaged: { ref: work.ref, headSha: work.headSha, commits: work.commits } };
    } catch (err) {
      if (isCancellation(err)) throw err;
      return { ...failed, salvageFailed: clip(rootMessage(err), 500) };
    }
  };

  /** Makes the sandbox ready on its host: seeded, at the last checkpoint if there is one, set up. */
  const prepare = async (): Promise<SubTaskReport | undefined> => {
    ({ isolation } = await on.provisionSandbox(sandbox));
    const seeded = await on.seedWorkspace({
      sandbox,
      runKey: input.runKey,
      baseSha: input.baseSha,
      branch,
      author: `Flotilla worker ${task.id}`,
    });
    if (input.seed) await on.checkoutSeed({ sandbox, baseSha: input.baseSha, seed: input.seed });
    // A workspace that was there already (the claim landed on the same host, which was only slow)
    // holds newer work than any checkpoint: it is kept as it is.
    if (checkpoint && !seeded.reused) {
      await on.restoreCheckpoint.executeWithOptions(
        { summary: `restore ${task.id} from checkpoint ${checkpoint.sha.slice(0, 12)}` },
        [{ sandbox, runKey: input.runKey, workerId: task.id, baseSha: seededAt, sha: checkpoint.sha, branch }],
      );
    }
    if (input.setupCmd) {
      const setup = await on.runCommand.executeWithOptions(
        { summary: `setup ${task.id}: ${input.setupCmd}`.slice(0, 200) },
        [{ sandbox, command: input.setupCmd, timeoutMs: input.commandTimeoutMs, label: 'setup' }],
      );
      if (setup.exitCode !== 0 || setup.timedOut) return failedCommand('the setup command', setup);
    }
    return undefined;
  };
  /** Rebuilds the sandbox on the host `home` just claimed, from the last checkpoint. */
  const rebuild = async (move: { fromCheckpoint?: string; to: string }) => {
    on = bind();
    move.fromCheckpoint = checkpoint?.sha;
    // An agent that had started is told its run was cut short; one that had not, starts as usual.
    interrupted = runs > 0;
    const failed = await prepare();
    if (failed) throw ApplicationFailure.nonRetryable(`after moving to host ${move.to}: ${failed.reason}`, 'HostLost');
    await tellLeader(...told);
  };
  /** A step on the sandbox's host that survives losing it (runs started before host affinity: the step as it is). */
  const onHost = <T>(step: () => Promise<T>): Promise<T> => home.run(step, rebuild);
  /** Saves the workspace to the staging store (host affinity only); a failed checkpoint costs only itself. */
  const saveWork = async () => {
    if (!home.affinity) return;
    try {
      const mark = await on.checkpointWork.executeWithOptions({ summary: `checkpoint ${task.id}` }, [
        { sandbox, runKey: input.runKey, workerId: task.id, baseSha: seededAt, previous: checkpoint },
      ]);
      if (mark.sha === checkpoint?.sha) return;
      checkpoint = mark;
      await tellLeader(...told);
    } catch (err) {
      if (isCancellation(err)) throw err;
    }
  };

  try {
    if (home.affinity) {
      await home.claim();
      on = bind();
      await tellLeader('running');
    }
    const unprepared = await onHost(prepare);
    if (unprepared) return unprepared;

    // ---- The agent, as many runs as suspensions and resumptions take ----
    let sessionId: string | undefined;
    let sessionCostUsd = 0;
    let message: string | undefined;
    /** One agent run, or undefined when an operator's pause cut it short. */
    const runAgentOnce = async (): Promise<AgentRunReport | undefined> => {
      runs++;
      agentScope = new CancellationScope();
      // The session lived in the lost sandbox: a moved agent starts a new one, told it was interrupted.
      if (interrupted) sessionId = undefined;
      const told = interrupted;
      interrupted = false;
      // While it runs, its work is checkpointed now and then; the ticker stops with the run.
      const ticker = home.affinity ? new CancellationScope() : undefined;
      const ticking = ticker
        ?.run(async () => {
          for (;;) {
            await sleep(input.checkpointIntervalMs ?? DEFAULT_CHECKPOINT_INTERVAL_MS);
            await saveWork();
          }
        })
        .catch(() => undefined);
      try {
        return await agentScope.run(() =>
          on.runAgent.executeWithOptions(
            {
              summary: `agent ${input.agent.kind} on ${task.id}, run ${runs}${told ? ' (interrupted: its host was lost)' : ''}`,
            },
            [
              {
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
                ...(told && { interrupted: true }),
              },
            ],
          ),
        );
      } catch (err) {
        // A pause cancels only the agent's scope; a cancellation of the worker itself goes on up.
        if (isCancellation(err) && pauseRequested && !CancellationScope.current().consideredCancelled) return undefined;
        throw err;
      } finally {
        agentScope = undefined;
        ticker?.cancel();
        await ticking;
      }
    };
    /** The agent runs until one finishes without suspending; a failed run ends the worker with a report. */
    const runToTheEnd = async (): Promise<AgentRunReport | SubTaskReport> => {
      for (;;) {
        let run: AgentRunReport | undefined;
        try {
          run = pauseRequested ? undefined : await onHost(runAgentOnce);
        } catch (err) {
          // Cancelled: nothing is collected. Failed for good (a sandbox limit, its time bound spent): its work is.
          // Runs from before salvage fail the worker with the error, as they did then.
          if (isCancellation(err) || !(err instanceof ActivityFailure) || !patched(PATCHES.salvageFailedAgentRuns.id))
            throw err;
          return await salvage(report({ status: 'failed', reason: rootMessage(err) }));
        }
        if (run) {
          costUsd += run.agent.costUsd;
          turns += run.agent.turns;
          sessionId = run.agent.sessionId ?? sessionId;
          sessionCostUsd = run.sessionCostUsd;
        }
        const why = run ? suspension(run, costUsd, budget, input.maxTurns) : 'paused by an operator';
        if (run && !why) return run;

        // ---- Suspended: the sandbox stays, the worker waits for resume ----
        // Cleared before the leader hears of it: a resume sent while the sandbox is pausing is kept.
        resume = undefined;
        await saveWork();
        await tellLeader('suspended', { reason: why, question: run?.agent.question });
        await onHost(() => on.pauseSandbox(sandbox));
        setCurrentDetails(
          `**Suspended** (${why}): waiting for a person\nResume: \`flotilla resume ${parentId ?? 'RUN'} --worker ${task.id} --message "..."\``,
        );
        const resumed = await condition(() => resume !== undefined, input.suspendTimeoutMs, {
          summary: `${task.id} suspended: waiting for resume`,
        });
        setCurrentDetails('');
        if (!resumed) {
          const minutes = wholeMinutes(input.suspendTimeoutMs);
          return report({ status: 'failed', reason: `suspended (${why}) and not resumed within ${minutes} minute(s)` });
        }
        await onHost(() => on.resumeSandbox(sandbox));
        pauseRequested = false;
        message = resume!.message;
        if (resume!.addBudgetUsd) budget = (budget ?? costUsd) + resume!.addBudgetUsd;
        await tellLeader('running');
      }
    };

    let run: AgentRunReport;
    let work;
    for (;;) {
      const ran = await runToTheEnd();
      if (!('agent' in ran)) return ran;
      run = ran;
      if (run.exitCode !== 0 || run.timedOut) return await salvage(failedCommand('the agent', run));
      try {
        work = await collect();
        break;
      } catch (err) {
        // A host lost before the work was collected: the agent finishes it again where the sandbox moved.
        const lost = home.lost(err);
        if (lost) {
          await home.move(lost, rebuild);
          continue;
        }
        // Work that cannot be collected (too large, refused by the policy) fails the worker with the reason.
        if (!(err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.nonRetryable))
          throw err;
        return report({
          status: 'failed',
          reason: `its work was not collected: ${err.cause.message}`,
          exitCode: run.exitCode,
          tail: run.tail,
          logRef: run.logRef,
        });
      }
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
      const more =
        work.outOfScopeCount > work.outOfScope.length
          ? ` and ${work.outOfScopeCount - work.outOfScope.length} more`
          : '';
      return report({
        ...common,
        status: 'failed',
        reason: `changed ${work.outOfScopeCount} path(s) outside its ownedPaths (${task.ownedPaths.join(', ')}): ${work.outOfScope.join(', ')}${more}`,
        outOfScope: work.outOfScope,
      });
    }
    return report({ ...common, status: 'done' });
  } finally {
    await CancellationScope.nonCancellable(async () => {
      try {
        await on.destroySandbox(sandbox);
      } catch (err) {
        // A lost host took the sandbox with it (`flotilla gc` prunes one that comes back).
        if (!home.lost(err)) throw err;
      }
    });
  }
}

/** Child workflow id of a sub-task: deterministic, so a replayed leader finds its children. */
export function subTaskWorkflowId(leaderId: string, taskId: string): string {
  return `${leaderId}/${taskId}`;
}
