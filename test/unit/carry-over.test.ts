/** What a retried agent activity takes over from the heartbeat an interrupted attempt left. */
import { describe, expect, it } from 'vitest';
import { readCarryOver } from '../../src/agents/carry-over';

describe('carry-over between attempts', () => {
  it('reads the session and totals an interrupted attempt left in its heartbeat, and nothing else', () => {
    expect(
      readCarryOver({ label: 'agent w1', agent: { sessionId: 'a1b2-c3', costUsd: 0.5, turns: 2, toolCalls: 3 } }),
    ).toEqual({
      sessionId: 'a1b2-c3',
      costUsd: 0.5,
      turns: 2,
      toolCalls: 3,
    });
    const nothing = { sessionId: undefined, costUsd: 0, turns: 0, toolCalls: 0 };
    for (const hostile of [
      undefined,
      null,
      'x',
      7,
      { agent: 'x' },
      { agent: { sessionId: '--help', costUsd: -1, turns: Number.NaN, toolCalls: '3' } },
    ]) {
      expect({ sessionId: undefined, ...readCarryOver(hostile) }).toEqual(nothing);
    }
    expect(readCarryOver({ agent: { sessionId: "x'; rm -rf /" } }).sessionId).toBeUndefined();
  });
});
