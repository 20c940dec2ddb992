/** Lines that both a run's status and its end show: integration attempts, refusals, where a sandbox lives. */
import type { IntegrationReport, Refusal } from '../../contracts/reports';
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
