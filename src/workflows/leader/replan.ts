/**
 * onFailure: replan. When a sub-task fails for good, what depended on it is dropped and the
 * planner, on a checkout of the integration head, proposes the sub-tasks still needed, told what
 * failed and why and what is integrated. Its proposal is validated against the plan as it stands
 * and, with a manual plan gate, shown to a person again; the sub-tasks still running go on
 * meanwhile. Bounded by limits.replans; past that, or without a valid proposal, the run fails.
 */
import { firstLine } from '../../contracts/text';
import type { PlanningReport } from '../../contracts/reports';
import type { SubTask } from '../../contracts/request';
import { msOfMinutes, msOfSeconds } from '../durations';
import { passGate, planRows } from './gates';
import type { PlanRun } from './plan-run';
import { replanRemaining } from './planning';
import type { Entry } from './schedule';

export class Replanner {
  private rounds = 0;

  constructor(private readonly p: PlanRun) {}

  roundsLeft(): boolean {
    return this.rounds < this.p.plan.limits.replans;
  }

  async replan(failed: Entry): Promise<void> {
    const round = ++this.rounds;
    this.p.replanning = `round ${round}, after ${failed.task.id} failed`;
    try {
      await this.round(failed, round);
    } finally {
      this.p.replanning = undefined;
    }
  }

  private async round(failed: Entry, round: number): Promise<void> {
    const { p } = this;
    const { run, plan, schedule } = p;
    const id = failed.task.id;
    const dropped = p.drop(failed, `replanned in round ${round}, after ${id} failed`);
    const planning = run.status.planning!;
    planning.replans = round;
    const spent: PlanningReport = { source: 'planner', attempts: 0, costUsd: 0, problems: [] };
    const ended = new Set(schedule.ended().map((e) => e.task.id));
    const seed = await p.seedAt(`replan-${round}`);
    const proposed = await replanRemaining(plan, this.context(), spent, {
      seed,
      context: {
        round,
        failed: { id, reason: failed.reason ?? 'it failed' },
        dropped,
        integrated: schedule
          .all()
          .filter((e) => e.state === 'integrated')
          .map((e) => ({ id: e.task.id, summary: p.summaryOf(e.task.id) })),
        planned: schedule
          .all()
          .filter((e) => ['waiting', 'running', 'merging'].includes(e.state))
          .map((e) => ({ id: e.task.id, ownedPaths: e.task.ownedPaths, prompt: firstLine(e.task.prompt) })),
      },
      problems: (tasks: SubTask[]) =>
        tasks.flatMap((t, i) =>
          (t.dependsOn ?? [])
            .filter((d) => ended.has(d))
            .map((d) => `subTasks[${i}].dependsOn: "${d}" has ended; it will never be integrated`),
        ),
    });
    planning.costUsd += spent.costUsd;
    if (!proposed) return p.stop('failed', `replan round ${round} found no valid plan (${spent.problems.join('; ')})`);
    await this.review(proposed);
    for (const task of proposed) p.addTask(task);
    failed.reason = `${failed.reason}; replanned in round ${round}: ${proposed.map((t) => t.id).join(', ')} instead`;
  }

  /** A manual plan gate opens again on the proposed sub-tasks; the sub-tasks already running go on. */
  private async review(proposed: SubTask[]): Promise<void> {
    const { run, plan } = this.p;
    if (plan.gates.plan.mode !== 'manual') return;
    const ids = new Set(proposed.map((t) => t.id));
    const rows = planRows({ ...plan, subTasks: [...plan.subTasks, ...proposed] }).filter((r) => ids.has(r.id));
    await passGate(run, 'plan', plan.gates.plan, { plan: rows });
    run.status.phase = 'running';
  }

  private context() {
    const { run, plan, ctx } = this.p;
    return {
      runKey: run.key,
      baseSha: ctx.baseSha,
      status: run.status,
      heartbeatTimeoutMs: msOfSeconds(plan.limits.heartbeatTimeoutSeconds),
      timeoutMs: msOfMinutes(plan.limits.agentTimeoutMinutes),
    };
  }
}
