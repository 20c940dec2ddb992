/**
 * Early stops (issue 18): a running agent is watched at every checkpoint, not only judged at the
 * end. The checkpoint's changes outside the sub-task's paths stop the agent (or, under
 * policy.outOfScope: revert, are undone in the workspace and the agent told); an agent silent for
 * limits.idleMinutes is stopped by its invocation; limits.stallCheckpoints checkpoints in a row
 * with an unchanged workspace and no new output stop it as stalled. Each is an ordinary failed
 * attempt, with its reason, for the living plan's retries.
 *
 * The decisions are pure (checkpointDecision, StallWatch) so the unit tests call them directly;
 * EarlyStops keeps the sub-task workflow's state of them. No workflow APIs here.
 */
import type { AgentRunReport } from '../../activities';
import type { CheckpointSeen } from '../../activities/checkpoint';
import { idleReason, outsidePathsReason, revertNotice, stalledReason } from '../../contracts/early-stops';
import type { SubTaskReport } from '../../contracts/reports';
import type { ScopeFindings } from '../../git/scope';
import type { SubTaskInput } from './subtask';

/** Why an agent was stopped early: the failed report's fields. */
export type EarlyStop = Pick<SubTaskReport, 'reason' | 'outOfScope'> & { reason: string };

/** What a checkpoint decides: go on, revert the paths outside the sub-task's, or stop the agent. */
export type CheckpointDecision = { revert: true } | { stop: EarlyStop } | undefined;

/** Reverts the latest checkpoint's paths outside the sub-task's; undefined when that failed. */
export type Revert = () => Promise<ScopeFindings | undefined>;

/** Counts checkpoints in a row that show neither a changed workspace nor new output. */
export class StallWatch {
  private last?: { sha: string; output?: string };
  private still = 0;

  constructor(private readonly limit: number | undefined) {}

  /** A new invocation: its output starts afresh. */
  reset(): void {
    this.last = undefined;
    this.still = 0;
  }

  /**
   * Notes a checkpoint; true once `limit` of them in a row changed nothing. Output that cannot be
   * seen (the agent runs in another process) never counts as unchanged.
   */
  see(seen: { sha: string; output?: string }): boolean {
    const unchanged = seen.output !== undefined && seen.sha === this.last?.sha && seen.output === this.last.output;
    this.still = unchanged ? this.still + 1 : 0;
    this.last = { sha: seen.sha, output: seen.output };
    return this.limit !== undefined && this.still >= this.limit;
  }
}

/** What a checkpoint of the running agent decides, under `policy` (`stalled`: what the StallWatch said). */
export function checkpointDecision(
  scope: ScopeFindings | undefined,
  policy: 'stop' | 'revert',
  stalled: { checkpoints: number; intervalMs: number } | undefined,
): CheckpointDecision {
  if (scope && scope.outOfScopeCount > 0) {
    if (policy === 'revert') return { revert: true };
    return { stop: { reason: outsidePathsReason(scope), outOfScope: scope.outOfScope } };
  }
  if (stalled) return { stop: { reason: stalledReason(stalled.checkpoints, stalled.intervalMs) } };
  return undefined;
}

/** The sub-task workflow's early stops: off in runs started before them (`enabled` false). */
export class EarlyStops {
  /** Set once the agent was stopped at a checkpoint: why. */
  stopped?: EarlyStop;
  private notice?: string;
  private readonly stall: StallWatch;

  constructor(
    private readonly input: SubTaskInput,
    readonly enabled: boolean,
    /** How often the running agent is checkpointed (the input's, or the default). */
    private readonly intervalMs: number,
  ) {
    this.stall = new StallWatch(input.stallCheckpoints);
  }

  /** The paths a checkpoint is checked against; none (no check) in runs from before early stops. */
  get allowedPaths(): string[] | undefined {
    const { task } = this.input;
    return this.enabled ? [...task.ownedPaths, ...task.sharedPaths] : undefined;
  }

  get reverts(): boolean {
    return this.enabled && this.input.policy?.outOfScope === 'revert';
  }

  /** What the next invocation's input adds: its idle limit, and the notice it has not been told yet. */
  invocationStarts(): { idleMs?: number; notice?: string } {
    this.stall.reset();
    if (!this.enabled) return {};
    const notice = this.notice;
    this.notice = undefined;
    return { ...(this.input.idleMs !== undefined && { idleMs: this.input.idleMs }), ...(notice && { notice }) };
  }

  /**
   * Judges a checkpoint of the running agent: reverts with `revert` when the policy says so, and
   * returns true when the agent must be stopped (`stopped` says why). A revert that fails
   * (`revert` gives nothing back) stops it.
   */
  async atCheckpoint(seen: CheckpointSeen, revert: Revert): Promise<boolean> {
    if (!this.enabled || this.stopped) return !!this.stopped;
    const { stallCheckpoints } = this.input;
    const stalled = this.stall.see(seen) ? { checkpoints: stallCheckpoints!, intervalMs: this.intervalMs } : undefined;
    const decision = checkpointDecision(seen.scope, this.input.policy?.outOfScope ?? 'stop', stalled);
    if (decision && 'stop' in decision) this.stopped = decision.stop;
    else if (decision) await this.revertWith(revert, seen.scope!);
    return !!this.stopped;
  }

  /** Reverts the paths outside the sub-task's and keeps the notice for the agent's next invocation. */
  async revertWith(revert: Revert, scope: ScopeFindings): Promise<void> {
    const found = await revert();
    if (!found) {
      this.stopped = { reason: `${outsidePathsReason(scope)} (reverting them failed)`, outOfScope: scope.outOfScope };
      return;
    }
    if (found.outOfScopeCount > 0) this.notice = revertNotice(found, this.allowedPaths ?? []);
  }

  /** Why an invocation that ended was stopped early (at a checkpoint, or idle), if it was. */
  ended(invocation: AgentRunReport | undefined): EarlyStop | undefined {
    if (this.stopped) return this.stopped;
    if (invocation?.idle && this.input.idleMs !== undefined) return { reason: idleReason(this.input.idleMs) };
    return undefined;
  }
}
