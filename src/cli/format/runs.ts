/** `flotilla list` as a table. */
import type { RunRow } from '../../client/list';
import { oneLine } from '../terminal';
import { usd } from './units';

/** One row per run, columns aligned. */
export function formatRuns(rows: RunRow[]): string {
  if (!rows.length) return 'No runs.';
  const table = [
    ['RUN', 'PHASE', 'AWAITING', 'OUTCOME', 'COST', 'REPO', 'STARTED'],
    ...rows.map((r) =>
      [
        r.id,
        r.phase ?? r.execution.toLowerCase(),
        r.awaiting ?? '-',
        r.outcome ?? '-',
        r.costUsd === undefined ? '-' : usd(r.costUsd),
        r.repo ?? (r.note ? `(${r.note})` : '-'),
        r.startedAt.replace('T', ' ').slice(0, 19),
      ].map(oneLine),
    ),
  ];
  const widths = table[0].map((_, c) => Math.max(...table.map((row) => row[c].length)));
  return table
    .map((row) => row.map((cell, c) => (c === row.length - 1 ? cell : cell.padEnd(widths[c]))).join('  '))
    .join('\n');
}
