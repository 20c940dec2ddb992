/**
 * What the leader makes of its sub-tasks' reports: the result's copy shrinks so that a big run
 * still fits one payload, the status line follows the report, budgets are sliced, and a run
 * whose sub-tasks failed says which. Pure functions: no server.
 */
import { describe, expect, it } from 'vitest';
import type { SubTaskReport } from '../../src/contracts/reports';
import { parseLeaderRequest } from '../../src/contracts/request';
import { defaultPayloadConverter } from '@temporalio/common';
import type { RunResult } from '../../src/contracts/reports';
import { jsonSize } from '../../src/contracts/text';
import {
  RESULT_REPORTS_INLINE,
  boundedResult,
  briefReport,
  pageOfReports,
  failedReport,
  failedSubTasksLine,
  settledLine,
  subTaskBudget,
} from '../../src/workflows/leader/reports';

const report = (fields: Partial<SubTaskReport> = {}): SubTaskReport => ({
  workerId: 'a',
  status: 'done',
  commits: 1,
  filesChanged: 1,
  isolation: 'bubblewrap',
  durationMs: 10,
  costUsd: 0.5,
  turns: 3,
  runs: 1,
  ...fields,
});

const limits = (l: object) =>
  parseLeaderRequest({
    objective: 'o',
    repo: { url: 'https://example.com/a.git' },
    testCmd: 'true',
    agent: { kind: 'shell', command: 'true' },
    subTasks: [{ id: 'a', prompt: 'p', ownedPaths: ['a'] }],
    limits: l,
  }).limits;

describe('briefReport', () => {
  const long = 'x'.repeat(100_000);

  it('keeps a small report as it is', () => {
    const r = report({ reason: 'it broke', tail: 'last line', outOfScope: ['a', 'b'] });
    expect(briefReport(r, 1)).toEqual(r);
  });

  it("keeps the head and the end of a long text, marking what was cut; the rest is in the report's log", () => {
    const brief = briefReport(report({ tail: `first\n${long}\nlast` }), 1);
    expect(brief.tail!.length).toBeLessThanOrEqual(4096 + 3);
    expect(brief.tail).toMatch(/^first\n/);
    expect(brief.tail).toMatch(/\n…\n/);
    expect(brief.tail).toMatch(/\nlast$/);
  });

  it('shrinks with the number of sub-tasks, so a hundred failed reports fit one 64 KiB payload', () => {
    const reports = Array.from({ length: 100 }, (_, i) =>
      briefReport(
        report({
          workerId: `t${i}`,
          status: 'failed',
          reason: long,
          tail: long,
          outOfScope: Array.from({ length: 50 }, () => 'p'.repeat(500)),
        }),
        100,
      ),
    );
    expect(JSON.stringify(reports).length).toBeLessThan(64 * 1024);
    expect(reports[0].outOfScope).toHaveLength(3);
    expect(reports[0].reason!.length).toBeLessThan(200);
  });
});

describe('failedReport', () => {
  it('is a failed report with nothing collected, spending what it is told', () => {
    expect(failedReport('a', 'never started')).toEqual({
      workerId: 'a',
      status: 'failed',
      reason: 'never started',
      commits: 0,
      filesChanged: 0,
      isolation: 'none',
      durationMs: 0,
      costUsd: 0,
      turns: 0,
      runs: 0,
    });
    expect(failedReport('a', 'x', { durationMs: 5, costUsd: 1, turns: 2 })).toMatchObject({
      durationMs: 5,
      costUsd: 1,
      turns: 2,
    });
  });
});

describe('settledLine', () => {
  it('takes the report’s state, numbers and reason, and clears a question', () => {
    expect(settledLine(report({ status: 'failed', reason: 'r' }))).toEqual({
      state: 'failed',
      reason: 'r',
      question: undefined,
      commits: 1,
      filesChanged: 1,
      durationMs: 10,
      costUsd: 0.5,
      turns: 3,
    });
  });

  it('says where the sandbox lived only when the report does (runs with host affinity)', () => {
    const line = settledLine(
      report({ host: 'h2', reprovisions: [{ from: 'h1', to: 'h2', reason: 'lost' }], checkpoint: { sha: 's', at: 1 } }),
    );
    expect(line).toMatchObject({ host: 'h2', reprovisions: 1, checkpoint: { sha: 's', at: 1 } });
    expect(settledLine(report())).not.toHaveProperty('host');
  });
});

describe('subTaskBudget', () => {
  it("is the request's slice, else an equal share of the run's budget, else unlimited", () => {
    expect(subTaskBudget(limits({ subTaskBudgetUsd: 2, runBudgetUsd: 10 }), 4)).toBe(2);
    expect(subTaskBudget(limits({ workerBudgetUsd: 3 }), 4)).toBe(3);
    expect(subTaskBudget(limits({ runBudgetUsd: 10 }), 4)).toBe(2.5);
    expect(subTaskBudget(limits({}), 4)).toBeUndefined();
  });
});

describe('failedSubTasksLine', () => {
  it('is nothing when every sub-task is done', () => {
    expect(failedSubTasksLine([report(), report({ workerId: 'b' })], 2)).toBeUndefined();
  });

  it('names the first three failed sub-tasks and counts the others', () => {
    const failed = ['a', 'b', 'c', 'd', 'e'].map((id) =>
      report({ workerId: id, status: 'failed', reason: `${id} broke` }),
    );
    expect(failedSubTasksLine([report({ workerId: 'ok' }), ...failed], 6)).toBe(
      '5 of 6 workers failed: a: a broke; b: b broke; c: c broke; 2 more in the result',
    );
    expect(failedSubTasksLine(failed.slice(0, 1), 2)).toBe('1 of 2 workers failed: a: a broke');
  });
});

describe('the result of a run of 1,000 sub-tasks (issue 19)', () => {
  const ids = Array.from({ length: 1000 }, (_, i) => `sub-task-with-a-long-name-${i}`);
  // As full as a run makes them: a ref, a head, a log, a tail as long as briefReport leaves at 1,000.
  const reports = ids.map((id, i) =>
    briefReport(
      report({
        workerId: id,
        status: i % 9 === 4 ? 'failed' : 'done',
        reason: i % 9 === 4 ? 'é'.repeat(5000) : undefined,
        ref: `refs/flotilla/run-0123456789abcdef/${id}`,
        headSha: 'a'.repeat(40),
        logRef: `sha256:${'b'.repeat(64)}`,
        tail: 'ü'.repeat(5000),
        summary: 's'.repeat(5000),
        host: 'worker-host-0123456789',
      }),
      1000,
    ),
  );
  const result = (workers: RunResult['workers']): RunResult => ({
    outcome: 'pushed',
    message: 'm',
    baseSha: 'c'.repeat(40),
    targetRef: 'main',
    workers,
    head: { ref: 'refs/flotilla/run/integration', sha: 'd'.repeat(40), integrated: ids },
    costUsd: 1,
    decisions: [],
    refusals: [],
    refusedCount: 0,
  });

  it('is carried whole up to a hundred reports', () => {
    const whole = result(reports.slice(0, RESULT_REPORTS_INLINE));
    expect(boundedResult(whole)).toBe(whole);
  });

  it('fits one payload: the failed reports first, then the rest in order, saying how many it left out', () => {
    const bounded = boundedResult(result(reports));
    expect(defaultPayloadConverter.toPayload(bounded)!.data!.length).toBeLessThan(64 * 1024);
    const failed = reports.filter((r) => r.status === 'failed');
    const first = [...failed, ...reports.filter((r) => r.status === 'done')];
    // Here the 1,000 ids of the integration head take half the room, and some of the failed fill the rest.
    expect(bounded.workers.length).toBeGreaterThan(20);
    expect(bounded.workers).toEqual(first.slice(0, bounded.workers.length));
    const allDone = reports.map((r) => ({ ...r, status: 'done' as const }));
    const none = boundedResult(result(allDone));
    expect(none.workers).toEqual(allDone.slice(0, none.workers.length));
    expect(bounded.workersOmitted).toEqual({
      count: 1000 - bounded.workers.length,
      total: 1000,
      byStatus: { done: 1000 - failed.length, failed: failed.length },
    });
    expect(bounded.head!.integrated).toHaveLength(1000);
  });

  it('gives every report back through the reports query, a hundred a page, and reads a bad page as the first', () => {
    const pages = [1, 2, 10].map((page) => pageOfReports(reports, { page }));
    expect(pages.map((p) => p.reports[0].workerId)).toEqual([ids[0], ids[100], ids[900]]);
    expect(pages.every((p) => p.pages === 10 && p.total === 1000 && p.reports.length === 100)).toBe(true);
    expect(pageOfReports(reports, { page: 11 }).reports).toEqual([]);
    for (const bad of [undefined, null, 'x', { page: -1 }, { page: 1.5 }])
      expect(pageOfReports(reports, bad).page).toBe(1);
    expect(defaultPayloadConverter.toPayload(pages[0])!.data!.length).toBeLessThan(64 * 1024);
  });

  it('measures JSON as a payload does, multi-byte and escaped characters included', () => {
    for (const v of [reports[4], { s: 'a\u0001"\\é€😀' }, 'x', null])
      expect(jsonSize(v)).toBe(Buffer.byteLength(JSON.stringify(v)));
  });
});
