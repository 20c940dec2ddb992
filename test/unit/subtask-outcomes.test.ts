/** How a sub-task's invocations and collected work read in its report. Pure: no server. */
import { describe, expect, it } from 'vitest';
import type { AgentRunReport } from '../../src/activities';
import { commandFailure, outOfScopeReason, suspension } from '../../src/workflows/subtask/outcomes';

const invocation = (agent: Partial<AgentRunReport['agent']> = {}, fields: Partial<AgentRunReport> = {}) =>
  ({
    exitCode: 0,
    timedOut: false,
    durationMs: 1,
    tail: 'tail',
    logRef: 'log',
    budgetExceeded: false,
    sessionCostUsd: 0,
    agent: { turns: 1, toolCalls: 0, costUsd: 0, hitTurnLimit: false, hitBudget: false, ...agent },
    ...fields,
  }) satisfies AgentRunReport;

describe('suspension', () => {
  it('is nothing for an invocation that finished', () => {
    expect(suspension(invocation(), 0, undefined, undefined)).toBeUndefined();
    expect(suspension(invocation({ turns: 5 }), 0, undefined, 5)).toBeUndefined();
  });

  it('says why the sub-task waits for a person: a question, the budget, the turn limit', () => {
    expect(suspension(invocation({ question: 'which one?' }), 0, 1, 1)).toBe('the agent needs an answer');
    expect(suspension(invocation({}, { budgetExceeded: true }), 1.234, 1, undefined)).toBe(
      'the agent used its budget ($1.23 of $1.00)',
    );
    // A shell agent cannot stop itself at the limit: it is held to it here.
    expect(suspension(invocation({ turns: 6 }), 0, undefined, 5)).toBe('the agent reached its turn limit (5)');
    expect(suspension(invocation({ hitTurnLimit: true }), 0, undefined, undefined)).toBe(
      'the agent reached its turn limit (its own)',
    );
  });
});

describe('commandFailure', () => {
  it('names the command and how it failed, with its output', () => {
    expect(commandFailure('the setup command', invocation({}, { exitCode: 2 }))).toEqual({
      status: 'failed',
      reason: 'the setup command exited with code 2',
      exitCode: 2,
      tail: 'tail',
      logRef: 'log',
    });
    expect(commandFailure('the agent', invocation({}, { exitCode: 137, timedOut: true })).reason).toBe(
      'the agent timed out',
    );
  });
});

describe('outOfScopeReason', () => {
  it('names the paths the sub-task does not own, and how many more there are', () => {
    expect(outOfScopeReason({ outOfScope: ['x', 'y'], outOfScopeCount: 2 }, ['a', 'b'])).toBe(
      'changed 2 path(s) outside its ownedPaths (a, b): x, y',
    );
    expect(outOfScopeReason({ outOfScope: ['x'], outOfScopeCount: 40 }, ['a'])).toBe(
      'changed 40 path(s) outside its ownedPaths (a): x and 39 more',
    );
  });
});
