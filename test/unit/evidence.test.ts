import { describe, expect, it } from 'vitest';
import {
  compareMeasurements,
  evidenceLines,
  lostLine,
  lostTests,
  parseMeasurements,
  tally,
  tierOf,
} from '../../src/contracts/evidence';
import { parseTestOutput } from '../../src/contracts/test-summary';

const tap = (lines: string[]) => parseTestOutput(['TAP version 13', ...lines, `1..${lines.length}`].join('\n'));

describe('evidence', () => {
  const base = tap(['ok 1 - adds', 'ok 2 - subtracts', 'ok 3 - divides']);

  it('names the tests that passed on the base and are now missing or skipped', () => {
    const now = tap(['ok 1 - adds', 'ok 2 - divides # SKIP later']);
    const lost = lostTests(base, now)!;
    expect(lost).toEqual({ fewer: 1, missing: ['subtracts'], skipped: ['divides'], more: false });
    expect(lostLine(lost)).toBe(
      '1 fewer test(s) than the base; passed on the base, now missing: subtracts; passed on the base, now skipped: divides',
    );
  });

  it('says nothing when no test was lost, and counts only when the names are not printed', () => {
    expect(lostTests(base, tap(['ok 1 - adds', 'ok 2 - subtracts', 'ok 3 - divides', 'ok 4 - new']))).toBeUndefined();
    const plain = parseTestOutput('Tests  5 passed (5)\n');
    const fewer = parseTestOutput('Tests  3 passed (3)\n');
    expect(plain && fewer && lostTests(plain, fewer)).toMatchObject({ fewer: 2, missing: [], more: true });
    expect(lostTests(undefined, base)).toBeUndefined();
  });

  it('tiers: hidden, repository with counts, command without', () => {
    expect(tierOf(true, base)).toBe('hidden');
    expect(tierOf(false, base)).toBe('repository');
    expect(tierOf(false, undefined)).toBe('command');
  });

  it('compares name-value metrics and holds on a regression beyond the threshold, in either direction', () => {
    const before = parseMeasurements('bench: warming up\ntime_ms 100\ncoverage 80.5\n');
    const after = parseMeasurements('time_ms 130\ncoverage 80.5\nnoise line 1 2\n');
    expect([...after]).toEqual([
      ['time_ms', 130],
      ['coverage', 80.5],
    ]);
    const held = compareMeasurements(before, after, { metric: 'time_ms', maxPercent: 10 });
    expect(held.metrics[0]).toEqual({ name: 'time_ms', base: 100, result: 130, changePercent: 30 });
    expect(held.hold).toBe('time_ms regressed 30% (100 → 130; at most 10% allowed, lower-is-better)');
    expect(compareMeasurements(before, after, { metric: 'time_ms', maxPercent: 50 }).hold).toBeUndefined();
    const faster = compareMeasurements(after, before, {
      metric: 'time_ms',
      maxPercent: 10,
      direction: 'higher-is-better',
    });
    expect(faster.hold).toMatch(/^time_ms regressed 23.1%/);
    expect(compareMeasurements(before, new Map(), { metric: 'time_ms', maxPercent: 10 }).hold).toBe(
      'the measure command printed no time_ms for the result',
    );
  });

  it('shows the tier, the base, lost tests, flaky runs and the measurement', () => {
    const lines = evidenceLines({
      tier: 'repository',
      counts: { runner: 'TAP', unit: 'test', passed: 2, failed: 0, skipped: 0, total: 2 },
      base: { sha: 'a'.repeat(40), cached: true, logRef: 'sha256:b', counts: tally(base!) },
      lost: { fewer: 1, missing: ['divides'], skipped: [], more: false },
      flaky: [{ exitCode: 1, timedOut: false, logRef: 'sha256:c' }],
      measure: { metrics: [{ name: 'time_ms', base: 100, result: 90, changePercent: -10 }] },
    });
    expect(lines).toEqual([
      'evidence: repository tests passed: 2 passed, 0 failed (TAP)',
      'base:     3 passed, 0 failed (TAP) at aaaaaaaaaaaa (cached from an earlier run)',
      'LOST TESTS: 1 fewer test(s) than the base; passed on the base, now missing: divides',
      'FLAKY: the tests failed 1 time(s) before passing in a fresh sandbox (failing output: sha256:c)',
      'measure:  time_ms 100 → 90 (-10%)',
    ]);
  });
});
