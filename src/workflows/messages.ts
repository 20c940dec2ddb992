/**
 * Signals and queries, shared by the workflows and every client (CLI, scripts). The names are
 * what `temporal workflow signal --name …` and `temporal workflow query --type …` use, and the
 * inputs are plain JSON so the Temporal CLI can send them:
 *
 *   temporal workflow signal --workflow-id RUN --name approve --input '{"gate":"push","sha":"…","by":"ana"}'
 *   temporal workflow query  --workflow-id RUN --type status
 */
import { defineQuery, defineSignal } from '@temporalio/workflow';
import type { GateDecision, GateName, IntegrationReport, Isolation, PlanningReport, RunOutcome } from '../spec';

export type RunPhase =
  | 'resolving'
  | 'planning'
  | 'awaiting-plan-approval'
  | 'running'
  | 'integrating'
  | 'testing'
  | 'awaiting-push-approval'
  | 'pushing'
  | 'done'
  | 'failed'
  | 'cancelled';

export type WorkerState = 'queued' | 'running' | 'suspended' | 'done' | 'failed' | 'cancelled';

export interface WorkerStatus {
  id: string;
  state: WorkerState;
  /** Why it is suspended or failed. */
  reason?: string;
  /** A suspended worker's question for a person, when its agent asked one. */
  question?: string;
  commits?: number;
  filesChanged?: number;
  costUsd: number;
  turns: number;
  startedAt?: number;
  /** Time so far while running; total once finished. */
  durationMs?: number;
}

/** What a person reviews at an open gate. */
export interface GateReview {
  gate: GateName;
  openedAt: number;
  /** When the gate decides by itself, and how. */
  expiresAt: number;
  onTimeout: 'fail' | 'approve';
  /** The plan gate: one row per sub-task. */
  plan?: { id: string; ownedPaths: string[]; agent: string; prompt: string }[];
  /** The push gate: the exact commit that would be pushed, and what it changes. */
  sha?: string;
  diffstat?: string;
  testSummary?: string;
  /** Approvals that were refused, and why (a wrong SHA, a closed gate). */
  refused: { by: string; reason: string }[];
}

export interface RunStatus {
  phase: RunPhase;
  objective: string;
  repo: string;
  targetRef: string;
  baseSha?: string;
  /** How this run's sandboxes are isolated ('none' only when the worker was started with the opt-out). */
  isolation?: Isolation;
  gate?: GateReview;
  workers: WorkerStatus[];
  integratedSha?: string;
  /** Conflict resolution, redone sub-tasks and repair rounds, as they happen. */
  integration?: IntegrationReport;
  outcome?: RunOutcome;
  message?: string;
  decisions: GateDecision[];
  /** How the plan was settled, once it is. */
  planning?: PlanningReport;
  totals: { costUsd: number; turns: number; workersDone: number; workersFailed: number; elapsedMs: number };
}

export interface ApproveInput {
  gate: GateName;
  /** Required at the push gate: the integrated SHA the status shows. */
  sha?: string;
  by?: string;
  comment?: string;
}

export interface RejectInput {
  gate: GateName;
  by?: string;
  reason: string;
}

export interface PauseInput {
  workerId: string;
  by?: string;
}

export interface ResumeInput {
  workerId: string;
  /** Delivered to the agent when it continues. */
  message?: string;
  /** Dollars added to the worker's budget. */
  addBudgetUsd?: number;
  by?: string;
}

/** What a worker tells its leader whenever its state changes. */
export interface WorkerProgress {
  id: string;
  state: WorkerState;
  reason?: string;
  question?: string;
  costUsd: number;
  turns: number;
}

export const statusQuery = defineQuery<RunStatus>('status');
export const approveSignal = defineSignal<[ApproveInput]>('approve');
export const rejectSignal = defineSignal<[RejectInput]>('reject');
export const pauseSignal = defineSignal<[PauseInput]>('pause');
export const resumeSignal = defineSignal<[ResumeInput]>('resume');
/** Sent by workers to their leader. */
export const workerProgressSignal = defineSignal<[WorkerProgress]>('workerProgress');
