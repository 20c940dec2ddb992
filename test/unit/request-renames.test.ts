/**
 * Limits renamed with the vocabulary (docs/concepts.md): the old names still work, say they are
 * deprecated, and a history that holds them (a run parsed by an older release) reads the same.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { type LimitsInHistory, currentLimits, deprecatedFields, parseLeaderRequest } from '../../src/contracts/request';
import { requestProblems } from '../support/requests';

const request = (limits: object) => ({
  objective: 'o',
  repo: { url: 'https://example.com/a/b.git' },
  testCmd: 'true',
  agent: { kind: 'shell', command: 'true' },
  subTasks: [{ id: 'a', prompt: 'p', ownedPaths: ['a'] }],
  limits,
});

function problems(limits: object): string[] {
  return requestProblems(request(limits));
}

describe('renamed limits', () => {
  it('the new names are what a parsed request holds', () => {
    const { limits } = parseLeaderRequest(request({ agentTimeoutMinutes: 5, subTaskBudgetUsd: 2 }));
    expect(limits).toMatchObject({ agentTimeoutMinutes: 5, subTaskBudgetUsd: 2 });
    expect(limits).not.toHaveProperty('workerTimeoutMinutes');
    expect(limits).not.toHaveProperty('workerBudgetUsd');
  });

  it('the old names are accepted and parse to the new ones', () => {
    const { limits } = parseLeaderRequest(request({ workerTimeoutMinutes: 5, workerBudgetUsd: 2 }));
    expect(limits).toMatchObject({ agentTimeoutMinutes: 5, subTaskBudgetUsd: 2 });
    expect(Object.keys(limits)).not.toContain('workerTimeoutMinutes');
    expect(Object.keys(limits)).not.toContain('workerBudgetUsd');
  });

  it('without either name the agent timeout is 30 minutes and there is no sub-task budget', () => {
    const { limits } = parseLeaderRequest(request({ maxParallel: 2 }));
    expect(limits.agentTimeoutMinutes).toBe(30);
    expect(limits).not.toHaveProperty('subTaskBudgetUsd');
  });

  it('giving a limit under both names is refused, naming both', () => {
    expect(problems({ workerTimeoutMinutes: 5, agentTimeoutMinutes: 6 })).toEqual([
      'limits.workerTimeoutMinutes: is the old name of limits.agentTimeoutMinutes, which is given too; give only limits.agentTimeoutMinutes',
    ]);
    expect(problems({ workerBudgetUsd: 1, subTaskBudgetUsd: 1 })).toEqual([
      'limits.workerBudgetUsd: is the old name of limits.subTaskBudgetUsd, which is given too; give only limits.subTaskBudgetUsd',
    ]);
  });

  it('an old name is held to the same rules as the new one', () => {
    expect(problems({ workerTimeoutMinutes: -1 })).toEqual([expect.stringMatching(/^limits\.workerTimeoutMinutes: /)]);
    expect(problems({ workerTimeoutMinutes: 24 * 60 + 1 })).toHaveLength(1);
  });

  it('a parsed request parses again to itself (the planner validates its plan against it)', () => {
    const once = parseLeaderRequest(request({ workerTimeoutMinutes: 5 }));
    expect(parseLeaderRequest(once)).toEqual(once);
  });
});

describe('deprecatedFields', () => {
  it('says one line per old name used, and what replaces it', () => {
    expect(deprecatedFields(request({ workerTimeoutMinutes: 5, workerBudgetUsd: 2 }))).toEqual([
      'limits.workerTimeoutMinutes is deprecated; use limits.agentTimeoutMinutes',
      'limits.workerBudgetUsd is deprecated; use limits.subTaskBudgetUsd',
    ]);
  });

  it('says nothing for the new names, no limits, or input that is not a request at all', () => {
    expect(deprecatedFields(request({ agentTimeoutMinutes: 5, subTaskBudgetUsd: 2 }))).toEqual([]);
    for (const input of [undefined, null, 'x', 3, [], {}, { limits: null }, { limits: [1] }])
      expect(deprecatedFields(input)).toEqual([]);
  });
});

describe('currentLimits on a request from an older release', () => {
  it("reads the old names in a committed history's parsed request (test/history/v1)", () => {
    const file = path.join(__dirname, '../history/v1/spine.leader.json');
    const events = JSON.parse(readFileSync(file, 'utf8')).events as {
      activityTaskCompletedEventAttributes?: { result: { payloads: { data: string }[] } };
    }[];
    const parsed = events.find((e) => e.activityTaskCompletedEventAttributes)!.activityTaskCompletedEventAttributes!;
    const req = JSON.parse(Buffer.from(parsed.result.payloads[0].data, 'base64').toString('utf8'));
    expect(req.limits).toHaveProperty('workerTimeoutMinutes');
    const limits = currentLimits(req.limits as LimitsInHistory);
    expect(limits.agentTimeoutMinutes).toBe(req.limits.workerTimeoutMinutes);
    expect(limits).not.toHaveProperty('workerTimeoutMinutes');
  });

  it('keeps a budget given under the old name', () => {
    const old = { maxParallel: 4, workerTimeoutMinutes: 10, workerBudgetUsd: 3 } as LimitsInHistory;
    expect(currentLimits(old)).toEqual({ maxParallel: 4, agentTimeoutMinutes: 10, subTaskBudgetUsd: 3 });
  });
});
