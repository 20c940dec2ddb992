/**
 * Sub-task reports as the leader keeps them: in the result (shrunk to fit one payload however
 * many there are), on the status lines, and in the line that ends a run whose sub-tasks failed.
 * Pure: no workflow APIs, so the unit tests call these directly.
 */
import type { ReportsPage, SubTaskStatus } from '../../contracts/messages';
import type { RunResult, SubTaskReport } from '../../contracts/reports';
import type { LeaderRequest, SubTask } from '../../contracts/request';
import { excerpt, jsonSize } from '../../contracts/text';

/**
 * A sub-task's report as the result carries it: its text shrinks with the number of sub-tasks,
 * so a hundred reports still fit one 64 KiB payload; the full output stays in its logRef.
 */
export function briefReport(r: SubTaskReport, subTasks: number): SubTaskReport {
  const share = (total: number, lo: number, hi: number) =>
    Math.min(hi, Math.max(lo, Math.floor(total / Math.max(1, subTasks))));
  const tail = share(12 * 1024, 64, 4096);
  const reason = share(6 * 1024, 64, 1024);
  const summary = share(4 * 1024, 48, 600);
  return {
    ...r,
    ...(r.reason !== undefined && { reason: excerpt(r.reason, Math.ceil(reason / 2), Math.floor(reason / 2)) }),
    ...(r.summary !== undefined && { summary: excerpt(r.summary, summary, 0) }),
    ...(r.tail !== undefined && { tail: excerpt(r.tail, Math.ceil(tail / 4), Math.floor((3 * tail) / 4)) }),
    ...(r.outOfScope && { outOfScope: r.outOfScope.slice(0, 3).map((p) => excerpt(p, 40, 40)) }),
  };
}

/** The report of a sub-task that ended without a report of its own (never started, or its workflow failed). */
export function failedReport(
  workerId: string,
  reason: string,
  spent: Pick<SubTaskReport, 'durationMs' | 'costUsd' | 'turns'> = { durationMs: 0, costUsd: 0, turns: 0 },
): SubTaskReport {
  return {
    workerId,
    status: 'failed',
    reason,
    commits: 0,
    filesChanged: 0,
    isolation: 'none',
    durationMs: spent.durationMs,
    costUsd: spent.costUsd,
    turns: spent.turns,
    runs: 0,
  };
}

/** A sub-task's status line once its report is in. */
export function settledLine(report: SubTaskReport): Partial<SubTaskStatus> {
  return {
    state: report.status,
    reason: report.reason,
    question: undefined,
    commits: report.commits,
    filesChanged: report.filesChanged,
    durationMs: report.durationMs,
    costUsd: report.costUsd,
    turns: report.turns,
    ...(report.host !== undefined && {
      host: report.host,
      checkpoint: report.checkpoint,
      reprovisions: report.reprovisions?.length ?? 0,
    }),
  };
}

/**
 * Dollars a sub-task's agent may spend: its own slice (`task.limits`), the request's, or else an
 * equal share of the run's budget.
 */
export function subTaskBudget(
  limits: LeaderRequest['limits'],
  subTasks: number,
  task?: Pick<SubTask, 'limits'>,
): number | undefined {
  const runBudget = limits.runBudgetUsd;
  const own = task?.limits?.subTaskBudgetUsd ?? limits.subTaskBudgetUsd;
  return own ?? (runBudget === undefined ? undefined : runBudget / subTasks);
}

/** Why no more sub-task may start: the run's budget is spent; undefined while it has room. */
export function budgetSpent(limits: LeaderRequest['limits'], spent: number): string | undefined {
  const runBudget = limits.runBudgetUsd;
  if (runBudget === undefined || spent < runBudget) return undefined;
  return `not started: the run's budget of $${runBudget.toFixed(2)} is spent ($${spent.toFixed(2)})`;
}

/** Why the run ends after the fan-out, naming the first few failed sub-tasks; undefined when none failed. */
export function failedSubTasksLine(reports: SubTaskReport[], planned: number): string | undefined {
  const failed = reports.filter((w) => w.status !== 'done');
  if (failed.length === 0) return undefined;
  const named = failed.slice(0, 3).map((w) => `${w.workerId}: ${w.reason}`);
  if (failed.length > named.length) named.push(`${failed.length - named.length} more in the result`);
  return `${failed.length} of ${planned} workers failed: ${named.join('; ')}`;
}

/** Reports a result carries itself, at most; a run of more has the rest read with the reports query (issue 19). */
export const RESULT_REPORTS_INLINE = 100;
/** Bytes of JSON a result with omitted reports is kept to: under the 64 KiB every payload stays within. */
export const RESULT_BYTES = 56 * 1024;

/**
 * The result as it leaves the workflow: whole up to RESULT_REPORTS_INLINE reports; beyond, the
 * ones that need a person first (failed, cancelled), then the rest in order, as many as fit
 * RESULT_BYTES, and `workersOmitted` says how many more the reports query (and awaitRun) gives.
 * A thousand reports are ~400 KB: more than one payload, however short each is made.
 */
export function boundedResult(result: RunResult): RunResult {
  const all = result.workers;
  if (all.length <= RESULT_REPORTS_INLINE) return result;
  const byStatus: Partial<Record<SubTaskReport['status'], number>> = {};
  for (const w of all) byStatus[w.status] = (byStatus[w.status] ?? 0) + 1;
  const omitted = (kept: number) => ({ count: all.length - kept, total: all.length, byStatus });
  let room = RESULT_BYTES - jsonSize({ ...result, workers: [], workersOmitted: omitted(0) });
  const workers: SubTaskReport[] = [];
  for (const w of [...all.filter((r) => r.status !== 'done'), ...all.filter((r) => r.status === 'done')]) {
    room -= jsonSize(w) + 1;
    if (room < 0 || workers.length === RESULT_REPORTS_INLINE) break;
    workers.push(w);
  }
  return { ...result, workers, workersOmitted: omitted(workers.length) };
}

/** One page of every report, in the run's order, for the reports query. Pure; a bad input reads as the first page. */
export function pageOfReports(all: SubTaskReport[], input: unknown): ReportsPage {
  const given = (typeof input === 'object' && input !== null ? input : {}) as Record<string, unknown>;
  const page = typeof given.page === 'number' && Number.isInteger(given.page) && given.page >= 1 ? given.page : 1;
  const pages = Math.max(1, Math.ceil(all.length / RESULT_REPORTS_INLINE));
  const reports = all.slice((page - 1) * RESULT_REPORTS_INLINE, page * RESULT_REPORTS_INLINE);
  return { reports, page, pages, total: all.length };
}
