/**
 * A rollover: a run whose history has grown past limits.historyEvents continues as new, at a
 * moment no sub-task runs, carrying what it must not lose into a fresh history of the same
 * workflow id (the same run key, so the same staging refs, run mirrors and branch). What each
 * sub-task did (its status line, its report) is not carried: the new run reads it, a page at a
 * time, from Temporal's record of the run it continues (that run's queries).
 */
import type { RunStatus, SubTaskStatus } from './messages';
import type { ForgeAddress } from './forge-address';
import type { ConflictReport, IssueRef, RunResult, SubTaskReport } from './reports';
import type { AgentSpec, LeaderRequestInput, SubTask } from './request';
import type { ReviewComment } from './review';

/** A sub-task's place in the schedule, when it is not that of one never started. */
export interface CarriedEntry {
  id: string;
  state: 'waiting' | 'integrated' | 'failed' | 'cancelled' | 'dropped';
  attempts: number;
  allowance: number;
  reason?: string;
  droppedFor?: string;
}

/** What the next attempt of a sub-task is told about the last one (a CI-fix round's checks aside: plan-run.ts's Note). */
export interface CarriedNote {
  heading: string;
  reason: string;
  conflict?: { files: string[]; conflictsWith: string[] };
  by?: string;
  message?: string;
  /** A review round's comments for the sub-task (review.ts), and the agent that answers them when not its own. */
  comments?: ReviewComment[];
  agent?: AgentSpec;
}

export interface Rollover {
  /** The run id of the run that rolled over: Temporal's record of this run must say it continues that one. */
  from: string;
  /** Rollovers so far, this one included. */
  count: number;
  baseSha: string;
  targetSha: string | null;
  oracleSha?: string;
  /** The plan as it stood, when it is not the request's own (a planner's, amended, replanned). */
  subTasks?: SubTask[];
  sharedPaths?: string[];
  /** The integration head the new run starts from. */
  headSha: string;
  /** What the fixers (resolver, repair) spent over the whole integration. */
  fixersSpent: { resolver: number; repair: number };
  entries: CarriedEntry[];
  notes: [string, CarriedNote][];
  conflicts: [string, { conflict: ConflictReport; reason: string; attempt: number }][];
  /** The status and result as they stood, but for their sub-task lines and reports (read back by page). */
  status: Omit<RunStatus, 'workers' | 'totals'>;
  result: Omit<RunResult, 'workers'>;
  /** The issue the run took, when it took one (its body is the objective). */
  issue?: IssueRef & { forge: ForgeAddress; added: string };
  /** How many status lines and reports the run had: the new run reads back exactly these. */
  lines: number;
  reports: number;
  /** Set by the run that took the carry from a RolloverRef: the run it continues answers the handOver query. */
  handedOver?: true;
}

/** What a run that rolled over hands on through its handOver query (PATCHES.carryByReference). */
export interface HandOver {
  carry: Rollover;
  lines: SubTaskStatus[];
  reports: SubTaskReport[];
  /** The texts of its plan's parts (request.planParts), in order; none for a plan given inline. */
  parts: string[];
}

/**
 * What a run that rolled over puts in the next one's input (PATCHES.carryByReference; before it,
 * the Rollover itself was the input): the run, which answers the handOver query, and how many
 * pages of up to 64 KiB its carry takes.
 */
export interface RolloverRef {
  from: string;
  count: number;
  pages: number;
}

/**
 * The leader's input: a request (its sub-tasks in it, or named by digest in `planParts` and sent
 * after: contracts/plan-parts.ts), and on a run that continues one that rolled over, what that one
 * carried or where to read it.
 */
export type LeaderInput = LeaderRequestInput & { planParts?: string[]; rollover?: Rollover | RolloverRef };
