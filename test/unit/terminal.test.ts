/**
 * The CLI's live views, drawn into a fake terminal or pipe: what changes is redrawn in place on a
 * terminal, one line per change elsewhere, agent text made inert; and the figures they show.
 */
import { describe, expect, it } from 'vitest';
import { heartbeatLine } from '../../src/cli/format/heartbeat';
import { usd } from '../../src/cli/format/units';
import { ChangeLog, InPlaceView } from '../../src/cli/terminal';

describe('live views', () => {
  function sink(isTTY = true) {
    const writes: string[] = [];
    return { writes, out: { isTTY, columns: 40, rows: 20, write: (t: string) => writes.push(t) } };
  }

  it('a terminal view rewrites only the lines that changed, and clears what is gone', () => {
    const { writes, out } = sink();
    const view = new InPlaceView(out);
    view.draw(['phase: running', 'worker a: running', 'worker b: running']);
    view.draw(['phase: running', 'worker a: done', 'worker b: running']);
    expect(writes[1]).toBe('\x1b[3A\r\n\x1b[2Kworker a: done\n\n');
    view.draw(['phase: done']);
    expect(writes[2]).toBe('\x1b[3A\r\x1b[2Kphase: done\n\x1b[J');
  });

  it('a terminal view cuts long lines and makes agent text inert', () => {
    const { writes, out } = sink();
    new InPlaceView(out).draw([`question: ${'x'.repeat(100)}`, 'last: \x1b]0;owned\x07\x1b[2Jok']);
    expect(writes[0]).toBe(`\x1b[2Kquestion: ${'x'.repeat(29)}\n\x1b[2Klast: ]0;owned[2Jok\n`);
  });

  it('without a terminal, one line per change', () => {
    const { writes, out } = sink(false);
    const log = new ChangeLog(out, () => new Date('2026-12-01T08:00:00Z'));
    log.update([
      ['phase', 'phase: running'],
      ['worker a', 'worker a: running'],
    ]);
    log.update([
      ['phase', 'phase: running'],
      ['worker a', 'worker a: done'],
    ]);
    expect(writes).toEqual(['08:00:00 phase: running\n', '08:00:00 worker a: running\n', '08:00:00 worker a: done\n']);
  });

  it('a heartbeat without details, or with odd ones, still makes a line', () => {
    expect(heartbeatLine('api', undefined)).toBe('  api: working');
    expect(heartbeatLine('api', null)).toBe('  api: working');
    expect(heartbeatLine('api', { agent: {} })).toBe('  api: working 0 turns, 0 tool calls, $0.00');
    expect(
      heartbeatLine('api', {
        label: 'agent',
        lastLine: 'npm test',
        agent: { turns: 3, toolCalls: 5, costUsd: 0.0123 },
      }),
    ).toBe('  api: agent 3 turns, 5 tool calls, $0.012 — npm test');
  });

  it('costs under a dollar keep their cents', () => {
    expect([0, 0.00004, 0.0042, 0.05, 0.5, 1, 12.345].map(usd)).toEqual([
      '$0.00',
      '<$0.0001',
      '$0.0042',
      '$0.050',
      '$0.500',
      '$1.00',
      '$12.35',
    ]);
  });
});
