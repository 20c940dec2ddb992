/**
 * Signals and queries, shared by the workflows and every client (CLI, scripts). The names are
 * what `temporal workflow query --type …` and `temporal workflow signal --name …` use.
 */
import { defineQuery } from '@temporalio/workflow';
import type { RunOutcome } from '../spec';

export type RunPhase = 'resolving' | 'running' | 'integrating' | 'testing' | 'pushing' | 'done' | 'failed';
export type WorkerState = 'queued' | 'running' | 'done' | 'failed';

export interface WorkerStatus {
  id: string;
  state: WorkerState;
  reason?: string;
  commits?: number;
  filesChanged?: number;
  startedAt?: number;
  durationMs?: number;
}

export interface RunStatus {
  phase: RunPhase;
  objective: string;
  repo: string;
  targetRef: string;
  baseSha?: string;
  workers: WorkerStatus[];
  integratedSha?: string;
  outcome?: RunOutcome;
  message?: string;
}

export const statusQuery = defineQuery<RunStatus>('status');
