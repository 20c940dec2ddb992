/** What a person sees at a gate, and the bounded pool the fan-out starts sub-tasks with. Pure: no server. */
import { ActivityFailure, ApplicationFailure, RetryState } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import type { GateReview } from '../../src/contracts/messages';
import { MAX_WAIT_MINUTES, type PlannedRequest, parseLeaderRequest } from '../../src/contracts/request';
import { timerMs } from '../../src/workflows/durations';
import { gateDetails, planRows } from '../../src/workflows/leader/gates';
import { pool } from '../../src/workflows/leader/pool';
import { failureLine } from '../../src/workflows/leader/run';

const review = (fields: Partial<GateReview>): GateReview => ({
  gate: 'plan',
  openedAt: 0,
  expiresAt: Date.UTC(2030, 0, 2, 3, 4, 5),
  onTimeout: 'fail',
  refused: [],
  ...fields,
});

describe('gateDetails', () => {
  it('at the plan gate: what waits, and the exact commands that pass or refuse it', () => {
    expect(gateDetails('run-1', review({}))).toBe(
      [
        '**Waiting for a person at the plan gate** (on timeout: fail, at 2030-01-02T03:04:05.000Z)',
        'Approve: `flotilla approve run-1 --gate plan`',
        'Reject: `flotilla reject run-1 --gate plan --reason "why"`',
      ].join('\n'),
    );
  });

  it('at the push gate: the approval names the commit, and the tests are summed up', () => {
    const sha = 'a'.repeat(40);
    const details = gateDetails(
      'run-1',
      review({ gate: 'push', sha, testSummary: '3 passed, 0 failed (vitest)', onTimeout: 'approve' }),
    );
    expect(details).toContain('(on timeout: approve,');
    expect(details).toContain('\nTests: 3 passed, 0 failed (vitest)\n');
    expect(details).toContain(`Approve: \`flotilla approve run-1 --gate push --sha ${sha}\``);
  });

  it('a gate whose expiry is past the last date JavaScript holds (from an older history) is shown, not thrown over', () => {
    expect(gateDetails('run-1', review({ expiresAt: Date.now() + 1.5e11 * 60_000 }))).toContain(
      '(on timeout: fail, at +275760-09-13T00:00:00.000Z)',
    );
    expect(gateDetails('run-1', review({ expiresAt: NaN }))).toContain('at 1970-01-01T00:00:00.000Z)');
  });
});

describe('timerMs', () => {
  it('leaves every wait a request may ask for as it is, and caps what older histories hold at a century', () => {
    const year = MAX_WAIT_MINUTES * 60_000;
    expect(timerMs(year)).toBe(year);
    expect(timerMs(1.5e11 * 60_000)).toBe(100 * 365 * 24 * 3_600_000);
  });
});

describe('planRows', () => {
  it("shows each sub-task's agent (its own, else the default, else the planner's) and its prompt's first line", () => {
    const parsed = parseLeaderRequest({
      objective: 'o',
      repo: { url: 'https://example.com/a.git' },
      testCmd: 'true',
      planner: { kind: 'shell', command: 'plan' },
    });
    const plan: PlannedRequest = {
      ...parsed,
      subTasks: [
        { id: 'a', prompt: 'first line\nmore', ownedPaths: ['a'], agent: { kind: 'codex' } },
        { id: 'b', prompt: 'b', ownedPaths: ['b', 'c'] },
      ],
    };
    expect(planRows(plan)).toEqual([
      { id: 'a', ownedPaths: ['a'], agent: 'codex', prompt: 'first line' },
      { id: 'b', ownedPaths: ['b', 'c'], agent: 'shell', prompt: 'b' },
    ]);
    expect(planRows({ ...plan, agent: { kind: 'claude-code' } })[1].agent).toBe('claude-code');
    const limited = { ...plan, subTasks: [{ ...plan.subTasks[1], limits: { maxTurns: 3, subTaskBudgetUsd: 0.5 } }] };
    expect(planRows(limited)[0].limits).toBe('budget $0.50, 3 turns');
  });
});

describe('failureLine', () => {
  it('is the innermost cause with its type, on one line', () => {
    const cause = ApplicationFailure.nonRetryable('branch nope does not exist\nat git ls-remote', 'RemoteRefused');
    const err = new ActivityFailure(
      'Activity task failed',
      'resolveBase',
      '1',
      RetryState.NON_RETRYABLE_FAILURE,
      'w',
      cause,
    );
    expect(failureLine(err)).toBe('RemoteRefused: branch nope does not exist');
  });

  it('is clipped, and says so', () => {
    const line = failureLine(new Error('y'.repeat(2000)));
    expect(line.length).toBeLessThanOrEqual(500);
    expect(line).toMatch(/… \(\+\d+ chars\)$/);
  });
});

describe('pool', () => {
  it('runs at most `limit` at once and keeps the results in the items’ order', async () => {
    let running = 0;
    let most = 0;
    const results = await pool([30, 10, 20, 0, 5], 2, async (ms, i) => {
      running++;
      most = Math.max(most, running);
      await new Promise((r) => setTimeout(r, ms));
      running--;
      return `${i}:${ms}`;
    });
    expect(most).toBe(2);
    expect(results).toEqual(['0:30', '1:10', '2:20', '3:0', '4:5']);
  });

  it('starts every item when the limit is above their number, and nothing for none', async () => {
    let started = 0;
    await pool([1, 2, 3], 10, async () => void started++);
    expect(started).toBe(3);
    expect(await pool([], 4, async () => 1)).toEqual([]);
  });
});
