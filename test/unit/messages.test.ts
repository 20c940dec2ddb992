/**
 * Message and request validation without a server: every bad field is named with the real
 * reason, and the status the client shows computes its durations from the timestamps it carries.
 * (test/e2e/messages.test.ts sends the same hostile messages to a real run.)
 */
import { describe, expect, it } from 'vitest';
import { formatStatus } from '../../src/cli/format/status';
import { ApproveInput, ResumeInput, type RunStatus, parseMessage } from '../../src/contracts/messages';
import { MAX_CHARS, RequestError, parseLeaderRequest } from '../../src/contracts/request';

describe('messages and requests, validated', () => {
  it('message schemas name every bad field with the real reason', () => {
    const bad = (schema: Parameters<typeof parseMessage>[0], raw: unknown) => {
      const r = parseMessage(schema, raw);
      return r.ok ? 'accepted' : r.reason;
    };
    expect(bad(ApproveInput, undefined)).toBe('invalid message: (message): is required');
    expect(bad(ApproveInput, null)).toBe('invalid message: (message): expected object, got null');
    expect(bad(ApproveInput, 'approve')).toBe('invalid message: (message): expected object, got a string');
    expect(bad(ApproveInput, [1])).toBe('invalid message: (message): expected object, got an array');
    expect(bad(ApproveInput, { gate: 'deploy', by: 7 })).toBe(
      'invalid message: gate: Invalid option: expected one of "plan"|"push"; by: expected string, got a number',
    );
    expect(bad(ResumeInput, { workerId: 'a', addBudgetUsd: -5 })).toBe(
      'invalid message: addBudgetUsd: must be a positive number of dollars',
    );
    expect(bad(ResumeInput, { workerId: 'a', addBudgetUsd: 'abc' })).toBe(
      'invalid message: addBudgetUsd: expected number, got a string',
    );
    expect(bad(ResumeInput, { workerId: 'a', addBudgetUsd: Infinity })).toBe(
      'invalid message: addBudgetUsd: expected number, got Infinity',
    );
    expect(bad(ResumeInput, { workerId: 'a', addBudgetUsd: NaN })).toBe(
      'invalid message: addBudgetUsd: expected number, got NaN',
    );
    expect(bad(ApproveInput, { gate: 'plan', comment: 'x'.repeat(2_000_000) })).toBe(
      `invalid message: comment: is 2000000 characters; at most ${MAX_CHARS.comment}`,
    );
    expect(bad(ResumeInput, { workerId: 'a', message: 'go', addBudgetUsd: 2 })).toBe('accepted');
  });

  it('a 10 MB prompt and wrongly typed values are refused by validate, each with its reason', () => {
    const req = {
      objective: 'x',
      repo: { url: '/tmp/r.git' },
      testCmd: 'true',
      agent: { kind: 'shell', command: 'true' },
      subTasks: [{ id: 'a', prompt: 'p'.repeat(10_000_000), ownedPaths: ['a'] }],
      limits: { maxParallel: 'four' },
    };
    let problems: string[] = [];
    try {
      parseLeaderRequest(req);
    } catch (err) {
      problems = (err as RequestError).problems;
    }
    expect(problems).toEqual([
      `subTasks[0].prompt: is 10000000 characters; at most ${MAX_CHARS.prompt}`,
      'limits.maxParallel: expected number, got a string',
    ]);
  });

  it('the status carries timestamps and the client computes durations from them', () => {
    const now = 1_000_000_000_000;
    const s: RunStatus = {
      phase: 'running',
      objective: 'o',
      repo: '/r.git',
      targetRef: 'main',
      workers: [
        { id: 'busy', state: 'running', costUsd: 0, turns: 0, startedAt: now - 3_000 },
        { id: 'over', state: 'done', costUsd: 0, turns: 0, startedAt: now - 9_000, durationMs: 1_500 },
      ],
      decisions: [],
      refusals: [
        { message: 'approve', by: 'mallory', reason: 'the plan gate is not open (phase: running)', at: now - 1_000 },
      ],
      refusedCount: 1,
      startedAt: now - 5_000,
      totals: { costUsd: 0, turns: 0, workersDone: 1, workersFailed: 0 },
    };
    const shown = formatStatus(s, 'run-1', now);
    expect(shown).toMatch(/busy\s+running\s+3\.0s/);
    expect(shown).toMatch(/over\s+done\s+1\.5s/);
    expect(shown).toContain('5.0s elapsed');
    expect(shown).toContain('refused messages: 1');
    expect(shown).toContain('approve from mallory: the plan gate is not open (phase: running)');
    expect(formatStatus(s, 'run-1', now + 2_000)).toContain('7.0s elapsed');
  });
});
