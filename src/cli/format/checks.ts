/** The PR's checks and CI-fix rounds (land.checks), as `flotilla status`, `watch` and a run's end show them. */
import { type ChecksReport, checkLine } from '../../contracts/checks';

export function formatChecks(checks: ChecksReport | undefined): string[] {
  if (!checks) return [];
  const state = checks.waiting ? 'waiting' : (checks.ended ?? 'read');
  const taken = `${checks.rounds.length} of ${checks.maxRounds} CI-fix round(s)`;
  return [
    `checks:    on ${checks.headSha}: ${state} (${taken})`,
    ...checks.checks.map((c) => `  ${checkLine(c)}`),
    ...checks.rounds.map(
      (r) =>
        `  CI-fix round ${r.round} (${r.checks.join(', ')}): ${r.outcome ?? 'running'}${r.message ? ` — ${r.message}` : ''}`,
    ),
  ];
}
