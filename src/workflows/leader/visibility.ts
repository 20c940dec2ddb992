/**
 * Keeps a leader's search attributes (src/contracts/search-attributes.ts) current, so the Web UI and
 * `flotilla list` can filter runs by repository, phase, outcome and who they wait for.
 *
 * The attributes are derived from the run's status alone, and a watcher re-derives them after
 * every change the workflow makes to it: phases set by integration, a sub-task suspended by the
 * inbox, a gate opening... are published without each of those places having to say so. Each
 * upsert is a history event, so one is made only when something a filter reads has changed (the
 * cost rides along, refreshed at those moments and whenever a sub-task ends).
 */
import { CancellationScope, condition, upsertSearchAttributes } from '@temporalio/workflow';
import type { SearchAttributeUpdatePair } from '@temporalio/common';
import {
  FlotillaAwaiting,
  FlotillaContinues,
  FlotillaCostUsd,
  FlotillaOutcome,
  FlotillaPhase,
  FlotillaRepo,
  FlotillaTargetRef,
  awaitingOf,
} from '../../contracts/search-attributes';
import type { RunStatus } from '../../contracts/messages';

/** Temporal refuses a search attribute value over 2 KB: a longer URL or ref is clipped, not fatal. */
const KEYWORD_MAX_CHARS = 500;

function keyword(value: string): string {
  return value.length <= KEYWORD_MAX_CHARS ? value : value.slice(0, KEYWORD_MAX_CHARS);
}

function searchable(status: RunStatus) {
  return {
    repo: status.repo && keyword(status.repo),
    targetRef: status.targetRef && keyword(status.targetRef),
    phase: status.phase,
    awaiting: awaitingOf(status),
    outcome: status.outcome ?? (status.phase === 'cancelled' ? 'cancelled' : undefined),
    ended: status.workers.filter((w) => ['done', 'failed', 'cancelled', 'dropped'].includes(w.state)).length,
    // Only runs that continue another have it (a living plan's), so older runs upsert as they did.
    continues: status.continues && keyword(status.continues),
  };
}

/**
 * Starts the watcher; returns `publish`, which upserts at once if anything changed. The leader
 * calls it last, as it ends, since the watcher may not get another turn before the run closes.
 */
export function keepSearchAttributesCurrent(status: RunStatus, spent: () => number): () => void {
  let last = '';
  const current = () => JSON.stringify(searchable(status));
  const publish = () => {
    const now = current();
    if (now === last) return;
    last = now;
    const s = searchable(status);
    const updates: SearchAttributeUpdatePair[] = [
      { key: FlotillaPhase, value: s.phase },
      { key: FlotillaAwaiting, value: s.awaiting },
      { key: FlotillaCostUsd, value: Math.round(spent() * 10_000) / 10_000 },
    ];
    if (s.repo) updates.push({ key: FlotillaRepo, value: s.repo });
    if (s.targetRef) updates.push({ key: FlotillaTargetRef, value: s.targetRef });
    if (s.outcome) updates.push({ key: FlotillaOutcome, value: s.outcome });
    if (s.continues) updates.push({ key: FlotillaContinues, value: s.continues });
    upsertSearchAttributes(updates);
  };
  // Not cancellable: a cancelled run still publishes its end, and the watcher's wait must not
  // reject into nowhere when the run is cancelled.
  void CancellationScope.nonCancellable(async () => {
    for (;;) {
      await condition(() => current() !== last);
      publish();
    }
  });
  return publish;
}
