/**
 * The Web UI's current details of a running living plan: the integration head and how to fetch
 * it, what waits and why, what was left out, and the latest amendments with who sent them. Pure:
 * no workflow APIs, so the unit tests call it directly.
 */
import type { RunStatus } from '../../contracts/messages';

/** Lines each list shows at most: the status has them all. */
const SHOWN = 8;

export function planDetails(s: RunStatus): string {
  const lines: string[] = [];
  if (s.head)
    lines.push(
      `**Integration head**: \`${s.head.ref}\` at ${s.head.sha} (${s.workers.filter((w) => w.integrated).length} sub-task(s) integrated); fetch it from the staging repository or the shared store: \`git fetch <store> ${s.head.ref}\``,
    );
  const waiting = s.workers.filter((w) => w.state === 'queued' && w.waits);
  if (waiting.length) lines.push('**Waiting**:', ...listed(waiting.map((w) => `${w.id}: ${w.waits}`)));
  if (s.dropped?.length) lines.push('**Left out**:', ...listed(s.dropped.map((d) => `${d.id}: ${d.reason}`)));
  const amendments = s.amendments ?? [];
  if (amendments.length)
    lines.push(
      `**Amendments** (${s.amendedCount ?? amendments.length}):`,
      ...listed(
        amendments
          .slice()
          .reverse()
          .map(
            (a) =>
              `${a.kind} ${a.subTaskId} by ${a.by} at ${new Date(a.at).toISOString()}${a.note ? `: ${a.note}` : ''}`,
          ),
      ),
    );
  return lines.join('\n');
}

function listed(items: string[]): string[] {
  const shown = items.slice(0, SHOWN).map((i) => `- ${i}`);
  return items.length > SHOWN ? [...shown, `- and ${items.length - SHOWN} more (flotilla status)`] : shown;
}
