/**
 * Evidence a reviewer can weigh: how strong a pass is (its tier), the integrated tree's tests
 * against the base's (fewer, or passing on the base and now skipped or missing), test runs that
 * failed before one passed (flaky), and an observe-only measurement of base and result.
 *
 * Pure: runs in workflow code, on what activities returned (already in history). Every list is
 * bounded, whatever the test process printed.
 */
import { type TestCounts, formatTestCounts } from './test-summary';

/** hidden: the hidden tests passed. repository: the repository's tests passed, with counts. command: the command passed without counts. */
export type EvidenceTier = 'hidden' | 'repository' | 'command';

/** A run's counts without the names. */
export type TestTally = Omit<TestCounts, 'names'>;

/** Tests the base had that the integrated tree lost. */
export interface LostTests {
  /** How many fewer tests the integrated tree has than the base (0 when not fewer). */
  fewer: number;
  /** Passed on the base, absent from the integrated tree's run (only said when its runner named every test). */
  missing: string[];
  /** Passed on the base, skipped on the integrated tree. */
  skipped: string[];
  /** More were lost than named here (the names were cut, or the runner does not print them). */
  more: boolean;
}

/** The base's test run, made once per base commit and test command (and reused by later runs). */
export interface BaseEvidence {
  sha: string;
  counts?: TestTally;
  /** True when an earlier run's test of this base was reused instead of testing it again. */
  cached: boolean;
  logRef: string;
}

/** A test run that failed before a later one, in a fresh sandbox, passed. */
export interface FlakyRun {
  exitCode: number;
  timedOut: boolean;
  /** Its full output, kept in the artifact store (`flotilla logs`). */
  logRef: string;
}

export type MetricDirection = 'lower-is-better' | 'higher-is-better';

export interface MetricComparison {
  name: string;
  base?: number;
  result?: number;
  /** The result's change against the base, in percent of the base, when both are known and the base is not 0. */
  changePercent?: number;
}

export interface MeasureReport {
  metrics: MetricComparison[];
  /** Why the push is held for a person (a metric regressed beyond holdOnRegression.maxPercent). */
  hold?: string;
  /** The measure command failed on the base or the result: what it said. */
  problem?: string;
}

export interface Evidence {
  tier: EvidenceTier;
  /** The integrated tree's tests, when its runner's output was recognised. */
  counts?: TestTally;
  base?: BaseEvidence;
  /** Set when the integrated tree has fewer tests than the base, or lost some that passed there. */
  lost?: LostTests;
  /** Failing runs of the tests before the one that passed, oldest first. */
  flaky?: FlakyRun[];
  measure?: MeasureReport;
}

/** Lost test names kept, per list. */
export const MAX_LOST_NAMES = 50;
/** Metrics kept of a measure command's output. */
export const MAX_METRICS = 20;

export function tally(counts: TestCounts): TestTally {
  const { names: _names, ...rest } = counts;
  return rest;
}

/** How strong a passing run is: hidden tests took part, or the runner counted tests, or neither. */
export function tierOf(hidden: boolean, counts: TestCounts | undefined): EvidenceTier {
  if (hidden) return 'hidden';
  return counts && counts.total > 0 ? 'repository' : 'command';
}

/** What the integrated tree's run lost against the base's, or undefined when nothing (or nothing comparable). */
export function lostTests(base: TestCounts | undefined, now: TestCounts | undefined): LostTests | undefined {
  if (!base || !now || base.unit !== now.unit) return undefined;
  const fewer = Math.max(0, base.total - now.total);
  const passedBefore = base.names?.passed ?? [];
  const seen = new Set([...(now.names?.passed ?? []), ...(now.names?.failed ?? []), ...(now.names?.skipped ?? [])]);
  const skippedNow = new Set(now.names?.skipped ?? []);
  // A name absent from a cut list may just have been cut: missing only when every test is named.
  const missing = now.names?.complete ? passedBefore.filter((n) => !seen.has(n)) : [];
  const skipped = passedBefore.filter((n) => skippedNow.has(n));
  if (!fewer && !missing.length && !skipped.length) return undefined;
  const named = Math.min(missing.length, MAX_LOST_NAMES) + Math.min(skipped.length, MAX_LOST_NAMES);
  return {
    fewer,
    missing: missing.slice(0, MAX_LOST_NAMES),
    skipped: skipped.slice(0, MAX_LOST_NAMES),
    more: named < Math.max(fewer, missing.length + skipped.length) || !base.names?.complete,
  };
}

/** "10 fewer tests than the base; passed on the base, now missing: a, b; now skipped: c". */
export function lostLine(lost: LostTests): string {
  const parts = [
    ...(lost.fewer ? [`${lost.fewer} fewer test(s) than the base`] : []),
    ...(lost.missing.length ? [`passed on the base, now missing: ${lost.missing.join(', ')}`] : []),
    ...(lost.skipped.length ? [`passed on the base, now skipped: ${lost.skipped.join(', ')}`] : []),
  ];
  return parts.join('; ') + (lost.more ? ' (and possibly more the runner did not name)' : '');
}

const METRIC_LINE = /^\s*([A-Za-z][\w.:/-]{0,63})\s+(-?\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*$/i;

/** A measure command's `name value` lines (the first MAX_METRICS names); other lines are ignored. */
export function parseMeasurements(output: string): Map<string, number> {
  const metrics = new Map<string, number>();
  for (const line of output.split('\n')) {
    const m = METRIC_LINE.exec(line);
    if (!m) continue;
    if (!metrics.has(m[1]) && metrics.size >= MAX_METRICS) continue;
    metrics.set(m[1], Number(m[2]));
  }
  return metrics;
}

export interface HoldOnRegression {
  metric: string;
  maxPercent: number;
  direction?: MetricDirection;
}

/** The base's and the result's metrics side by side, and whether the push is held. */
export function compareMeasurements(
  base: Map<string, number>,
  result: Map<string, number>,
  hold?: HoldOnRegression,
): MeasureReport {
  const names = [...new Set([...base.keys(), ...result.keys()])].slice(0, MAX_METRICS);
  const metrics = names.map((name) => {
    const b = base.get(name);
    const r = result.get(name);
    const change = b !== undefined && r !== undefined && b !== 0 ? ((r - b) / Math.abs(b)) * 100 : undefined;
    return {
      name,
      ...(b !== undefined && { base: b }),
      ...(r !== undefined && { result: r }),
      ...(change !== undefined && { changePercent: Math.round(change * 10) / 10 }),
    };
  });
  const report: MeasureReport = { metrics };
  if (hold) {
    const why = regression(
      metrics.find((m) => m.name === hold.metric),
      hold,
    );
    if (why) report.hold = why;
  }
  return report;
}

function regression(m: MetricComparison | undefined, hold: HoldOnRegression): string | undefined {
  if (!m || m.result === undefined || m.base === undefined)
    return `the measure command printed no ${hold.metric} for the ${m?.base === undefined ? 'base' : 'result'}`;
  const worse = hold.direction === 'higher-is-better' ? -(m.changePercent ?? 0) : (m.changePercent ?? 0);
  if (worse <= hold.maxPercent) return undefined;
  return `${hold.metric} regressed ${worse}% (${m.base} → ${m.result}; at most ${hold.maxPercent}% allowed, ${hold.direction ?? 'lower-is-better'})`;
}

const TIER_WORDS: Record<EvidenceTier, string> = {
  hidden: 'hidden tests passed',
  repository: 'repository tests passed',
  command: 'the test command passed without counts',
};

/** The lines the push gate, `flotilla status` and the Web UI show of the evidence. */
export function evidenceLines(e: Evidence): string[] {
  const counts = e.counts ? `: ${formatTestCounts(e.counts)}` : '';
  const lines = [`evidence: ${TIER_WORDS[e.tier]}${counts}`];
  if (e.base) {
    const was = e.base.counts ? formatTestCounts(e.base.counts) : 'no counts recognised';
    lines.push(`base:     ${was} at ${e.base.sha.slice(0, 12)}${e.base.cached ? ' (cached from an earlier run)' : ''}`);
  }
  if (e.lost) lines.push(`LOST TESTS: ${lostLine(e.lost)}`);
  if (e.flaky?.length)
    lines.push(
      `FLAKY: the tests failed ${e.flaky.length} time(s) before passing in a fresh sandbox (failing output: ${e.flaky.map((f) => f.logRef).join(', ')})`,
    );
  if (e.measure) lines.push(...measureLines(e.measure));
  return lines;
}

function measureLines(m: MeasureReport): string[] {
  const value = (v?: number) => (v === undefined ? '?' : String(v));
  const lines = m.metrics.map((x) => {
    const change = x.changePercent === undefined ? '' : ` (${x.changePercent >= 0 ? '+' : ''}${x.changePercent}%)`;
    return `measure:  ${x.name} ${value(x.base)} → ${value(x.result)}${change}`;
  });
  if (m.problem) lines.push(`measure:  ${m.problem}`);
  if (m.hold) lines.push(`HELD:     ${m.hold}`);
  return lines;
}
