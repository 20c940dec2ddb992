/**
 * What the leader makes of its sub-tasks' reports: the result's copy shrinks so that a big run
 * still fits one payload, the status line follows the report, budgets are sliced, and a run
 * whose sub-tasks failed says which. Pure functions: no server.
 */
import { describe, expect, it } from 'vitest';
import type { SubTaskReport } from '../../src/contracts/reports';
import { parseLeaderRequest } from '../../src/contracts/request';
import {
  briefReport,
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
