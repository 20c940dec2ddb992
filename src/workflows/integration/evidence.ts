/**
 * What the integration makes of its passing tests: the evidence tier, the counts against the
 * base's, the flaky runs and the measurement, put in the status and the result; and, under
 * policy.testCount: refuse, the end of the run when the integrated tree lost tests.
 */
import type { TestRun } from '../../activities/integration';
import {
  type Evidence,
  type FlakyRun,
  type MeasureReport,
  compareMeasurements,
  lostLine,
  lostTests,
  parseMeasurements,
  tally,
  tierOf,
} from '../../contracts/evidence';
import type { RunStatus } from '../../contracts/messages';
import type { RunResult } from '../../contracts/reports';
import type { PlannedRequest } from '../../contracts/request';
import type { Failure } from './attempts';

/** The base's test run, as testBase returns it. */
export type BaseRun = TestRun & { cached: boolean };

export interface Weighed {
  req: PlannedRequest;
  /** The final tree's passing run. */
  tests: TestRun;
  base?: BaseRun;
  flaky: FlakyRun[];
  hidden: boolean;
}

/** Puts the evidence in the status and the result; the run's end when it lost tests and the policy refuses that. */
export function weigh(
  w: Weighed,
  into: { baseSha: string; status: RunStatus; result: RunResult },
): Failure | undefined {
  const { req, tests, base } = w;
  const evidence: Evidence = { tier: tierOf(w.hidden, tests.counts) };
  if (tests.counts) evidence.counts = tally(tests.counts);
  if (base) {
    const { cached, logRef, counts } = base;
    evidence.base = { sha: into.baseSha, cached, logRef, ...(counts && { counts: tally(counts) }) };
  }
  const lost = lostTests(base?.counts, tests.counts);
  if (lost) evidence.lost = lost;
  if (w.flaky.length) evidence.flaky = [...w.flaky];
  if (req.measure) evidence.measure = measured(base?.measure, tests.measure, req.measure.holdOnRegression);
  into.status.evidence = into.result.evidence = evidence;
  if (!lost || req.policy.testCount !== 'refuse') return undefined;
  return {
    ok: false,
    outcome: 'tests-removed',
    message: `the integrated tree lost tests against the base (policy.testCount: refuse): ${lostLine(lost)}`,
  };
}

type MeasureRun = TestRun['measure'];

/** The measure command's metrics on the base and the result, side by side; whether a regression holds the push. */
function measured(
  base: MeasureRun,
  result: MeasureRun,
  hold: NonNullable<PlannedRequest['measure']>['holdOnRegression'],
): MeasureReport {
  const problems = (
    [
      ['the base', base],
      ['the result', result],
    ] as const
  ).flatMap(([on, run]) => {
    if (!run) return [`the measure command did not run on ${on}`];
    if (run.timedOut) return [`the measure command timed out on ${on}`];
    return run.exitCode === 0 ? [] : [`the measure command exited with code ${run.exitCode} on ${on}`];
  });
  const report = compareMeasurements(parseMeasurements(base?.tail ?? ''), parseMeasurements(result?.tail ?? ''), hold);
  if (!problems.length) return report;
  // A measurement that could not be made holds the push it was asked to guard.
  return { ...report, problem: problems.join('; '), ...(hold && { hold: report.hold ?? problems.join('; ') }) };
}
