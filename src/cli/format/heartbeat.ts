/** A running agent's heartbeat as one line of `flotilla watch`'s live view. */
import { usd } from './units';

/** A heartbeat's details as one line; anything may be missing, so nothing is assumed. */
export function heartbeatLine(subTaskId: string, beat: unknown): string {
  const b = (beat && typeof beat === 'object' ? beat : {}) as { label?: unknown; lastLine?: unknown; agent?: unknown };
  const a = (b.agent && typeof b.agent === 'object' ? b.agent : undefined) as Record<string, unknown> | undefined;
  const num = (x: unknown) => (typeof x === 'number' && Number.isFinite(x) ? x : 0);
  const text = (x: unknown) => (typeof x === 'string' ? x : undefined);
  const agent = a ? ` ${num(a.turns)} turns, ${num(a.toolCalls)} tool calls, ${usd(num(a.costUsd))}` : '';
  const last = text(a?.lastEvent) ?? text(b.lastLine) ?? '';
  return `  ${subTaskId}: ${text(b.label) ?? 'working'}${agent}${last ? ` — ${last}` : ''}`;
}
