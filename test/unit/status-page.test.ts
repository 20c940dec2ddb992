/** The status of a large run, one page of sub-task lines at a time (issue 19). */
import { describe, expect, it } from 'vitest';
import { defaultPayloadConverter } from '@temporalio/common';
import {
  type GateReview,
  type SubTaskStatus,
  STATUS_LINES_INLINE,
  pageOfLines,
  pageOfPlanRows,
  statusPageOf,
} from '../../src/contracts/messages';

/** A finished line as full as a run makes them: host, checkpoint, a long reason. */
const line = (i: number): SubTaskStatus => ({
  id: `sub-task-with-a-long-name-${i}`,
  state: i % 7 === 0 ? 'failed' : 'done',
  reason: i % 7 === 0 ? 'x'.repeat(1000) : undefined,
  commits: 1,
  filesChanged: 1,
  costUsd: 0.12,
  turns: 9,
  startedAt: 1_760_000_000_000,
  durationMs: 61_234,
  host: 'worker-host-0123456789',
  checkpoint: { sha: 'a'.repeat(40), at: 1_760_000_000_000 } as unknown as SubTaskStatus['checkpoint'],
  reprovisions: 0,
  integrated: true,
});

describe('the status query at 1,000 sub-tasks', () => {
  const lines = Array.from({ length: 1000 }, (_, i) => line(i));

  it('carries every line of a run of up to a hundred, as before, with no page', () => {
    const few = lines.slice(0, STATUS_LINES_INLINE);
    expect(pageOfLines(few, undefined)).toEqual({ workers: few });
  });

  it('carries the first page of a larger run, saying so, under 64 KiB', () => {
    const { workers, workersPage } = pageOfLines(lines, undefined);
    expect(workers.map((w) => w.id)).toEqual(lines.slice(0, 50).map((w) => w.id));
    expect(workersPage).toEqual({ page: 1, pageSize: 50, pages: 20, matching: 1000, total: 1000 });
    expect(defaultPayloadConverter.toPayload({ workers, workersPage })!.data!.length).toBeLessThan(64 * 1024);
  });

  it('pages the lines of one state', () => {
    const { workers, workersPage } = pageOfLines(lines, { state: 'failed', page: 2, pageSize: 50 });
    expect(workers.map((w) => w.id)).toEqual(
      lines
        .filter((w) => w.state === 'failed')
        .slice(50, 100)
        .map((w) => w.id),
    );
    expect(workersPage).toEqual({ state: 'failed', page: 2, pageSize: 50, pages: 3, matching: 143, total: 1000 });
  });

  it.each([
    ['nothing', null],
    ['a string', 'page 2'],
    ['an unknown state', { state: 'exploded' }],
    ['a page of zero and a fractional size', { page: 0, pageSize: 2.5 }],
  ])('reads %s as the first page of everything, never throwing', (_what, input) => {
    expect(statusPageOf(input)).toEqual({ page: 1, pageSize: 50 });
  });

  it('caps the page size at fifty lines, and a page of the longest lines still fits one payload', () => {
    expect(statusPageOf({ pageSize: 10_000 }).pageSize).toBe(50);
    const worst = lines.map((w) => ({
      ...w,
      state: 'failed' as const,
      reason: 'é'.repeat(1000),
      question: '"'.repeat(5000),
    }));
    const page = pageOfLines(worst, { state: 'failed', pageSize: 10_000 });
    expect(page.workers).toHaveLength(50);
    expect(defaultPayloadConverter.toPayload(page)!.data!.length).toBeLessThan(64 * 1024);
  });
});

describe('the plan gate of 1,000 sub-tasks', () => {
  const row = (i: number) => ({
    id: `sub-task-with-a-long-name-${i}`,
    ownedPaths: [`src/module-${i}/`, `test/module-${i}/`],
    agent: 'claude-code',
    prompt: `Refactor module ${i}: `.padEnd(200, 'x'),
    dependsOn: i > 0 ? [`sub-task-with-a-long-name-${i - 1}`] : undefined,
  });
  const gate = (n: number): GateReview => ({
    gate: 'plan',
    openedAt: 1,
    expiresAt: 2,
    onTimeout: 'fail',
    refused: [],
    plan: Array.from({ length: n }, (_, i) => row(i)),
  });

  it('shows every row of a plan of up to a hundred', () => {
    const small = gate(STATUS_LINES_INLINE);
    expect(pageOfPlanRows(small, undefined)).toBe(small);
  });

  it('shows one page of a larger plan, saying which, under 64 KiB', () => {
    const shown = pageOfPlanRows(gate(1000), { page: 3 });
    expect(shown.plan!.map((r) => r.id)).toEqual(
      gate(1000)
        .plan!.slice(100, 150)
        .map((r) => r.id),
    );
    expect(shown.planPage).toEqual({ page: 3, pageSize: 50, pages: 20, matching: 1000, total: 1000 });
    expect(defaultPayloadConverter.toPayload(pageOfPlanRows(gate(1000), undefined))!.data!.length).toBeLessThan(
      64 * 1024,
    );
  });
});
