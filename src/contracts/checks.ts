/**
 * Checks after the push (land: pr with checks): what the run saw of the forge's checks on each
 * commit it pushed, and its CI-fix rounds. A CI-fix agent maps every failing check it was given
 * to a fix or to "external" with a reason, in a file the host reads and validates
 * (activities/ci-fix.ts). Pure: workflow code imports it. Small: it lives in workflow history.
 */

/** The file, in the CI-fix agent's scratch directory ($FLOTILLA_CI_FIX_FILE), that holds its mapping. */
export const CI_FIX_FILE = 'ci-fix.json';

/** Conclusions that pass a check; any other conclusion of a completed check fails it. */
export const PASSING_CONCLUSIONS = ['success', 'neutral', 'skipped'];

/** What one check's failure was put down to: a change the agent made, or a cause outside the repository. */
export type Attribution = { fix: string } | { external: string };

/** A check's name to its attribution; every check the round was given is in it. */
export type CiFixMapping = Record<string, Attribution>;

/** What the host made of the mapping file: the mapping, or why it was refused. */
export type CiFixVerdict = { mapping: CiFixMapping } | { problem: string };

/** A failing check as the CI-fix agent is told it: its text is the CI's, untrusted. */
export interface FailingCheck {
  name: string;
  conclusion: string;
  detailsUrl?: string;
  logExcerpt?: string;
}

/** One check on a pushed commit, as the run last read it. */
export interface CheckOutcome {
  name: string;
  /** The check's conclusion once completed; pending while it runs (or when the wait timed out). */
  conclusion: string;
  passed: boolean;
  required?: boolean;
  detailsUrl?: string;
  /** What the CI-fix round that was given it put it down to. */
  attribution?: Attribution;
}

export interface CiFixRound {
  round: number;
  /** The commit whose checks failed, and the checks the round was given. */
  sha: string;
  checks: string[];
  /** The sub-task that took the round, and its attempt. */
  subTaskId: string;
  attemptId?: string;
  /** refused: the mapping was missing or invalid; nothing was pushed. */
  outcome?: 'pushed' | 'unchanged' | 'failed' | 'refused';
  message?: string;
  mapping?: CiFixMapping;
  pushedSha?: string;
  costUsd?: number;
}

export interface ChecksReport {
  /** The last commit pushed, whose checks `checks` are. */
  headSha: string;
  checks: CheckOutcome[];
  /** While the run waits for the checks of headSha. */
  waiting: boolean;
  rounds: CiFixRound[];
  maxRounds: number;
  /** How the wait ended: the checks passed, failed with no round left, were attributed external, or timed out. */
  ended?: string;
}

/** One line per check: "ci/test: failure (required; external: the runner was down)". */
export function checkLine(c: CheckOutcome): string {
  const by =
    c.attribution && ('fix' in c.attribution ? `fixed: ${c.attribution.fix}` : `external: ${c.attribution.external}`);
  const notes = [c.required === undefined ? undefined : c.required ? 'required' : 'not required', by].filter(Boolean);
  return `${c.name}: ${c.conclusion}${notes.length ? ` (${notes.join('; ')})` : ''}`;
}
