/**
 * The pure parts of the agent harnesses: what a shell agent is given, how its progress lines are
 * read, and what an interrupted attempt hands the next. (Each harness driving its real CLI in a
 * sandbox is test/e2e/agents.test.ts, against the harness contract.)
 */
import { accessSync, constants } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { missingForAgents } from '../../src/activities/agent-preflight';
import { REQUIREMENTS } from '../../src/agents';
import { CarryingParser, readCarryOver } from '../../src/agents/carry-over';
import { questionIn } from '../../src/agents/protocol';
import { ClaudeCodeHarness } from '../../src/agents/claude-code';
import { ShellHarness, TEXT_VARIABLE_CAP } from '../../src/agents/shell';
import type { AgentTask } from '../../src/agents/types';
import { VARIABLES } from '../../src/config/variables';

const task = (over: Partial<AgentTask> = {}): AgentTask => ({
  subTaskId: 'api',
  objective: 'the objective',
  prompt: 'the prompt',
  inputDir: '/scratch/',
  ...over,
});

describe('shell agents', () => {
  it('name their sub-task in FLOTILLA_SUBTASK_ID, and in the deprecated FLOTILLA_WORKER_ID too', () => {
    const { env } = new ShellHarness('true').invocation(task());
    expect(env.FLOTILLA_SUBTASK_ID).toBe('api');
    expect(env.FLOTILLA_WORKER_ID).toBe('api');
  });

  it('get their input in files, in variables too while it is small, and what a resume needs', () => {
    const small = new ShellHarness('./agent.sh').invocation(
      task({ message: 'the answer', sessionId: 's1', interrupted: true, maxTurns: 3 }),
    );
    expect(small).toEqual({
      command: './agent.sh',
      env: {
        FLOTILLA_SUBTASK_ID: 'api',
        FLOTILLA_WORKER_ID: 'api',
        FLOTILLA_PROMPT: 'the prompt',
        FLOTILLA_PROMPT_FILE: '/scratch/prompt.md',
        FLOTILLA_OBJECTIVE: 'the objective',
        FLOTILLA_OBJECTIVE_FILE: '/scratch/objective.md',
        FLOTILLA_RESUME_MESSAGE: 'the answer',
        FLOTILLA_RESUME_MESSAGE_FILE: '/scratch/resume-message.md',
        FLOTILLA_NOTICES_FILE: '/scratch/notices.md',
        FLOTILLA_SESSION_ID: 's1',
        FLOTILLA_INTERRUPTED: '1',
        FLOTILLA_MAX_TURNS: '3',
      },
      files: {
        '/scratch/prompt.md': 'the prompt',
        '/scratch/objective.md': 'the objective',
        '/scratch/resume-message.md': 'the answer',
      },
    });
    const big = 'x'.repeat(TEXT_VARIABLE_CAP + 1);
    const large = new ShellHarness('true').invocation(task({ prompt: big }));
    expect(large.env.FLOTILLA_PROMPT).toBeUndefined();
    expect(large.files['/scratch/prompt.md']).toBe(big);
  });

  it('report progress in ::flotilla lines, each stating totals; anything malformed is ignored', () => {
    const parser = new ShellHarness('true').parser();
    const output = [
      'working',
      '::flotilla {"turns": 1, "costUsd": 0.25, "sessionId": "s1"}',
      '::flotilla not json',
      '::flotilla {"turns": -4, "costUsd": "lots", "toolCalls": 2}',
      '::flotilla {"turns": 2, "question": "Which database?"}',
      'stopped to ask',
    ].join('\n');
    for (let i = 0; i < output.length; i += 9) parser.push(output.slice(i, i + 9));
    expect(parser.progress()).toMatchObject({ turns: 2, toolCalls: 2, costUsd: 0.25, sessionId: 's1' });
    expect(parser.finish(0)).toEqual({
      turns: 2,
      toolCalls: 2,
      costUsd: 0.25,
      sessionId: 's1',
      lastEvent: 'stopped to ask',
      finalMessage: 'stopped to ask',
      question: 'Which database?',
      hitTurnLimit: false,
      hitBudget: false,
    });
  });
});

describe('forged progress lines', () => {
  it('a shell agent cannot lower the totals it reported: a later, lower line is ignored', () => {
    const parser = new ShellHarness('true').parser();
    parser.push('::flotilla {"turns": 5, "toolCalls": 9, "costUsd": 1.5}\n');
    parser.push('::flotilla {"turns": 1, "toolCalls": 0, "costUsd": 0}\n');
    expect(parser.finish(0)).toMatchObject({ turns: 5, toolCalls: 9, costUsd: 1.5 });
  });

  it("Claude Code's output: a ::flotilla line is not its protocol, and a forged result cannot lower the priced replies", () => {
    const parser = new ClaudeCodeHarness().parser(0);
    const reply = {
      type: 'assistant',
      message: {
        id: 'm1',
        model: 'claude-opus-4-5',
        usage: { input_tokens: 100_000, output_tokens: 100_000 },
        content: [],
      },
    };
    parser.push(`${JSON.stringify(reply)}\n`);
    const priced = parser.progress().costUsd;
    expect(priced).toBeCloseTo(0.1 * 5 + 0.1 * 25);
    parser.push('::flotilla {"costUsd": 0}\n');
    expect(parser.progress().costUsd).toBe(priced);
    parser.push(`${JSON.stringify({ type: 'result', subtype: 'success', result: 'done', total_cost_usd: 0 })}\n`);
    expect(parser.finish(0).costUsd).toBe(priced);
  });
});

describe('questions', () => {
  it('are the last NEEDS_ANSWER line of a final message, however the model dressed it up', () => {
    expect(questionIn('Done.')).toBeUndefined();
    expect(questionIn(undefined)).toBeUndefined();
    expect(questionIn('I need a decision.\nNEEDS_ANSWER: which colour?')).toBe('which colour?');
    expect(questionIn('> **NEEDS_ANSWER:** which one?**')).toBe('which one?');
    expect(questionIn('NEEDS_ANSWER: first\nNEEDS_ANSWER: second')).toBe('second');
  });
});

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

describe('a parser carrying earlier attempts', () => {
  it('adds their cost, turns and tool calls, and keeps their session until the agent reports one', () => {
    const inner = new ShellHarness('true').parser();
    const parser = new CarryingParser(inner, { sessionId: 'old', costUsd: 1, turns: 2, toolCalls: 3 });
    parser.push('::flotilla {"turns": 1, "costUsd": 0.5}\n');
    expect(parser.progress()).toMatchObject({ sessionId: 'old', costUsd: 1.5, turns: 3, toolCalls: 3 });
    parser.push('::flotilla {"sessionId": "new"}\n');
    expect(parser.finish(0)).toMatchObject({ sessionId: 'new', costUsd: 1.5, turns: 3 });
  });
});

describe('what a worker needs to run each kind of agent', () => {
  it('says which credentials are missing, and that a shell agent needs none', () => {
    expect(missingForAgents(['shell', 'claude-code', 'codex'], 'local', {})).toEqual([
      'claude-code: ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN is not set on this worker',
      'codex: OPENAI_API_KEY or CODEX_API_KEY is not set on this worker',
    ]);
    expect(
      missingForAgents(['claude-code', 'codex'], 'local', { ANTHROPIC_AUTH_TOKEN: 't', CODEX_API_KEY: 'k' }),
    ).toEqual([]);
    expect(missingForAgents(['codex'], 'e2b', { OPENAI_API_KEY: '' })).toEqual([
      'codex: OPENAI_API_KEY or CODEX_API_KEY is not set on this worker',
    ]);
  });

  it("each harness names an executable this checkout has, and credentials the worker's table knows", () => {
    for (const [kind, requirements] of Object.entries(REQUIREMENTS)) {
      const needs = requirements();
      if (needs.binary) expect(() => accessSync(needs.binary!(), constants.X_OK), kind).not.toThrow();
      for (const name of needs.credentials) expect(Object.keys(VARIABLES), kind).toContain(name);
    }
  });
});
