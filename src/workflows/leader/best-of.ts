/**
 * Best of N (`subTasks[].attempts`): one attempt of a sub-task run as N independent candidates,
 * each its own sub-task workflow and sandbox, at most `width` at once. Each candidate that ends is
 * merged onto the integration head as it is then, at a staging ref of its own, and tested there
 * as the test gate tests (hidden tests included); the head does not move. Once every candidate
 * has ended, the passing one `select` prefers becomes the attempt's report, which the integrator
 * then merges like any other; none passing fails the attempt. Every candidate stays at its ref
 * and is listed, with its result, in the status, the result and the push gate.
 */
import { CancellationScope, uuid4 } from '@temporalio/workflow';
import type { SubTaskStatus } from '../../contracts/messages';
import type { CandidateResult, SubTaskReport } from '../../contracts/reports';
import type { AgentSpec, PlannedRequest, SubTask } from '../../contracts/request';
import { clip } from '../../contracts/text';
import { how } from '../integration/attempts';
import type { Integration } from '../integration/integration';
import type { SubTaskInput } from '../subtask/subtask';
import { runAttempt } from './dispatch';
import { pool } from './pool';
import { briefReport, budgetSpent, failedReport } from './reports';
import type { Run } from './run';
import { hostless } from './steps';

/** Candidates each attempt of `task` runs: 1 unless it asks for best of N. */
export function candidatesOf(task: SubTask): number {
  return task.attempts ?? 1;
}

/** Slots of maxParallel an attempt of `task` takes while it runs: one per candidate running at once. */
export function widthOf(task: SubTask, maxParallel: number): number {
  return Math.min(candidatesOf(task), maxParallel);
}

/** The id of candidate `k` of an attempt (`<sub-task>` or `<sub-task>.attempt<n>`). */
export function candidateId(attemptId: string, k: number): string {
  return `${attemptId}.candidate${k}`;
}

interface Candidate {
  k: number;
  input: SubTaskInput;
  line: SubTaskStatus;
  result: CandidateResult;
  report?: SubTaskReport;
}

/** Reasons a failing candidate keeps, at most. */
const REASON_CHARS = 300;

export class BestOf {
  constructor(
    private readonly run: Run,
    private readonly plan: PlannedRequest,
    private readonly integration: Integration,
    private readonly baseSha: string,
  ) {}

  /**
   * Runs the candidates of one attempt (`given`, the attempt's own input) and settles `group`, the
   * attempt's line: the selected candidate's report, or a failed one when none passed. The
   * candidates' lines carry what they spent; the group line carries none, so nothing counts twice.
   */
  async attempt(task: SubTask, given: SubTaskInput, group: SubTaskStatus, width: number): Promise<SubTaskReport> {
    Object.assign(group, { state: 'running', startedAt: Date.now(), waits: undefined });
    const candidates = Array.from({ length: candidatesOf(task) }, (_, i) => this.candidate(task, given, i + 1));
    // Every candidate ends (and destroys its sandbox) before the attempt does, even when one throws.
    const ended = await pool(candidates, width, (c) =>
      this.tryOne(task, c).then(
        () => undefined,
        (err: unknown) => ({ err }),
      ),
    );
    const thrown = ended.find((e) => e !== undefined);
    if (thrown) {
      // Cancelled with the attempt (or the run): no candidate is left looking as if it still ran.
      for (const c of candidates.filter((c) => c.result.outcome === undefined)) {
        if (['queued', 'running'].includes(c.line.state))
          Object.assign(c.line, { state: 'cancelled', reason: 'cancelled' });
        this.failed(c, undefined, 'cancelled');
      }
      throw thrown.err;
    }
    return this.choose(task, given.task.id, candidates, group);
  }

  /** Candidate `k`: its input (its own id, agent and progress token), its line and its row. */
  private candidate(task: SubTask, given: SubTaskInput, k: number): Candidate {
    const { status, result } = this.run;
    const id = candidateId(given.task.id, k);
    const agent = task.agents?.[k - 1] ?? given.agent;
    const input: SubTaskInput = { ...given, task: { ...given.task, id }, agent, progressToken: uuid4() };
    const line: SubTaskStatus = { id, state: 'queued', costUsd: 0, turns: 0, candidate: k };
    status.workers.push(line);
    const row: CandidateResult = { subTask: task.id, id, agent: agentName(agent), costUsd: 0 };
    status.candidates = result.candidates = [...(status.candidates ?? []), row];
    return { k, input, line, result: row };
  }

  /** Runs one candidate's sub-task workflow, then tries its commits on the integration head. */
  private async tryOne(task: SubTask, c: Candidate): Promise<void> {
    if (CancellationScope.current().consideredCancelled) return;
    const spent = budgetSpent(this.plan.limits, this.run.spent());
    if (spent) {
      Object.assign(c.line, { state: 'failed', reason: spent });
      return this.failed(c, failedReport(c.result.id, spent), spent);
    }
    const report = await runAttempt(this.run, task, c.input, c.line);
    c.report = report;
    c.result.costUsd = report.costUsd;
    if (report.status !== 'done') return this.failed(c, report, report.reason ?? `it ended ${report.status}`);
    if (!report.headSha || report.commits === 0) return this.failed(c, report, 'it changed nothing');
    await this.trial(task, c, report.headSha);
  }

  /** Merges a candidate onto the head at `candidates/<id>` and runs the tests there. */
  private async trial(task: SubTask, c: Candidate, headSha: string): Promise<void> {
    const { run, plan, integration } = this;
    const into = integration.headSha;
    const merged = await hostless(plan).mergeWorkers.executeWithOptions({ summary: `try ${c.result.id} on the head` }, [
      {
        runKey: run.key,
        baseSha: this.baseSha,
        into,
        workers: [{ workerId: task.id, headSha, title: `Try ${c.result.id} on the integration head` }],
        at: Math.floor(Date.now() / 1000),
        name: `candidates/${c.result.id}`,
        measure: true,
      },
    ]);
    if (merged.status !== 'merged') {
      c.result.ref = c.report!.ref;
      return this.failed(c, undefined, `its commits conflict with the integration head in ${merged.files.join(', ')}`);
    }
    Object.assign(c.result, { ref: merged.ref, sha: merged.sha, linesChanged: merged.linesChanged });
    const tests = await integration.testAt(merged.sha, `tests on ${c.result.id}: ${plan.testCmd}`);
    if ('ok' in tests) return this.failed(c, undefined, tests.message);
    if (!tests.passed) return this.failed(c, undefined, `${tests.what} ${how(tests)} on the integration head`);
    c.result.outcome = 'passed';
  }

  private failed(c: Candidate, report: SubTaskReport | undefined, reason: string): void {
    if (report) c.report = report;
    Object.assign(c.result, { outcome: 'failed', reason: clip(reason, REASON_CHARS) });
  }

  /**
   * The passing candidate `select` prefers (fewest lines changed, or cheapest; the other measure,
   * then the candidate's number, break ties), and every other candidate's report in the result.
   */
  private choose(task: SubTask, attemptId: string, candidates: Candidate[], group: SubTaskStatus): SubTaskReport {
    const { run, plan } = this;
    const bySize = (c: Candidate) => [c.result.linesChanged ?? 0, c.result.costUsd, c.k];
    const byCost = (c: Candidate) => [c.result.costUsd, c.result.linesChanged ?? 0, c.k];
    const key = task.select === 'cheapest' ? byCost : bySize;
    const passing = candidates.filter((c) => c.result.outcome === 'passed');
    const best = passing.sort((a, b) => compare(key(a), key(b)))[0];
    for (const c of candidates)
      if (c !== best && c.report) run.result.workers.push(briefReport(c.report, plan.subTasks.length));
    const spent = { costUsd: 0, turns: 0, durationMs: Date.now() - (group.startedAt ?? Date.now()) };
    if (!best) {
      const why = candidates.map((c) => `${c.result.id}: ${c.result.reason}`).join('; ');
      const report = failedReport(attemptId, `none of its ${candidates.length} candidates passed (${why})`, spent);
      Object.assign(group, { state: 'failed', reason: clip(report.reason!, 1000), durationMs: spent.durationMs });
      return report;
    }
    best.result.selected = true;
    const report = best.report!;
    Object.assign(group, {
      state: 'done',
      commits: report.commits,
      filesChanged: report.filesChanged,
      durationMs: spent.durationMs,
    });
    return report;
  }
}

function agentName(agent: AgentSpec): string {
  return 'model' in agent && agent.model ? `${agent.kind} (${agent.model})` : agent.kind;
}

function compare(a: number[], b: number[]): number {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return 0;
}
