/**
 * Lines that both a run's status and its end show: integration attempts, the integration head,
 * what was left out, amendments, refusals, where a sandbox lives.
 */
import type {
  Amendment,
  CandidateResult,
  Dropped,
  IntegrationHead,
  IntegrationReport,
  Refusal,
} from '../../contracts/reports';
import { isoTime } from '../../contracts/text';
import { usd } from './units';

/** Resolver, re-dispatch and repair attempts, one line each. */
export function formatAttempts(report: IntegrationReport | undefined): string[] {
  if (!report?.attempts.length) return [];
  return [
    'integration attempts:',
    ...report.attempts.map((a) => {
      const who = a.workerId ? ` ${a.workerId}` : '';
      const files = a.files?.length ? ` in ${a.files.join(', ')}` : '';
      return `  ${a.kind}${who} round ${a.round}${files}: ${a.state} (${usd(a.costUsd)})${a.reason ? ` — ${a.reason}` : ''}`;
    }),
  ];
}

export function formatRefusals(refusals: Refusal[] | undefined, count: number | undefined): string[] {
  if (!refusals?.length) return [];
  const older = (count ?? 0) - refusals.length;
  return [
    `refused messages: ${count}${older > 0 ? ` (the latest ${refusals.length} shown)` : ''}`,
    ...refusals.map((r) => `  ${isoTime(r.at)} ${r.message} from ${r.by}: ${r.reason}`),
  ];
}

/** Where a sub-task's sandbox lives and when its work was last saved: "on host-b, checkpoint 14:03:10 UTC (1a2b3c4d5e6f), moved 1 time(s)". */
export function placement(w: {
  host?: string;
  checkpoint?: { sha: string; at: number };
  reprovisions?: number | unknown[];
}): string | undefined {
  if (!w.host) return undefined;
  const moved = Array.isArray(w.reprovisions) ? w.reprovisions.length : (w.reprovisions ?? 0);
  const saved = w.checkpoint
    ? `, checkpoint ${isoTime(w.checkpoint.at).slice(11, 19)} UTC (${w.checkpoint.sha.slice(0, 12)})`
    : '';
  return `on ${w.host}${saved}${moved ? `, moved to another host ${moved} time(s)` : ''}`;
}

/** The integration head, and the command that fetches it (`from`: the staging repository or the shared store). */
export function formatHead(head: IntegrationHead | undefined, integrated: number, from?: string): string[] {
  if (!head) return [];
  return [
    `head:      ${head.ref} at ${head.sha} (${integrated} sub-task(s) integrated)`,
    `  fetch:   git fetch ${from ?? '<staging repository>'} ${head.ref}:${head.ref}`,
  ];
}

/** Sub-tasks that will not be in the pushed commit, and why. */
export function formatDropped(dropped: Dropped[] | undefined): string[] {
  if (!dropped?.length) return [];
  return ['left out:', ...dropped.map((d) => `  ${d.id}: ${d.reason}`)];
}

/** Every candidate of the best-of-N sub-tasks: how its trial ended, its size and cost, where it is kept. */
export function formatCandidates(candidates: CandidateResult[] | undefined): string[] {
  if (!candidates?.length) return [];
  const width = Math.max(...candidates.map((c) => c.id.length));
  return ['candidates:', ...candidates.map((c) => `  ${candidateLine(c, width)}`)];
}

/** One candidate: "x.candidate2  selected  shell, $0.02, 3 line(s) at refs/…". */
export function candidateLine(c: CandidateResult, width = 0): string {
  const outcome = c.selected ? 'selected' : (c.outcome ?? 'running');
  const size = c.linesChanged === undefined ? '' : `, ${c.linesChanged} line(s)`;
  const why = c.reason ? ` — ${c.reason}` : '';
  const ref = c.ref ? ` at ${c.ref}` : '';
  return `${c.id.padEnd(width)}  ${outcome.padEnd(8)}  ${c.agent}, ${usd(c.costUsd)}${size}${ref}${why}`;
}

export function formatAmendments(amendments: Amendment[] | undefined, count: number | undefined): string[] {
  if (!amendments?.length) return [];
  const older = (count ?? 0) - amendments.length;
  return [
    `amendments: ${count ?? amendments.length}${older > 0 ? ` (the latest ${amendments.length} shown)` : ''}`,
    ...amendments.map(
      (a) => `  ${new Date(a.at).toISOString()} ${a.kind} ${a.subTaskId} by ${a.by}${a.note ? `: ${a.note}` : ''}`,
    ),
  ];
}
