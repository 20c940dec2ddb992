/**
 * A run that continues a failed one (request.continues, `flotilla continue`): what the failed
 * run integrated and every finished sub-task's verified commits are adopted into this run's refs
 * by an activity that checks each one on the host against the failed run's staging refs and the
 * record Temporal keeps of that run, never against what a client says. Only what failed or never
 * ran runs again.
 */
import type { SubTaskReport } from '../../contracts/reports';
import type { PlannedRequest } from '../../contracts/request';
import type { PlanRun } from './plan-run';
import { briefReport } from './reports';
import type { Run } from './run';
import { hostless } from './steps';

/** What a continued run starts with. */
export interface Adopted {
  /** The run it continues (a workflow id). */
  from: string;
  /** The failed run's integration head, when this run starts from it. */
  head?: { ref: string; sha: string };
  /** Reports of the sub-tasks that head holds. */
  integrated: SubTaskReport[];
  /** Reports of finished sub-tasks the head does not hold: merged by this run, with no agent. */
  finished: SubTaskReport[];
  /** Sub-tasks that failed there, and why: their first attempt here is told. */
  failed: { id: string; reason: string }[];
  /** Work that could not be reused, and why: those sub-tasks run again. */
  refused: { id: string; reason: string }[];
}

/**
 * The failed run's work, adopted a page of sub-tasks at a time so that no activity result grows
 * with the plan (a run from before pages got one page of everything: its history replays the same).
 */
export async function adopt(run: Run, plan: PlannedRequest, baseSha: string): Promise<Adopted | undefined> {
  if (!plan.continues) return undefined;
  const from = plan.continues.runId;
  const input = {
    runKey: run.key,
    baseSha,
    runId: from,
    repoUrl: plan.repo.url,
    subTasks: plan.subTasks.map((t) => ({ id: t.id, ownedPaths: t.ownedPaths })),
    sharedPaths: plan.sharedPaths,
    policy: plan.policy,
  };
  const adopted: Adopted = { from, integrated: [], finished: [], failed: [], refused: [] };
  for (let page: number | undefined = 0; page !== undefined;) {
    const summary = `adopt the work of ${from}${page ? ` (page ${page + 1})` : ''}`;
    const part = await hostless(plan).adoptWork.executeWithOptions({ summary }, [
      { ...input, page, ...(adopted.head && { head: adopted.head }) },
    ]);
    if (page === 0 && part.head) adopted.head = part.head;
    adopted.integrated.push(...part.integrated);
    adopted.finished.push(...part.finished);
    adopted.failed.push(...part.failed);
    adopted.refused.push(...part.refused);
    page = part.nextPage;
  }
  return adopted;
}

/**
 * A continued plan starts with what was adopted: the integrated sub-tasks on the head, finished
 * ones queued for the integrator (no agent runs for either), and the failed ones' first attempt
 * told why they failed before.
 */
export function reuse(p: PlanRun, adopted: Adopted): void {
  const { run, plan, schedule, lines } = p;
  for (const report of [...adopted.integrated, ...adopted.finished]) {
    const entry = schedule.get(report.workerId)!;
    const line = lines.get(entry.task.id)!;
    Object.assign(line, { state: 'done', reusedFrom: adopted.from, commits: report.commits });
    Object.assign(line, { filesChanged: report.filesChanged, costUsd: 0, turns: 0 });
    entry.attempts = 1;
    const resultIndex = run.result.workers.push(briefReport(report, plan.subTasks.length)) - 1;
    if (adopted.integrated.includes(report)) {
      entry.state = 'integrated';
      line.integrated = true;
      p.predecessors.integrated(entry.task.id, report);
    } else {
      entry.state = 'merging';
      p.integrator.queue.push({ entry, report, line, attempt: 1, resultIndex });
    }
  }
  if (adopted.head) {
    run.status.head = { ...adopted.head };
    run.result.head = { ...adopted.head, integrated: adopted.integrated.map((r) => r.workerId) };
  }
  for (const failed of adopted.failed) {
    const heading = `This sub-task failed in run ${adopted.from}, which this run continues. The reason follows. Do the sub-task again, avoiding that failure.`;
    p.notes.set(failed.id, { heading, reason: failed.reason });
  }
}
