/** Limits per sub-task and per run (issue 18): what is accepted, and how a bad one is refused. */
import { describe, expect, it } from 'vitest';
import { limitsOfSubTask, parseLeaderRequest, subTaskLimitsLine } from '../../src/contracts/request';
import { subTaskBudget } from '../../src/workflows/leader/reports';
import { deadlineReason } from '../../src/workflows/leader/deadline';
import { requestProblems } from '../support/requests';

const valid = () => ({
  objective: 'o',
  repo: { url: 'https://example.com/a/b.git', baseRef: 'main' },
  testCmd: 'true',
  agent: { kind: 'shell', command: 'true' },
  subTasks: [
    { id: 'a', prompt: 'p', ownedPaths: ['src/a'] },
    { id: 'b', prompt: 'p', ownedPaths: ['src/b'] },
    { id: 'c', prompt: 'p', ownedPaths: ['src/c'] },
  ],
});

function problems(mutate: (r: any) => void): string[] {
  const r = valid();
  mutate(r);
  return requestProblems(r);
}

describe('subTasks[].limits', () => {
  it.each([
    [
      'a budget that is not positive',
      { subTaskBudgetUsd: 0 },
      'subTasks[2].limits.subTaskBudgetUsd: must be a positive number of dollars',
    ],
    ['a fractional turn limit', { maxTurns: 2.5 }, 'subTasks[2].limits.maxTurns: expected int, got a number'],
    [
      'an agent timeout over a day',
      { agentTimeoutMinutes: 2000 },
      'subTasks[2].limits.agentTimeoutMinutes: must be at most 1440 minutes (a day)',
    ],
    ['a limit only the request has', { maxParallel: 2 }, 'subTasks[2].limits: unknown field(s) "maxParallel"'],
    ['an old name', { workerBudgetUsd: 1 }, 'subTasks[2].limits: unknown field(s) "workerBudgetUsd"'],
    ['a string', { maxTurns: '3' }, 'subTasks[2].limits.maxTurns: expected number, got a string'],
  ])('refuses %s, naming the field', (_what, limits, expected) => {
    expect(problems((r) => (r.subTasks[2].limits = limits))).toEqual([expected]);
  });

  it("overrides the request's limits for that sub-task only", () => {
    const req = parseLeaderRequest({
      ...valid(),
      limits: { maxTurns: 50, agentTimeoutMinutes: 30, subTaskBudgetUsd: 2 },
      subTasks: [
        { id: 'a', prompt: 'p', ownedPaths: ['src/a'], limits: { maxTurns: 3, agentTimeoutMinutes: 0.5 } },
        { id: 'b', prompt: 'p', ownedPaths: ['src/b'], limits: { subTaskBudgetUsd: 0.25 } },
      ],
    });
    const [a, b] = req.subTasks!;
    expect(limitsOfSubTask(req.limits, a)).toEqual({ maxTurns: 3, agentTimeoutMinutes: 0.5 });
    expect(limitsOfSubTask(req.limits, b)).toEqual({ maxTurns: 50, agentTimeoutMinutes: 30 });
    expect([subTaskBudget(req.limits, 2, a), subTaskBudget(req.limits, 2, b)]).toEqual([2, 0.25]);
    expect(subTaskLimitsLine(a.limits!)).toBe('3 turns, 0.5 min per invocation');
    expect(subTaskLimitsLine(b.limits!)).toBe('budget $0.25');
    expect(subTaskLimitsLine({})).toBeUndefined();
  });

  it("a sub-task's own budget beats the share of the run's budget", () => {
    const req = parseLeaderRequest({ ...valid(), limits: { runBudgetUsd: 9 } });
    expect(subTaskBudget(req.limits, 3, { limits: { subTaskBudgetUsd: 1 } })).toBe(1);
    expect(subTaskBudget(req.limits, 3, {})).toBe(3);
  });
});

describe('limits.runTimeoutMinutes and limits.autoResume', () => {
  it('accepts a fractional deadline and auto-resume under a run budget; both are absent by default', () => {
    const req = parseLeaderRequest({
      ...valid(),
      limits: { runTimeoutMinutes: 0.5, autoResume: true, runBudgetUsd: 3 },
    });
    expect(req.limits).toMatchObject({ runTimeoutMinutes: 0.5, autoResume: true });
    const plain = parseLeaderRequest(valid());
    expect('runTimeoutMinutes' in plain.limits || 'autoResume' in plain.limits).toBe(false);
  });

  it.each([
    ['a deadline of zero', { runTimeoutMinutes: 0 }, 'limits.runTimeoutMinutes: Too small'],
    [
      'a deadline over a year',
      { runTimeoutMinutes: 600_000 },
      'limits.runTimeoutMinutes: must be at most 525600 minutes (a year)',
    ],
    [
      'auto-resume that is not a boolean',
      { autoResume: 'yes', runBudgetUsd: 1 },
      'limits.autoResume: expected boolean',
    ],
    [
      'auto-resume without a run budget',
      { autoResume: true, subTaskBudgetUsd: 1 },
      'limits.autoResume: needs limits.runBudgetUsd: a sub-task resumes by itself only while the run budget has room',
    ],
  ])('refuses %s', (_what, limits, expected) => {
    expect(problems((r) => (r.limits = limits)).join('\n')).toContain(expected);
  });

  it('auto-resume off needs no run budget', () => {
    expect(problems((r) => (r.limits = { autoResume: false }))).toEqual([]);
  });

  it('the reason of a run past its deadline names the limit and its minutes', () => {
    expect(deadlineReason(0.05)).toBe(
      'ran past limits.runTimeoutMinutes (0.05 min); what ran was cancelled and nothing was pushed',
    );
  });
});
