/** `flotilla list`'s filters, checked before anything connects. */
import type { ListFilters } from '../client/list';
import { AWAITING, OUTCOMES, PHASES } from '../contracts/search-attributes';

/** Checks the values of the filters (bad ones are the caller's mistake); returns the problem, if any. */
export function filterProblem(filters: ListFilters): string | undefined {
  const among = (name: string, value: string | undefined, allowed: readonly string[]) =>
    value !== undefined && !allowed.includes(value)
      ? `${name} must be one of ${allowed.join(', ')} (got "${value}")`
      : undefined;
  return (
    among('--awaiting', filters.awaiting, [...AWAITING.filter((a) => a !== 'none'), 'any']) ??
    among('--phase', filters.phase, PHASES) ??
    among('--outcome', filters.outcome, OUTCOMES) ??
    (filters.repo === '' ? '--repo must not be empty' : undefined)
  );
}
