/**
 * What a sub-task that starts from the integration head is told of the sub-tasks it builds on:
 * each one's summary (its agent's final message) and the files its commits changed, read once
 * from the staging repository and kept.
 */
import type { Predecessor } from '../../contracts/prompts';
import type { SubTaskReport } from '../../contracts/reports';
import type { PlanRun } from './plan-run';
import type { Entry } from './schedule';
import { hostless } from './steps';

/** Files a predecessor's description lists; the count says how many there were. */
const FILES_LISTED = 30;

export class Predecessors {
  /** The report of each integrated sub-task. */
  private readonly reports = new Map<string, SubTaskReport>();
  private readonly described = new Map<string, Predecessor>();

  constructor(private readonly plan: PlanRun) {}

  /** `id` is on the integration head, as `report` says. */
  integrated(id: string, report: SubTaskReport): void {
    this.reports.set(id, report);
  }

  summaryOf(id: string): string | undefined {
    return this.reports.get(id)?.summary;
  }

  async describe(before: { entry: Entry; because: string }[]): Promise<Predecessor[]> {
    const described: Predecessor[] = [];
    for (const { entry, because } of before) {
      const id = entry.task.id;
      if (!this.described.has(id)) this.described.set(id, await this.read(id));
      described.push({ ...this.described.get(id)!, because });
    }
    return described;
  }

  private async read(id: string): Promise<Predecessor> {
    const report = this.reports.get(id);
    const { run, ctx } = this.plan;
    const base = { id, because: '', summary: report?.summary, files: [] as string[], fileCount: 0 };
    if (!report?.headSha || report.commits === 0) return base;
    const changed = await hostless(this.plan.plan).changedFiles({
      runKey: run.key,
      from: report.seedSha ?? ctx.baseSha,
      to: report.headSha,
      max: FILES_LISTED,
    });
    return { ...base, files: changed.files, fileCount: changed.count };
  }
}
