/**
 * The pull request's title and body, written by Flotilla from what the run did: the objective,
 * the plan with each sub-task's summary and cost, the tests at the tested commit, what was left
 * out, the review rounds taken, the attempts that failed, and where the run is. Pure: the same facts give the same body.
 */
import type { ChecksReport } from '../contracts/checks';
import { clip } from '../contracts/text';

/** What the body says; every text in it is bounded by the run's own payload limits. */
export interface PullRequestFacts {
  runId: string;
  objective: string;
  /** The tested (integrated) commit the PR's branch was pushed at. */
  sha: string;
  subTasks: { id: string; status: string; costUsd: number; summary?: string; reason?: string }[];
  testSummary?: string;
  dropped?: { id: string; reason: string }[];
  costUsd: number;
  /** The issue the run was started from, which the PR closes; `repo` when it is in another repository. */
  issue?: { number: number; repo?: string };
  /** The review rounds taken so far (review on the PR), each with what it did. */
  rounds?: { round: number; comments: number; outcome: string; message: string }[];
  /** The checks on the last push and the CI-fix rounds (land.checks). */
  checks?: ChecksReport;
}

/** GitHub refuses bodies over 65,536 characters. */
const BODY_CHARS = 60_000;
const OBJECTIVE_CHARS = 4_000;

/**
 * The body. Text that agents or people wrote (summaries, reasons, the objective) is quoted, and
 * its @-mentions defused, so that it cannot ping anyone or pass for Flotilla's own words.
 */
export function pullRequestBody(facts: PullRequestFacts, webUiUrl?: string): string {
  const { runId, sha, subTasks } = facts;
  const attempts = subTasks.filter((t) => t.status !== 'done');
  const sections = [
    ...(facts.issue ? [`Closes ${facts.issue.repo ?? ''}#${facts.issue.number}`, ''] : []),
    '## Objective',
    quote(clip(facts.objective, OBJECTIVE_CHARS)),
    '',
    `## Plan (${subTasks.filter((t) => t.status === 'done').length} sub-task(s) integrated, $${facts.costUsd.toFixed(2)} in all)`,
    '| sub-task | outcome | cost |',
    '| --- | --- | --- |',
    ...subTasks.map((t) => `| \`${cell(t.id)}\` | ${t.status} | $${t.costUsd.toFixed(2)} |`),
    '',
    ...subTasks.filter((t) => t.summary).flatMap((t) => [`**${cell(t.id)}**`, quote(t.summary!), '']),
    `## Tests at \`${sha}\``,
    '```',
    (facts.testSummary ?? 'passed').replace(/```/g, "'''"),
    '```',
    '',
    ...checksSection(facts.checks),
    ...(facts.dropped?.length
      ? ['## Left out', ...facts.dropped.map((d) => `- \`${cell(d.id)}\`: ${inline(d.reason)}`), '']
      : []),
    ...(facts.rounds?.length
      ? [
          `## Review rounds (${facts.rounds.length})`,
          ...facts.rounds.map(
            (r) => `- round ${r.round}, ${r.comments} comment(s): ${r.outcome}: ${inline(r.message)}`,
          ),
          '',
        ]
      : []),
    ...(attempts.length
      ? [
          '## Attempts that failed (a later attempt may have passed: see the plan)',
          ...attempts.map((t) => `- \`${cell(t.id)}\`: ${inline(t.reason ?? t.status)}`),
          '',
        ]
      : []),
    '---',
    `Opened by Flotilla, run \`${cell(runId)}\`${webUiUrl ? ` ([Web UI](${webUiUrl}))` : ''}: \`flotilla status ${shellWord(runId)}\``,
  ];
  return clip(sections.join('\n'), BODY_CHARS);
}

/**
 * Each check's outcome on the last push, and each CI-fix round with how its agent mapped the
 * checks. Names and reasons come from the CI and the agent: cells and inline text, defused.
 */
function checksSection(checks: ChecksReport | undefined): string[] {
  if (!checks) return [];
  const state = checks.waiting ? 'waiting' : (checks.ended ?? 'read');
  const rows = checks.checks.map((c) => {
    const by =
      c.attribution && ('fix' in c.attribution ? `fixed: ${c.attribution.fix}` : `external: ${c.attribution.external}`);
    return `| \`${cell(c.name)}\` | ${cell(c.conclusion)} | ${c.required === undefined ? '' : c.required ? 'yes' : 'no'} | ${by ? inline(cell(by)) : ''} |`;
  });
  const rounds = checks.rounds.map(
    (r) =>
      `- CI-fix round ${r.round} on \`${cell(r.checks.join(', '))}\`: ${r.outcome ?? 'running'}${r.message ? `, ${inline(r.message)}` : ''}`,
  );
  return [
    `## Checks on \`${checks.headSha}\` (${inline(state)})`,
    ...(rows.length
      ? ['| check | outcome | required | attributed |', '| --- | --- | --- | --- |', ...rows]
      : ['No check reported yet.']),
    ...(rounds.length ? ['', ...rounds] : []),
    '',
  ];
}

/** Untrusted text as a block quote, its mentions defused. */
function quote(text: string): string {
  return defuse(text)
    .split('\n')
    .map((l) => `> ${l}`)
    .join('\n');
}

/** Untrusted text on one line. */
function inline(text: string): string {
  return defuse(text).replace(/\s+/g, ' ').trim();
}

/** A table cell or code span: no pipes, backticks or line breaks. */
function cell(text: string): string {
  return text.replace(/[|`\n\r]/g, ' ');
}

/** "@name" would notify name: a zero-width joiner after the @ keeps the text and drops the ping. */
function defuse(text: string): string {
  return text.replace(/@(?=[A-Za-z0-9])/g, '@\u200d');
}

function shellWord(text: string): string {
  return /^[A-Za-z0-9._:/-]+$/.test(text) ? text : `'${text.replace(/'/g, `'\\''`)}'`;
}
