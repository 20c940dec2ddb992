/**
 * What an interrupted attempt of an agent's invocation leaves for the next one: the session the agent
 * reported (so the retry resumes it, and a crash costs one turn rather than the whole invocation) and
 * what the attempts so far have cost and done (so a budget still counts it). Both ride in the activity's
 * heartbeat details, as the `agent` progress of execTracked's heartbeats, and are read back
 * from Context.info.heartbeatDetails by the next attempt.
 */
import type { AgentOutcome, AgentProgress, OutputParser } from './types';

/** What the earlier attempts of this invocation did: their session, and their totals. */
export interface CarryOver {
  sessionId?: string;
  costUsd: number;
  turns: number;
  toolCalls: number;
}

const NOTHING: CarryOver = { costUsd: 0, turns: 0, toolCalls: 0 };

/**
 * A session id as agents report it (a UUID, a thread id). Anything else is dropped: it comes
 * from the agent's output and goes back onto the next command line.
 */
const SESSION_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$/;

export function validSessionId(value: unknown): string | undefined {
  return typeof value === 'string' && SESSION_ID.test(value) ? value : undefined;
}

/** The carry-over in a previous attempt's heartbeat details; nothing for a first attempt. */
export function readCarryOver(details: unknown): CarryOver {
  const agent = (details as { agent?: Partial<AgentProgress> } | undefined)?.agent;
  if (!agent || typeof agent !== 'object') return NOTHING;
  const count = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : 0);
  return {
    sessionId: validSessionId(agent.sessionId),
    costUsd: count(agent.costUsd),
    turns: count(agent.turns),
    toolCalls: count(agent.toolCalls),
  };
}

/**
 * Wraps a harness's parser so that its progress (what heartbeats carry, what a budget is checked
 * against) includes the earlier attempts: their cost, turns and tool calls are added, their
 * session stands until the agent reports one.
 */
export class CarryingParser implements OutputParser {
  constructor(
    private readonly inner: OutputParser,
    private readonly carried: CarryOver,
  ) {}

  push(chunk: string): void {
    this.inner.push(chunk);
  }

  progress(): AgentProgress {
    return this.carry(this.inner.progress());
  }

  finish(exitCode: number): AgentOutcome {
    return this.carry(this.inner.finish(exitCode));
  }

  private carry<T extends AgentProgress>(own: T): T {
    return {
      ...own,
      costUsd: this.carried.costUsd + own.costUsd,
      turns: this.carried.turns + own.turns,
      toolCalls: this.carried.toolCalls + own.toolCalls,
      sessionId: validSessionId(own.sessionId) ?? this.carried.sessionId,
    };
  }
}
