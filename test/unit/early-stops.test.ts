/**
 * The decisions of early stops (issue 18), pure: what a checkpoint of a running agent decides
 * under each policy, when checkpoints in a row count as a stall, and the reasons people read.
 */
import { describe, expect, it } from 'vitest';
import { parseLeaderRequest } from '../../src/contracts/request';
import { idleReason, outsidePathsReason, revertNotice, stalledReason } from '../../src/contracts/early-stops';
import { StallWatch, checkpointDecision } from '../../src/workflows/subtask/early-stops';
import { requestProblems } from '../support/requests';

const clean = { outOfScope: [], outOfScopeCount: 0 };
const stray = { outOfScope: ['a.txt', 'b/c.txt'], outOfScopeCount: 2 };

describe('a checkpoint of a running agent', () => {
  it('writing outside its paths stops it naming them, or under revert asks for a revert', () => {
    expect(checkpointDecision(stray, 'stop', undefined)).toEqual({
      stop: { reason: 'wrote outside its paths: a.txt, b/c.txt', outOfScope: ['a.txt', 'b/c.txt'] },
    });
    expect(checkpointDecision(stray, 'revert', undefined)).toEqual({ revert: true });
  });

  it('in scope and not stalled, or not checked at all, goes on', () => {
    expect(checkpointDecision(clean, 'stop', undefined)).toBeUndefined();
    expect(checkpointDecision(undefined, 'stop', undefined)).toBeUndefined();
  });

  it('stalled stops it as stalled; out of scope comes first', () => {
    const stalled = { checkpoints: 3, intervalMs: 60_000 };
    expect(checkpointDecision(clean, 'stop', stalled)).toEqual({
      stop: {
        reason: 'stalled: 3 checkpoint(s) in a row (3 minutes) with an unchanged workspace and no new output',
      },
    });
    expect(checkpointDecision(stray, 'stop', stalled)).toMatchObject({ stop: { reason: /^wrote outside/ } });
  });
});

describe('the stall watch', () => {
  it('counts checkpoints in a row with the same workspace and the same output, and starts over on any change', () => {
    const watch = new StallWatch(2);
    expect(watch.see({ sha: 'a', output: 'o1' })).toBe(false);
    expect(watch.see({ sha: 'a', output: 'o1' })).toBe(false);
    // New output: not stalled, and the count starts again.
    expect(watch.see({ sha: 'a', output: 'o2' })).toBe(false);
    expect(watch.see({ sha: 'a', output: 'o2' })).toBe(false);
    expect(watch.see({ sha: 'a', output: 'o2' })).toBe(true);
    // A changed workspace starts it again too.
    expect(watch.see({ sha: 'b', output: 'o2' })).toBe(false);
  });

  it('output it cannot see never counts, a new invocation starts afresh, and without a limit nothing stalls', () => {
    const blind = new StallWatch(1);
    for (let i = 0; i < 3; i++) expect(blind.see({ sha: 'a' })).toBe(false);
    const watch = new StallWatch(1);
    watch.see({ sha: 'a', output: 'o' });
    watch.reset();
    expect(watch.see({ sha: 'a', output: 'o' })).toBe(false);
    const off = new StallWatch(undefined);
    for (let i = 0; i < 5; i++) expect(off.see({ sha: 'a', output: 'o' })).toBe(false);
  });
});

describe('the reasons', () => {
  it('name the paths (and how many more), the idle minutes as given, and what a reverted agent is told', () => {
    expect(outsidePathsReason({ outOfScope: ['a.txt'], outOfScopeCount: 4 })).toBe(
      'wrote outside its paths: a.txt and 3 more',
    );
    expect(idleReason(0.05 * 60_000)).toBe('idle for 0.05 minutes');
    expect(idleReason(15 * 60_000)).toBe('idle for 15 minutes');
    expect(stalledReason(2, 1000)).toMatch(/^stalled: 2 checkpoint\(s\) in a row \(0\.033 minutes\)/);
    const notice = revertNotice(stray, ['api', 'shared.md']);
    expect(notice).toContain('outside the paths this sub-task may change (api, shared.md): a.txt, b/c.txt.');
  });
});

describe('the request fields', () => {
  const request = (fields: object) => ({
    objective: 'o',
    repo: { url: 'https://example.com/a/b.git', baseRef: 'main' },
    testCmd: 'true',
    agent: { kind: 'shell', command: 'true' },
    subTasks: [{ id: 'a', prompt: 'p', ownedPaths: ['src/a'] }],
    ...fields,
  });
  const problems = (fields: object): string[] => requestProblems(request(fields));

  it('are off and stop by default, take fractional minutes, and refuse bad values naming the field', () => {
    const parsed = parseLeaderRequest(request({}));
    expect(parsed.limits.idleMinutes).toBeUndefined();
    expect(parsed.limits.stallCheckpoints).toBeUndefined();
    expect(parsed.policy.outOfScope).toBe('stop');
    expect(parseLeaderRequest(request({ limits: { idleMinutes: 0.05 } })).limits.idleMinutes).toBe(0.05);
    expect(problems({ limits: { idleMinutes: 0 } }).join('\n')).toMatch(/limits\.idleMinutes/);
    expect(problems({ limits: { stallCheckpoints: 1.5 } }).join('\n')).toMatch(/limits\.stallCheckpoints/);
    expect(problems({ policy: { outOfScope: 'ignore' } }).join('\n')).toMatch(/policy\.outOfScope/);
  });
});
