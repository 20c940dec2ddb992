/** How a run ended, as `start --wait`, `result`, `watch` and `cancel` print it. */
import { formatChecks } from './checks';
import type { RunEnd } from '../../client/result';
import type { SubTaskReport } from '../../contracts/reports';
import { printableLines } from '../terminal';
import {
  formatAmendments,
  formatAttempts,
  formatCandidates,
  formatDropped,
  formatHead,
  formatRefusals,
  placement,
} from './lines';
import { formatReview } from './review';
import { usd } from './units';

export function formatRunEnd(end: RunEnd): string {
  const r = end.result;
  const lines: string[] = [];
  if (end.failureType) lines.push(`Run ${end.workflowId} did not push (${end.failureType}): ${end.failureMessage}`);
  else lines.push(`Run ${end.workflowId}: ${r?.outcome} — ${r?.message}`);
  if (!r) return printableLines(lines);
  if (r.continues) lines.push(`  continues ${r.continues}, reusing its integrated and finished work`);
  if (r.issue) lines.push(`  issue #${r.issue.number}: ${r.issue.url}`);
  if (r.pullRequest)
    lines.push(
      `  pull request #${r.pullRequest.number}: ${r.pullRequest.url} (${r.pullRequest.branch} into ${r.pullRequest.base})`,
    );
  lines.push(...formatChecks(r.checks).map((l) => `  ${l}`));
  for (const w of r.workers) lines.push(...subTaskLines(w));
  if (r.workersOmitted)
    lines.push(
      `  … and ${r.workersOmitted.count} more of ${r.workersOmitted.total} sub-tasks, which no worker could read back now: ` +
        `\`flotilla result ${end.workflowId}\` once one runs`,
    );
  lines.push(...formatCandidates(r.candidates).map((l) => `  ${l}`));
  lines.push(...formatDropped(r.dropped).map((l) => `  ${l}`));
  if (r.outcome !== 'pushed' && r.outcome !== 'pr-opened')
    lines.push(...formatHead(r.head, r.head?.integrated.length ?? 0).map((l) => `  ${l}`));
  lines.push(...formatAmendments(r.amendments, r.amendments?.length).map((l) => `  ${l}`));
  lines.push(...formatAttempts(r.integration));
  if (r.conflict)
    lines.push(
      `  conflict: ${r.conflict.workerId} vs ${r.conflict.conflictsWith.join(', ') || '?'} in ${r.conflict.files.join(', ')}`,
    );
  if (r.test && r.outcome !== 'pushed' && r.outcome !== 'pr-opened')
    lines.push(`  test output (tail; full log ${r.test.logRef}):`, ...quoted(r.test.tail));
  for (const d of r.decisions ?? []) {
    const verdict = d.expired
      ? `expired (${d.approved ? 'approved' : 'failed'})`
      : d.approved
        ? 'approved'
        : 'rejected';
    lines.push(`  ${d.gate} gate ${verdict} by ${d.by}${d.comment ? `: ${d.comment}` : ''}`);
  }
  lines.push(...formatRefusals(r.refusals, r.refusedCount).map((l) => `  ${l}`));
  lines.push(...formatReview(r.review).map((l) => `  ${l}`));
  if (r.costUsd) lines.push(`  agents cost ${usd(r.costUsd)}`);
  if (r.pushedSha) lines.push(`  pushed ${r.pushedSha} to ${r.targetRef}`);
  return printableLines(lines);
}

/** A sub-task's report: how it ended, what was salvaged of it, where its sandbox went. */
function subTaskLines(w: SubTaskReport): string[] {
  const lines = [
    `  sub-task ${w.workerId}: ${w.status}, ${w.commits} commit(s), ${w.filesChanged} file(s), isolation ${w.isolation}${w.reason ? ` — ${w.reason}` : ''}`,
  ];
  const s = w.salvaged;
  if (s)
    lines.push(
      `    salvaged: ${s.commits} unverified commit(s) at ${s.ref} (${s.headSha.slice(0, 12)}) in its host's staging repository`,
    );
  if (w.salvageFailed) lines.push(`    not salvaged: ${w.salvageFailed}`);
  const where = placement(w);
  if (where) lines.push(`    ${where}`);
  for (const m of w.reprovisions ?? [])
    lines.push(
      `    re-provisioned from ${m.from} on ${m.to}${m.fromCheckpoint ? ` at checkpoint ${m.fromCheckpoint.slice(0, 12)}` : ' from the start'}: ${m.reason}`,
    );
  return lines;
}

/** Output a command printed, each of its lines marked as quoted. */
function quoted(text: string): string[] {
  return text
    .trimEnd()
    .split('\n')
    .map((l) => `    | ${l}`);
}
