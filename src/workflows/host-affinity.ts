/**
 * Where a sandbox lives (Temporal's worker-specific task queue pattern). A workflow claims a
 * host with `claimHost`, which runs on the shared queue and so lands on whichever worker process
 * is free, then sends every activity that needs that sandbox to the host's own queue, with a
 * schedule-to-start timeout: a host that does not pick its work up in time is lost, and so is
 * one that answers without the sandbox (it came back without its data directory). Either way the
 * workflow moves the sandbox: it claims another host and rebuilds the sandbox there from the
 * last checkpoint, a bounded number of times.
 *
 * Runs started before host affinity (PATCHES.hostAffinity) keep every activity on the shared
 * queue: their `SandboxHome` claims nothing, binds to the shared queue and never moves.
 */
import {
  type ActivityInterfaceFor,
  type ActivityOptions,
  ActivityFailure,
  ApplicationFailure,
  TimeoutFailure,
  patched,
  proxyActivities,
  workflowInfo,
} from '@temporalio/workflow';
import type { Activities, HostPlacement } from '../activities';
import { permanent } from '../contracts/failures';
import type { Reprovision } from '../contracts/reports';
import { activityOptions } from './options';
import { PATCHES } from './patches';

/** When a request (or a run started before the field) does not say: long enough for a worker's restart. */
export const DEFAULT_HOST_TIMEOUT_MS = 5 * 60_000;
export const DEFAULT_CHECKPOINT_INTERVAL_MS = 5 * 60_000;
/** Moves of one sandbox before its workflow gives up: a run whose hosts keep dying should say so, not loop. */
export const MAX_REPROVISIONS = 3;

/** Why `err` means the sandbox's host is lost, or undefined when it is an ordinary failure. */
export function hostLost(err: unknown): string | undefined {
  if (!(err instanceof ActivityFailure)) return undefined;
  const cause = err.cause;
  if (cause instanceof TimeoutFailure && cause.timeoutType === 'SCHEDULE_TO_START') {
    return `its host did not pick up ${err.activityType} in time`;
  }
  if (cause instanceof ApplicationFailure && cause.type === 'SandboxMissing')
    return `its host no longer has the sandbox (${err.activityType})`;
  return undefined;
}

/**
 * Where the leader's own sandboxes (its planner's, its integration's) were placed, by leader run:
 * the leader cleans up after the run on each of those hosts as it ends (leader/run-mirrors.ts).
 * Keyed by the run's id, as module state may be shared by the workflows a worker runs; rebuilt by
 * a replay, which claims again.
 */
const leaderPlacements = new Map<string, Map<string, HostPlacement>>();

/** The placements of this leader run's own sandboxes, each host once, forgotten as they are taken (at the run's end). */
export function takeLeaderPlacements(): HostPlacement[] {
  const { runId } = workflowInfo();
  const placed = [...(leaderPlacements.get(runId)?.values() ?? [])];
  leaderPlacements.delete(runId);
  return placed;
}

function notePlacement(placement: HostPlacement): void {
  const { runId, workflowType } = workflowInfo();
  if (workflowType !== 'leaderWorkflow') return;
  const placed = leaderPlacements.get(runId) ?? new Map<string, HostPlacement>();
  placed.set(placement.host, placement);
  leaderPlacements.set(runId, placed);
}

/** Makes the sandbox ready again on the host a move just claimed. */
export type Rebuild = (move: Reprovision) => Promise<void>;

/**
 * One sandbox's home: the host it lives on, the activities bound to that host's queue, and
 * every move so far.
 */
export class SandboxHome {
  /** The host the sandbox lives on, once claimed (never, for runs started before host affinity). */
  placement?: HostPlacement;
  readonly moves: Reprovision[] = [];

  private constructor(
    /** Whose sandbox, in summaries and failures: "sub-task api", "integration", "the planner". */
    private readonly what: string,
    /** False for runs started before host affinity. */
    readonly affinity: boolean,
    private readonly hostTimeoutMs: number,
    private readonly heartbeatTimeoutMs: number,
  ) {}

  /**
   * The home of `what`'s sandbox. `hostTimeoutMs` is how long its host may take to pick up an
   * activity before it counts as lost (absent: the default).
   */
  static open(what: string, timeouts: { hostTimeoutMs?: number; heartbeatTimeoutMs: number }): SandboxHome {
    const { hostTimeoutMs = DEFAULT_HOST_TIMEOUT_MS, heartbeatTimeoutMs } = timeouts;
    return new SandboxHome(what, patched(PATCHES.hostAffinity.id), hostTimeoutMs, heartbeatTimeoutMs);
  }

  /** Whether the sandbox's activities have somewhere to go: a claimed host, or the shared queue. */
  get bound(): boolean {
    return !this.affinity || this.placement !== undefined;
  }

  /** Claims a host for a new sandbox (before host affinity: nothing to claim). */
  async claim(): Promise<void> {
    if (!this.affinity) return;
    const { claimHost } = proxyActivities<Activities>(activityOptions(this.heartbeatTimeoutMs));
    this.placement = await claimHost.executeWithOptions({ summary: `claim a host for ${this.what}` }, []);
    notePlacement(this.placement);
  }

  /** Activities with `options`, sent to the sandbox's current host (or the shared queue). */
  on(options: ActivityOptions): ActivityInterfaceFor<Activities> {
    if (!this.affinity) return proxyActivities<Activities>(options);
    if (!this.placement) throw new TypeError(`no host is claimed for ${this.what}`);
    return proxyActivities<Activities>({
      ...options,
      taskQueue: this.placement.taskQueue,
      scheduleToStartTimeout: this.hostTimeoutMs,
    });
  }

  /** Why `err` means the sandbox's host is lost; never, before host affinity. */
  lost(err: unknown): string | undefined {
    return this.affinity ? hostLost(err) : undefined;
  }

  /** Runs `step`; when the host is lost, moves the sandbox with `rebuild` and runs it again. */
  async run<T>(step: () => Promise<T>, rebuild: Rebuild): Promise<T> {
    for (;;) {
      try {
        return await step();
      } catch (err) {
        const why = this.lost(err);
        if (!why) throw err;
        await this.move(why, rebuild);
      }
    }
  }

  /** Claims another host and rebuilds the sandbox there, until that works or the moves run out. */
  async move(why: string, rebuild: Rebuild): Promise<void> {
    for (;;) {
      if (this.moves.length >= MAX_REPROVISIONS) {
        throw permanent(
          'HostLost',
          `${this.what}: lost its sandbox's host ${this.moves.length + 1} times (last: ${why}); not moving it again`,
        );
      }
      const from = this.placement!.host;
      await this.claim();
      const move: Reprovision = { from, to: this.placement!.host, reason: why };
      this.moves.push(move);
      try {
        await rebuild(move);
        return;
      } catch (err) {
        const again = this.lost(err);
        if (!again) throw err;
        why = again;
      }
    }
  }
}
