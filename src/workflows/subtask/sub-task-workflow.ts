/**
 * The state of one sub-task workflow, shared by its steps and by its message handlers (pause and
 * resume, from the leader): its sandbox and the host it lives on, the agent's invocations and
 * what they cost, the last checkpoint, and what the leader was told last.
 */
import {
  type ActivityInterfaceFor,
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
import type { Activities, AgentRunReport, CheckpointMark, SandboxRef } from '../../activities';
import type { CheckpointSeen } from '../../activities/checkpoint';
import { rootMessage } from '../../contracts/failures';
import {
  ResumeInput,
  type SubTaskProgress,
  agentTurnSignal,
  parseMessage,
  pauseSignal,
  resumeSignal,
  subTaskProgressSignal,
} from '../../contracts/messages';
import type { Isolation, Reprovision, SubTaskReport } from '../../contracts/reports';
import { MAX_CHARS } from '../../contracts/request';
import { clip } from '../../contracts/text';
import { timerMs, wholeMinutes } from '../durations';
import { DEFAULT_CHECKPOINT_INTERVAL_MS, SandboxHome } from '../host-affinity';
import { activityOptions, commandOptions } from '../options';
import { PATCHES } from '../patches';
import { type EarlyStop, EarlyStops } from './early-stops';
import { commandFailure, outOfScopeReason, summaryOf, suspension } from './outcomes';
import type { SubTaskInput } from './subtask';

type Told = [SubTaskProgress['state'], { reason?: string; question?: string; budgetSliceUsd?: number }];
type CollectedWork = Awaited<ReturnType<Activities['collectWork']>>;

/** The agent's last invocation, which finished, and the work it left, collected into staging. */
export interface Finished {
  invocation: AgentRunReport;
  work: CollectedWork;
}

export class SubTaskWorkflow {
  private readonly task: SubTaskInput['task'];
  private readonly sandbox: SandboxRef;
  private readonly home: SandboxHome;
  private readonly started = Date.now();
  private readonly parentId?: string;
  private readonly branch: string;
  /** The commit the workspace was seeded with: checkpoints and collected work are made on top of it. */
  private readonly seededAt: string;
  private isolation: Isolation = 'none';
  private costUsd = 0;
  private turns = 0;
  /** Invocations of the agent so far (the report's `runs`). */
  private invocations = 0;
  private budget: number | undefined;
  private checkpoint?: CheckpointMark;
  /** Set when the sandbox moved: the agent's next invocation is told it was interrupted, in a new session. */
  private interrupted = false;
  private sessionId?: string;
  private sessionCostUsd = 0;
  /** What the agent is told when it continues: the message of the resume that woke it. */
  private message?: string;
  /** What the leader was told last: a move or a checkpoint repeats it with the new placement. */
  private lastTold: Told = ['running', {}];
  private pauseRequested = false;
  private resume?: ResumeInput;
  /** The scope of the invocation under way, which a pause cancels. */
  private agentScope?: CancellationScope;
  /**
   * Progress to the leader is sent without waiting for the leader to have it (runs started
   * before this release waited, a round trip before every step that followed).
   */
  private readonly tellInBackground: boolean;
  /** The last progress signal sent: the next one is sent once it is delivered, so the leader hears them in order. */
  private told: Promise<void> = Promise.resolve();
  /** Stops the agent early: out of its paths, idle or stalled (absent in runs from before them). */
  private readonly stops: EarlyStops;
  /** The running agent reported a new turn since the last checkpoint began (agentTurnSignal). */
  private turnReported = false;

  constructor(private readonly input: SubTaskInput) {
    const { task } = input;
    this.task = task;
    this.home = SandboxHome.open(`sub-task ${task.id}`, input);
    this.tellInBackground = patched(PATCHES.progressInBackground.id);
    const interval = input.checkpointIntervalMs ?? DEFAULT_CHECKPOINT_INTERVAL_MS;
    this.stops = new EarlyStops(input, patched(PATCHES.earlyStops.id), interval);
    this.sandbox = { key: `${input.runKey}/worker/${task.id}`, ...input.sandbox };
    this.budget = input.budgetUsd;
    this.seededAt = input.seed?.sha ?? input.baseSha;
    this.branch = `flotilla/${input.runKey}/${task.id}`;
    // The leader validated these; anyone else signalling the child directly is held to the same schema.
    setHandler(pauseSignal, () => {
      this.pauseRequested = true;
      this.agentScope?.cancel();
    });
    // Carries nothing: at most it makes the next checkpoint come sooner.
    setHandler(agentTurnSignal, () => {
      this.turnReported = true;
    });
    setHandler(resumeSignal, (raw: unknown) => {
      const parsed = parseMessage(ResumeInput, raw);
      if (parsed.ok) this.resume = parsed.value;
    });
    this.parentId = workflowInfo().parent?.workflowId;
  }

  // ---- The sandbox's activities, on its host's queue as it is at the call ----

  /** Sandbox lifecycle and git plumbing. */
  private get sandboxOps(): ActivityInterfaceFor<Activities> {
    return this.home.on(activityOptions(this.input.heartbeatTimeoutMs));
  }

  private get commandOps(): ActivityInterfaceFor<Activities> {
    return this.home.on(commandOptions(this.input.commandTimeoutMs, this.input.heartbeatTimeoutMs));
  }

  private get agentOps(): ActivityInterfaceFor<Activities> {
    return this.home.on(commandOptions(this.input.workerTimeoutMs, this.input.heartbeatTimeoutMs));
  }

  /** Salvage is best effort after a failure already decided: a workspace that cannot be collected holds the sub-task only briefly. */
  private get salvageOps(): ActivityInterfaceFor<Activities> {
    const options = activityOptions(this.input.heartbeatTimeoutMs);
    return this.home.on({
      ...options,
      scheduleToCloseTimeout: Math.max(2 * 60_000, 4 * this.input.heartbeatTimeoutMs),
    });
  }

  // ---- Steps ----

  /** Claims the sandbox's host and tells the leader where it runs (runs started before host affinity: nothing to claim). */
  async claimHost(): Promise<void> {
    if (!this.home.affinity) return;
    await this.home.claim();
    await this.tellLeader('running');
  }

  /** A step on the sandbox's host that survives losing it: the sandbox moves and the step runs again. */
  onHost<T>(step: () => Promise<T>): Promise<T> {
    return this.home.run(step, (move) => this.rebuild(move));
  }

  /** Makes the sandbox ready on its host: seeded, at the last checkpoint if there is one, set up. */
  async prepare(): Promise<SubTaskReport | undefined> {
    const { input, sandbox, task } = this;
    ({ isolation: this.isolation } = await this.sandboxOps.provisionSandbox(sandbox));
    const seeded = await this.sandboxOps.seedWorkspace({
      sandbox,
      runKey: input.runKey,
      baseSha: input.baseSha,
      branch: this.branch,
      // The commits' author in the user's repository: a name people already see, kept as it was.
      author: `Flotilla worker ${task.id}`,
    });
    if (input.seed) await this.sandboxOps.checkoutSeed({ sandbox, baseSha: input.baseSha, seed: input.seed });
    // A workspace that was there already (the claim landed on the same host, which was only slow)
    // holds newer work than any checkpoint: it is kept as it is.
    if (this.checkpoint && !seeded.reused) {
      const { sha } = this.checkpoint;
      await this.sandboxOps.restoreCheckpoint.executeWithOptions(
        { summary: `restore ${task.id} from checkpoint ${sha.slice(0, 12)}` },
        [{ sandbox, runKey: input.runKey, workerId: task.id, baseSha: this.seededAt, sha, branch: this.branch }],
      );
    }
    if (!input.setupCmd) return undefined;
    const setup = await this.commandOps.runCommand.executeWithOptions(
      { summary: `setup ${task.id}: ${input.setupCmd}`.slice(0, 200) },
      [{ sandbox, command: input.setupCmd, timeoutMs: input.commandTimeoutMs, label: 'setup' }],
    );
    if (setup.exitCode !== 0 || setup.timedOut) return this.report(commandFailure('the setup command', setup));
    return undefined;
  }

  /**
   * The agent, invoked as often as suspensions take, then its work collected; a report instead
   * when it ends short of that.
   */
  async invokeAndCollect(): Promise<Finished | SubTaskReport> {
    for (;;) {
      const ended = await this.invokeToTheEnd();
      if (!('agent' in ended)) return ended;
      if (ended.exitCode !== 0 || ended.timedOut)
        return await this.salvage(this.report(commandFailure('the agent', ended)));
      await this.revertLeftovers();
      try {
        return { invocation: ended, work: await this.collect(this.sandboxOps) };
      } catch (err) {
        // A host lost before the work was collected: the agent finishes it again where the sandbox moved.
        const lost = this.home.lost(err);
        if (lost) {
          await this.home.move(lost, (move) => this.rebuild(move));
          continue;
        }
        // Work that cannot be collected (too large, refused by the policy) fails the sub-task with the reason.
        if (!(err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.nonRetryable))
          throw err;
        const { exitCode, tail, logRef } = ended;
        return this.report({
          status: 'failed',
          reason: `its work was not collected: ${err.cause.message}`,
          exitCode,
          tail,
          logRef,
        });
      }
    }
  }

  /** The sub-task's report on its collected work: done, or failed when it changed paths it does not own. */
  verdict({ invocation, work }: Finished): SubTaskReport {
    const common = {
      ref: work.ref,
      headSha: work.headSha,
      commits: work.commits,
      filesChanged: work.filesChanged,
      exitCode: invocation.exitCode,
      tail: invocation.tail,
      logRef: invocation.logRef,
      summary: summaryOf(invocation.agent.finalMessage),
      ...(invocation.ciFix && { ciFix: invocation.ciFix }),
    };
    if (work.outOfScopeCount === 0) return this.report({ ...common, status: 'done' });
    return this.report({
      ...common,
      status: 'failed',
      reason: outOfScopeReason(work, this.task.ownedPaths),
      outOfScope: work.outOfScope,
    });
  }

  /** Destroys the sandbox, whatever happened; not cancellable. */
  async destroySandbox(): Promise<void> {
    await CancellationScope.nonCancellable(async () => {
      if (!this.home.bound) return; // no host was claimed: no sandbox was made
      try {
        await this.sandboxOps.destroySandbox(this.sandbox);
      } catch (err) {
        // A lost host took the sandbox with it (`flotilla gc` prunes one that comes back).
        if (!this.home.lost(err)) throw err;
      }
    });
  }

  // ---- The agent ----

  /** Invokes the agent until an invocation finishes without suspending; a failed one ends the sub-task with a report. */
  private async invokeToTheEnd(): Promise<AgentRunReport | SubTaskReport> {
    for (;;) {
      let invocation: AgentRunReport | undefined;
      try {
        invocation = this.pauseRequested ? undefined : await this.onHost(() => this.invoke());
      } catch (err) {
        // Cancelled: nothing is collected. Failed for good (a sandbox limit, its time bound spent): its work is.
        // Runs from before salvage fail the sub-task with the error, as they did then.
        if (isCancellation(err) || !(err instanceof ActivityFailure) || !patched(PATCHES.salvageFailedAgentRuns.id))
          throw err;
        return await this.salvage(this.report({ status: 'failed', reason: rootMessage(err) }));
      }
      if (invocation) this.count(invocation);
      const early = this.stops.ended(invocation);
      if (early) return await this.stoppedEarly(early, invocation);
      const why = invocation
        ? suspension(invocation, this.costUsd, this.budget, this.input.maxTurns)
        : 'paused by an operator';
      if (why === undefined) return invocation!;
      const ended = await this.suspend(why, invocation?.agent.question, invocation && this.sliceIfOnBudget(invocation));
      if (ended) return ended;
    }
  }

  /** One invocation of the agent, or undefined when an operator's pause cut it short. */
  private async invoke(): Promise<AgentRunReport | undefined> {
    const { input, task } = this;
    this.invocations++;
    const scope = (this.agentScope = new CancellationScope());
    // The session lived in the lost sandbox: a moved agent starts a new one, told it was interrupted.
    const afterMove = this.interrupted;
    if (afterMove) this.sessionId = undefined;
    this.interrupted = false;
    const early = this.stops.invocationStarts();
    const stopCheckpoints = this.checkpointWhileInvoked();
    try {
      return await scope.run(() =>
        this.agentOps.runAgent.executeWithOptions(
          {
            // "run N" is what the Web UI has always shown for the Nth invocation.
            summary: `agent ${input.agent.kind} on ${task.id}, run ${this.invocations}${afterMove ? ' (interrupted: its host was lost)' : ''}`,
          },
          [
            {
              sandbox: this.sandbox,
              agent: input.agent,
              workerId: input.attemptOf ?? task.id,
              objective: input.objective,
              prompt: task.prompt,
              brief: { ownedPaths: task.ownedPaths, sharedPaths: task.sharedPaths, others: input.others ?? [] },
              timeoutMs: input.workerTimeoutMs,
              sessionId: this.sessionId,
              message: this.message,
              maxTurns: input.maxTurns,
              budgetUsd: this.budget === undefined ? undefined : Math.max(0, this.budget - this.costUsd),
              sessionCostUsd: this.sessionCostUsd,
              ...(afterMove && { interrupted: true }),
              ...early,
              ...(this.stops.enabled && { reportTurns: true }),
              ...(input.ciFix && { ciFix: input.ciFix }),
            },
          ],
        ),
      );
    } catch (err) {
      // A pause cancels only the agent's scope; a cancellation of the sub-task itself goes on up.
      // So does an early stop.
      const ours = this.pauseRequested || this.stops.stopped;
      if (isCancellation(err) && ours && !CancellationScope.current().consideredCancelled) return undefined;
      throw err;
    } finally {
      this.agentScope = undefined;
      await stopCheckpoints();
    }
  }

  /** Checkpoints the workspace now and then while the agent is invoked (host affinity only); the result stops it. */
  private checkpointWhileInvoked(): () => Promise<void> {
    if (!this.home.affinity) return async () => undefined;
    const ticker = new CancellationScope();
    const ticking = ticker
      .run(async () => {
        for (;;) {
          await this.checkpointDue();
          const seen = await this.saveWork();
          if (seen && (await this.stops.atCheckpoint(seen, () => this.revert(seen)))) {
            this.agentScope?.cancel();
            return;
          }
        }
      })
      .catch(() => undefined);
    return async () => {
      ticker.cancel();
      await ticking;
    };
  }

  /** Waits for the next checkpoint: the interval, or (early stops) the agent's next reported turn. */
  private async checkpointDue(): Promise<void> {
    const interval = this.input.checkpointIntervalMs ?? DEFAULT_CHECKPOINT_INTERVAL_MS;
    if (!this.stops.enabled) return await sleep(interval);
    await condition(() => this.turnReported, interval);
    this.turnReported = false;
  }

  /** The budget slice this sub-task started with, when `invocation` suspended on its budget (not on a question). */
  private sliceIfOnBudget(invocation: AgentRunReport): number | undefined {
    return invocation.budgetExceeded && !invocation.agent.question ? this.input.budgetUsd : undefined;
  }

  /** Adds an invocation's cost and turns, and keeps its session for the next one. */
  private count(invocation: AgentRunReport): void {
    this.costUsd += invocation.agent.costUsd;
    this.turns += invocation.agent.turns;
    this.sessionId = invocation.agent.sessionId ?? this.sessionId;
    this.sessionCostUsd = invocation.sessionCostUsd;
  }

  /**
   * Suspended: the sandbox stays and the sub-task waits for `resume`; a failed report when none
   * comes in time. `budgetSliceUsd`: it suspended on its budget, and the leader may resume it
   * with another slice (limits.autoResume).
   */
  private async suspend(
    why: string,
    question: string | undefined,
    budgetSliceUsd?: number,
  ): Promise<SubTaskReport | undefined> {
    // Cleared before the leader hears of it: a resume sent while the sandbox is pausing is kept.
    this.resume = undefined;
    await this.saveWork();
    await this.tellLeader('suspended', { reason: why, question, budgetSliceUsd });
    await this.onHost(() => this.sandboxOps.pauseSandbox(this.sandbox));
    return this.waitForResume(why);
  }

  private async waitForResume(why: string): Promise<SubTaskReport | undefined> {
    const { input, task } = this;
    setCurrentDetails(
      `**Suspended** (${why}): waiting for a person\nResume: \`flotilla resume ${this.parentId ?? 'RUN'} --subtask ${task.id} --message "..."\``,
    );
    const resumed = await condition(() => this.resume !== undefined, timerMs(input.suspendTimeoutMs), {
      summary: `${task.id} suspended: waiting for resume`,
    });
    setCurrentDetails('');
    if (!resumed) {
      const minutes = wholeMinutes(input.suspendTimeoutMs);
      return this.report({
        status: 'failed',
        reason: `suspended (${why}) and not resumed within ${minutes} minute(s)`,
        unanswered: true,
      });
    }
    await this.onHost(() => this.sandboxOps.resumeSandbox(this.sandbox));
    this.pauseRequested = false;
    // The latest resume counts, even one that came while the sandbox was resuming.
    const { message, addBudgetUsd } = this.resume!;
    this.message = message;
    if (addBudgetUsd) this.budget = (this.budget ?? this.costUsd) + addBudgetUsd;
    await this.tellLeader('running');
    return undefined;
  }

  // ---- Work, checkpoints and moves ----

  /** The sandbox's work, collected into staging with `ops` and checked against the paths the sub-task may change. */
  private collect(ops: ActivityInterfaceFor<Activities>): Promise<CollectedWork> {
    const { input, task } = this;
    return ops.collectWork({
      sandbox: this.sandbox,
      runKey: input.runKey,
      workerId: task.id,
      baseSha: this.seededAt,
      allowedPaths: [...task.ownedPaths, ...task.sharedPaths],
      policy: input.policy,
    });
  }

  /**
   * A failed invocation's report, with the work it left collected into staging before the
   * sandbox goes: unverified (no tests ran on it), but recoverable. A failure to collect is
   * reported beside the reason, never in its place.
   */
  private async salvage(failed: SubTaskReport): Promise<SubTaskReport> {
    if (!patched(PATCHES.salvageFailedAgentRuns.id)) return failed;
    try {
      const work = await this.collect(this.salvageOps);
      if (work.commits === 0 || !work.ref) return failed;
      return { ...failed, salvaged: { ref: work.ref, headSha: work.headSha, commits: work.commits } };
    } catch (err) {
      if (isCancellation(err)) throw err;
      return { ...failed, salvageFailed: clip(rootMessage(err), 500) };
    }
  }

  /**
   * Saves the workspace to the staging store (host affinity only); a failed checkpoint costs only
   * itself. Returns what the checkpoint shows of the agent (early stops).
   */
  private async saveWork(): Promise<CheckpointSeen | undefined> {
    if (!this.home.affinity) return undefined;
    const { input, task } = this;
    try {
      const seen = await this.sandboxOps.checkpointWork.executeWithOptions({ summary: `checkpoint ${task.id}` }, [
        {
          sandbox: this.sandbox,
          runKey: input.runKey,
          workerId: task.id,
          baseSha: this.seededAt,
          previous: this.checkpoint,
          allowedPaths: this.stops.allowedPaths,
        },
      ]);
      const { scope: _scope, output: _output, ...mark } = seen;
      if (mark.sha === this.checkpoint?.sha) return seen;
      this.checkpoint = mark;
      await this.tellLeader(...this.lastTold);
      return seen;
    } catch (err) {
      if (isCancellation(err)) throw err;
      return undefined;
    }
  }

  /** Undoes the checkpoint's changes outside the sub-task's paths in the workspace; undefined when that failed. */
  private async revert(seen: CheckpointSeen) {
    const { input, task } = this;
    try {
      return await this.sandboxOps.revertOutOfScope.executeWithOptions(
        { summary: `revert ${task.id}'s changes outside its paths` },
        [
          {
            sandbox: this.sandbox,
            runKey: input.runKey,
            baseSha: this.seededAt,
            sha: seen.sha,
            allowedPaths: this.stops.allowedPaths!,
          },
        ],
      );
    } catch (err) {
      if (isCancellation(err)) throw err;
      return undefined;
    }
  }

  /** Under policy.outOfScope: revert, the last changes outside the sub-task's paths go too, once the agent has ended. */
  private async revertLeftovers(): Promise<void> {
    if (!this.stops.reverts) return;
    const seen = await this.saveWork();
    if (seen?.scope?.outOfScopeCount) await this.stops.revertWith(() => this.revert(seen), seen.scope);
  }

  /** The failed report of an agent stopped early, its work checkpointed and salvaged. */
  private async stoppedEarly(early: EarlyStop, invocation: AgentRunReport | undefined): Promise<SubTaskReport> {
    await this.saveWork();
    const { exitCode, tail, logRef } = invocation ?? {};
    return await this.salvage(this.report({ status: 'failed', ...early, exitCode, tail, logRef }));
  }

  /** Rebuilds the sandbox on the host a move just claimed, from the last checkpoint. */
  private async rebuild(move: Reprovision): Promise<void> {
    move.fromCheckpoint = this.checkpoint?.sha;
    // An agent that had started is told its invocation was cut short; one that had not, starts as usual.
    this.interrupted = this.invocations > 0;
    const failed = await this.prepare();
    if (failed) throw ApplicationFailure.nonRetryable(`after moving to host ${move.to}: ${failed.reason}`, 'HostLost');
    await this.tellLeader(...this.lastTold);
  }

  // ---- What the leader and the report say ----

  /** Tells the leader the sub-task's state, with its spend and, with host affinity, where its sandbox is. */
  private async tellLeader(state: Told[0], extra: Told[1] = {}): Promise<void> {
    this.lastTold = [state, extra];
    if (!this.parentId) return;
    const progress: SubTaskProgress = {
      token: this.input.progressToken,
      id: this.task.id,
      state,
      costUsd: this.costUsd,
      turns: this.turns,
      reason: extra.reason && clip(extra.reason, MAX_CHARS.comment - 100),
      question: extra.question && clip(extra.question, MAX_CHARS.message - 100),
      ...(extra.budgetSliceUsd !== undefined && { budgetSliceUsd: extra.budgetSliceUsd }),
      ...(this.home.affinity && {
        host: this.home.placement?.host,
        checkpoint: this.checkpointMark(),
        reprovisions: this.home.moves.length,
      }),
    };
    const parent = getExternalWorkflowHandle(this.parentId);
    // A leader that has closed cannot be told; the sub-task's own result still says how it ended.
    const send = () => parent.signal(subTaskProgressSignal, progress).catch(() => undefined);
    if (this.tellInBackground) this.told = this.told.then(send);
    else await send();
  }

  /** Waits until the leader has the last progress sent: a sub-task ends only after it. */
  async progressDelivered(): Promise<void> {
    await this.told;
  }

  private report(fields: Partial<SubTaskReport> & Pick<SubTaskReport, 'status'>): SubTaskReport {
    return {
      workerId: this.task.id,
      commits: 0,
      filesChanged: 0,
      isolation: this.isolation,
      durationMs: Date.now() - this.started,
      costUsd: this.costUsd,
      turns: this.turns,
      runs: this.invocations,
      ...(this.home.affinity && {
        host: this.home.placement?.host,
        checkpoint: this.checkpointMark(),
        reprovisions: this.home.moves,
      }),
      ...fields,
    };
  }

  private checkpointMark() {
    return this.checkpoint && { sha: this.checkpoint.sha, at: this.checkpoint.at };
  }
}
