/**
 * Integration attempts (resolver rounds, redone sub-tasks, repair rounds) as the status and the
 * result show them while they happen, and the lines that say why the integration ended.
 */
import type { TestRun } from '../../activities/integration';
import type { ConflictReport, IntegrationAttempt, IntegrationReport, RunOutcome } from '../../contracts/reports';
import type { PlannedRequest } from '../../contracts/request';
import { normalizeRepoPath } from '../../contracts/names';

export type Failure = {
  ok: false;
  outcome: Extract<RunOutcome, 'conflict' | 'tests-failed' | 'tests-removed' | 'failed'>;
  message: string;
};

/** Settles a tracked attempt: how it ended and what it cost, changed or said. */
export type EndAttempt = (state: 'succeeded' | 'failed', outcome: Partial<IntegrationAttempt>) => void;

/**
 * Records an attempt as running in `report` (the same object is in the status and the result);
 * `end` settles it and adds its cost to the integration's.
 */
export function track(
  report: IntegrationReport,
  fields: Omit<IntegrationAttempt, 'state' | 'costUsd'>,
): { attempt: IntegrationAttempt; end: EndAttempt } {
  const attempt: IntegrationAttempt = { ...fields, state: 'running', costUsd: 0 };
  const started = Date.now();
  report.attempts.push(attempt);
  return {
    attempt,
    end(state, outcome) {
      Object.assign(attempt, outcome, { state, durationMs: Date.now() - started });
      // A redone sub-task's cost is already counted with the other sub-tasks.
      if (attempt.kind !== 'redispatch') report.costUsd += attempt.costUsd;
    },
  };
}

/** How a test run failed: "exited with code 1", "timed out". */
export function how(tests: TestRun): string {
  return tests.timedOut ? 'timed out' : `exited with code ${tests.exitCode}`;
}

/** "worker b conflicts with a in src/x.ts": the words tests and people have always read. */
export function conflictLine(conflict: ConflictReport): string {
  const others = conflict.conflictsWith.length ? conflict.conflictsWith.join(', ') : 'earlier workers';
  return `worker ${conflict.workerId} conflicts with ${others} in ${conflict.files.join(', ')}`;
}

/** What a repair agent may change: every sub-task's ownedPaths and the shared paths, normalized, once each. */
export function repairablePaths(req: PlannedRequest): string[] {
  return [...new Set([...req.subTasks.flatMap((t) => t.ownedPaths), ...req.sharedPaths].map(normalizeRepoPath))];
}
