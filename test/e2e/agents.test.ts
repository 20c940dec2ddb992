/**
 * The Claude Code, Codex and shell harnesses driving their real CLIs, offline: each runs in a real
 * local sandbox (with network: its proxy lets them reach the scripted model server) on a small
 * git repository. Each passes the harness contract (test/support/harness-contract.ts), then what
 * only it promises.
 */
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { ClaudeCodeHarness } from '../../src/agents/claude-code';
import { CodexHarness } from '../../src/agents/codex';
import { priceClaudeReply, priceTokens } from '../../src/agents/prices';
import { ShellHarness, TEXT_VARIABLE_CAP } from '../../src/agents/shell';
import { shellQuote } from '../../src/sandbox/shell';
import type { Sandbox } from '../../src/sandbox/types';
import { AgentLab, type ScriptedInvocation, harnessContract } from '../support/harness-contract';
import {
  INPUT_TOKENS,
  OUTPUT_TOKENS,
  type RecordedRequest,
  type Step,
  type ToolCall,
  userTexts,
} from '../support/model-server';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

let lab: AgentLab;
beforeAll(async () => {
  lab = await AgentLab.start();
});

const text = async (sandbox: Sandbox, file: string) =>
  Buffer.from(await sandbox.readFile(path.posix.join(sandbox.workspace, file))).toString();

/** A model-backed agent's script as the model server's steps: a tool call per file, then the final reply. */
function modelSteps(invocations: ScriptedInvocation[], write: (file: string, content: string) => ToolCall): Step[] {
  return invocations.flatMap((inv) => [
    ...Object.entries(inv.writes ?? {}).map(([file, content]) => ({ tools: [write(file, content)] })),
    inv.error !== undefined
      ? { error: inv.error }
      : { text: [inv.say, inv.ask && `NEEDS_ANSWER: ${inv.ask}`].filter(Boolean).join('\n') },
  ]);
}

const claudeEnv = () => ({ ANTHROPIC_BASE_URL: lab.server.url, ANTHROPIC_API_KEY: 'test-key' });
const codexHarness = () =>
  new CodexHarness({
    model: 'gpt-5.5',
    config: [
      `model_providers.local={name="local",base_url="${lab.server.url}/v1",env_key="OPENAI_API_KEY",wire_api="responses"}`,
      'model_provider=local',
    ],
  });
// The worker's configuration names the model server, so the sandbox's proxy lets Codex reach it.
const codexEnv = () => ({ OPENAI_API_KEY: 'test-key', OPENAI_BASE_URL: `${lab.server.url}/v1` });

harnessContract('claude-code', () => lab, {
  hostEnv: claudeEnv,
  scripted(key, invocations, sandbox) {
    lab.server.script(
      key,
      modelSteps(invocations, (file, content) => ({
        name: 'Write',
        input: { file_path: `${sandbox.workspace}/${file}`, content },
      })),
    );
    return new ClaudeCodeHarness();
  },
  heard: async (key) => lab.heardBy(key),
});

harnessContract('codex', () => lab, {
  hostEnv: codexEnv,
  scripted(key, invocations, sandbox) {
    lab.server.script(
      key,
      modelSteps(invocations, (file, content) => ({
        name: 'exec_command',
        input: {
          cmd: `mkdir -p "$(dirname ${shellQuote(file)})" && printf %s ${shellQuote(content)} > ${shellQuote(file)}`,
          workdir: sandbox.workspace,
        },
      })),
    );
    return codexHarness();
  },
  heard: async (key) => lab.heardBy(key),
});

/**
 * A shell agent that plays `invocations` one per run, as the protocol lets a shell command
 * report: ::flotilla lines with its totals and session, its final message as its last line.
 * What it was given it appends to a file of its own in scratch.
 */
function shellAgent(key: string, invocations: ScriptedInvocation[]): string {
  const cases = invocations.map((inv, i) => {
    const writes = Object.entries(inv.writes ?? {});
    const steps = writes.map(
      ([file, content]) =>
        `mkdir -p "$(dirname ${shellQuote(file)})" && printf %s ${shellQuote(content)} > ${shellQuote(file)}`,
    );
    if (inv.error !== undefined) steps.push(`echo ${shellQuote(inv.error)} >&2`, 'exit 1');
    else {
      const report = {
        turns: 1,
        toolCalls: writes.length,
        costUsd: 0.01,
        sessionId: `shell-${key}`,
        question: inv.ask,
      };
      steps.push(`echo ${shellQuote(`::flotilla ${JSON.stringify(report)}`)}`, `echo ${shellQuote(inv.say ?? '')}`);
    }
    return `  ${i}) ${steps.join('; ')} ;;`;
  });
  return [
    `state="$HOME/.invocations-${key}"`,
    'n=$(cat "$state" 2>/dev/null || echo 0); echo $((n + 1)) > "$state"',
    `cat "$FLOTILLA_PROMPT_FILE" \${FLOTILLA_RESUME_MESSAGE_FILE:+"$FLOTILLA_RESUME_MESSAGE_FILE"} >> "$HOME/.heard-${key}"`,
    'case $n in',
    ...cases,
    'esac',
  ].join('\n');
}

harnessContract('shell', () => lab, {
  hostEnv: () => ({}),
  scripted: (key, invocations) => new ShellHarness(shellAgent(key, invocations)),
  heard: async (key, sandbox) => Buffer.from(await sandbox.readFile(`${sandbox.scratch}/.heard-${key}`)).toString(),
});

/** A megabyte of text that starts with `key`, so the model server knows the conversation. */
const megabyte = (key: string) => `${key} `.padEnd(1_000_000, '0123456789abcdef');

/** All the text of a request's conversation, whatever the API. */
const conversationText = (request: RecordedRequest) =>
  JSON.stringify(request.body?.messages ?? request.body?.input ?? []);

describe('Claude Code harness', () => {
  it('edits the workspace with Write and Bash, and reports turns, tool calls, cost and session', async () => {
    const sandbox = await lab.sandbox('claude-edit');
    lab.server.script('CLAUDE-EDIT', [
      {
        text: 'Writing the greeting.',
        tools: [{ name: 'Write', input: { file_path: `${sandbox.workspace}/src/greeting.txt`, content: 'hello\n' } }],
      },
      {
        tools: [
          {
            name: 'Bash',
            input: {
              command: 'cp src/greeting.txt src/copy.txt && git status --short',
              description: 'Copy the greeting',
            },
          },
        ],
      },
      { text: 'Added src/greeting.txt and src/copy.txt.' },
    ]);
    const run = await lab.run(
      sandbox,
      new ClaudeCodeHarness(),
      { prompt: "Task CLAUDE-EDIT: add a greeting (it's 'quoted' $HOME `here`)." },
      claudeEnv(),
    );

    expect(run.exitCode, run.output).toBe(0);
    expect(await text(sandbox, 'src/greeting.txt')).toBe('hello\n');
    expect(await text(sandbox, 'src/copy.txt')).toBe('hello\n');
    expect(run.outcome).toMatchObject({
      turns: 3,
      toolCalls: 2,
      finalMessage: 'Added src/greeting.txt and src/copy.txt.',
      hitTurnLimit: false,
      lastEvent: 'finished (success)',
    });
    expect(run.outcome.question).toBeUndefined();
    expect(run.outcome.costUsd).toBeGreaterThan(0);
    expect(run.outcome.sessionId).toMatch(UUID);

    const turns = run.requests.filter((r) => r.conversation === 'CLAUDE-EDIT');
    expect(turns.map((r) => r.step)).toEqual([0, 1, 2]);
    // The prompt reached the model verbatim, and so did the question protocol.
    expect(userTexts(turns[0].body).join('\n')).toContain("add a greeting (it's 'quoted' $HOME `here`).");
    expect(JSON.stringify(turns[0].body.system)).toContain('NEEDS_ANSWER: <your question>');
    // The Bash command's output went back to the model.
    expect(conversationText(turns[2])).toContain('?? src/');

    // The same output, cut at odd places and mixed with junk, parses to the same outcome.
    const parser = new ClaudeCodeHarness().parser();
    const noisy = run.output.split('\n').join('\nnot json {\n{"type":"assistant","message":7}\n');
    for (let i = 0; i < noisy.length; i += 7) parser.push(noisy.slice(i, i + 7));
    expect(parser.finish(0)).toEqual(run.outcome);
  });

  it('stops with a question, and a resume with the answer continues the same session', async () => {
    const sandbox = await lab.sandbox('claude-ask');
    lab.server.script('CLAUDE-ASK', [
      { text: 'Before I paint anything I need a decision.\nNEEDS_ANSWER: which colour?' },
      { tools: [{ name: 'Write', input: { file_path: `${sandbox.workspace}/colour.txt`, content: 'blue\n' } }] },
      { text: 'Painted it blue.' },
    ]);
    const harness = new ClaudeCodeHarness();
    const asked = await lab.run(sandbox, harness, { prompt: 'Task CLAUDE-ASK: paint the fence.' }, claudeEnv());
    expect(asked.exitCode, asked.output).toBe(0);
    expect(asked.outcome.question).toBe('which colour?');
    expect(asked.outcome.sessionId).toMatch(UUID);

    const resumed = await lab.run(
      sandbox,
      harness,
      { prompt: 'Task CLAUDE-ASK: paint the fence.', sessionId: asked.outcome.sessionId, message: 'Blue, please.' },
      claudeEnv(),
    );
    expect(resumed.exitCode, resumed.output).toBe(0);
    expect(resumed.outcome).toMatchObject({
      sessionId: asked.outcome.sessionId,
      finalMessage: 'Painted it blue.',
      toolCalls: 1,
      turns: 2,
    });
    expect(resumed.outcome.question).toBeUndefined();
    expect(await text(sandbox, 'colour.txt')).toBe('blue\n');

    // The resumed request carried the earlier conversation and then the operator's answer.
    const first = resumed.requests.find((r) => r.conversation === 'CLAUDE-ASK')!;
    expect(first.step).toBe(1);
    const history = conversationText(first);
    expect(history).toContain('paint the fence');
    expect(history).toContain('NEEDS_ANSWER: which colour?');
    expect(userTexts(first.body).at(-1)).toContain('Blue, please.');
    const sessionHeaders = [...asked.requests, ...resumed.requests]
      .filter((r) => r.conversation)
      .map((r) => r.headers['x-claude-code-session-id']);
    expect(new Set(sessionHeaders)).toEqual(new Set([asked.outcome.sessionId]));
  });

  it('reports hitting the turn limit', async () => {
    const sandbox = await lab.sandbox('claude-limit');
    const tick = { name: 'Bash', input: { command: 'echo tick >> ticks.txt', description: 'Tick' } };
    lab.server.script('CLAUDE-LIMIT', [
      { tools: [tick] },
      { tools: [tick] },
      { tools: [tick] },
      { text: 'Ticked three times.' },
    ]);
    const run = await lab.run(
      sandbox,
      new ClaudeCodeHarness({ maxTurns: 5 }),
      { prompt: 'Task CLAUDE-LIMIT: tick.', maxTurns: 2, interrupted: true },
      claudeEnv(),
    );

    expect(run.outcome).toMatchObject({
      hitTurnLimit: true,
      turns: 2,
      toolCalls: 2,
      lastEvent: 'finished (error_max_turns)',
    });
    expect(run.outcome.question).toBeUndefined();
    expect(await text(sandbox, 'ticks.txt')).toBe('tick\ntick\n');
    // The task's limit wins over the harness's, and the interrupted run was told to look first.
    const prompt = userTexts(run.requests.find((r) => r.conversation === 'CLAUDE-LIMIT')!.body).join('\n');
    expect(prompt).toMatch(
      /Task CLAUDE-LIMIT: tick\.\s+A previous attempt at this task was interrupted midway\..*git status/s,
    );
  });

  it('a 1 MB prompt and a 1 MB resume message reach the model whole, through files', async () => {
    const sandbox = await lab.sandbox('claude-big');
    lab.server.script('CLAUDE-BIG', [
      { text: 'Read it all.\nNEEDS_ANSWER: and the rest?' },
      { text: 'Read the rest too.' },
    ]);
    const prompt = megabyte('Task CLAUDE-BIG:');
    const message = megabyte('The rest:');
    const harness = new ClaudeCodeHarness();
    const asked = await lab.run(sandbox, harness, { prompt }, claudeEnv());
    expect(asked.exitCode, asked.output).toBe(0);
    expect(asked.outcome.question).toBe('and the rest?');
    const resumed = await lab.run(
      sandbox,
      harness,
      { prompt, sessionId: asked.outcome.sessionId, message },
      claudeEnv(),
    );
    expect(resumed.exitCode, resumed.output).toBe(0);
    expect(resumed.outcome.finalMessage).toBe('Read the rest too.');

    const [first] = asked.requests.filter((r) => r.conversation === 'CLAUDE-BIG');
    expect(userTexts(first.body).join('\n')).toContain(prompt);
    const [second] = resumed.requests.filter((r) => r.conversation === 'CLAUDE-BIG');
    expect(userTexts(second.body).at(-1)).toContain(message);
  });

  it('prices streamed replies while it runs, and stops itself at its budget (--max-budget-usd)', async () => {
    const sandbox = await lab.sandbox('claude-budget');
    const tick = { name: 'Bash', input: { command: 'echo tick >> ticks.txt', description: 'Tick' } };
    lab.server.script('CLAUDE-BUDGET', [
      ...Array.from({ length: 12 }, () => ({ tools: [tick] })),
      { text: 'Ticked twelve times.' },
    ]);
    // Priced as Claude Code's default model would be by the parser: a reply's input and its first output token.
    const perReply = priceClaudeReply('claude-opus-5-5', { input: INPUT_TOKENS, output: 1 });
    const costsBeforeTheEnd: number[] = [];
    const run = await lab.run(
      sandbox,
      new ClaudeCodeHarness(),
      { prompt: 'Task CLAUDE-BUDGET: tick.', sessionBudgetUsd: 0.02 },
      claudeEnv(),
      {
        watch: (parser, chunk) => {
          if (!chunk.includes('"type":"result"')) costsBeforeTheEnd.push(parser.progress().costUsd);
        },
      },
    );

    // Cost showed, reply by reply, before Claude Code's own total at the end.
    expect(costsBeforeTheEnd.at(-1)).toBeGreaterThanOrEqual(2 * perReply);
    expect(run.outcome).toMatchObject({ hitBudget: true, lastEvent: 'finished (error_max_budget_usd)' });
    expect(run.outcome.costUsd).toBeGreaterThan(0.02);
    const ticks = (await text(sandbox, 'ticks.txt')).split('\n').filter(Boolean).length;
    expect(ticks).toBeGreaterThan(0);
    expect(ticks).toBeLessThan(12);
    expect(run.requests.filter((r) => r.conversation === 'CLAUDE-BUDGET').length).toBeLessThan(13);
  });
});

describe('Codex harness', () => {
  it('edits the workspace with exec_command, asks, and resumes its session', async () => {
    const sandbox = await lab.sandbox('codex');
    lab.server.script('CODEX-EDIT', [
      { tools: [{ name: 'exec_command', input: { cmd: 'printf "fast\\n" > speed.txt', workdir: sandbox.workspace } }] },
      { text: 'Wrote speed.txt.\nNEEDS_ANSWER: should I commit it?' },
      {
        tools: [
          {
            name: 'exec_command',
            input: { cmd: 'git add speed.txt && git commit -qm "Add speed"', workdir: sandbox.workspace },
          },
        ],
      },
      { text: 'Committed.' },
    ]);
    const harness = codexHarness();
    const asked = await lab.run(sandbox, harness, { prompt: 'Task CODEX-EDIT: record the speed.' }, codexEnv());

    expect(asked.exitCode, asked.output).toBe(0);
    expect(await text(sandbox, 'speed.txt')).toBe('fast\n');
    expect(asked.outcome).toMatchObject({
      turns: 1,
      toolCalls: 1,
      question: 'should I commit it?',
      hitTurnLimit: false,
      lastEvent: 'turn completed',
    });
    expect(asked.outcome.sessionId).toMatch(UUID);
    // Two model replies in this thread so far, priced at gpt-5.5's rates.
    expect(asked.outcome.costUsd).toBeCloseTo(
      priceTokens('gpt-5.5', { inputTokens: 2 * INPUT_TOKENS, outputTokens: 2 * OUTPUT_TOKENS }),
      10,
    );
    expect(asked.outcome.costUsd).toBeGreaterThan(0);

    const turns = asked.requests.filter((r) => r.conversation === 'CODEX-EDIT');
    expect(turns.map((r) => r.step)).toEqual([0, 1]);
    expect(turns[0].body.model).toBe('gpt-5.5');
    expect(turns[0].headers.authorization).toBe('Bearer test-key');
    expect(conversationText(turns[0])).toContain('NEEDS_ANSWER: <your question>');

    const resumed = await lab.run(
      sandbox,
      harness,
      { prompt: 'Task CODEX-EDIT: record the speed.', sessionId: asked.outcome.sessionId, message: 'Yes, commit it.' },
      codexEnv(),
      { sessionCostUsd: asked.outcome.costUsd },
    );
    expect(resumed.exitCode, resumed.output).toBe(0);
    expect(resumed.outcome).toMatchObject({
      sessionId: asked.outcome.sessionId,
      finalMessage: 'Committed.',
      toolCalls: 1,
    });
    expect(resumed.outcome.question).toBeUndefined();
    // Codex prices the whole thread (four replies by now); this run's cost is the last two.
    expect(resumed.outcome.costUsd).toBeCloseTo(
      priceTokens('gpt-5.5', { inputTokens: 2 * INPUT_TOKENS, outputTokens: 2 * OUTPUT_TOKENS }),
      10,
    );
    const log = await sandbox.exec('git log --format=%s', { timeoutMs: 10_000 });
    expect(log.output.trim().split('\n')).toEqual(['Add speed', 'init']);

    const first = resumed.requests.find((r) => r.conversation === 'CODEX-EDIT')!;
    expect(first.step).toBe(2);
    expect(first.headers['thread-id']).toBe(asked.outcome.sessionId);
    const history = conversationText(first);
    expect(history).toContain('record the speed');
    expect(history).toContain('printf');
    expect(userTexts(first.body).at(-1)).toContain('Yes, commit it.');

    const parser = codexHarness().parser(asked.outcome.costUsd);
    const noisy = resumed.output.split('\n').join('\n}{ garbage\n{"type":"item.completed","item":null}\n');
    for (let i = 0; i < noisy.length; i += 5) parser.push(noisy.slice(i, i + 5));
    expect(parser.finish(0)).toEqual(resumed.outcome);
  });

  it('a 1 MB prompt and a 1 MB resume message reach the model whole, through files', async () => {
    const sandbox = await lab.sandbox('codex-big');
    lab.server.script('CODEX-BIG', [{ text: 'Read it.\nNEEDS_ANSWER: and the rest?' }, { text: 'Read the rest.' }]);
    const prompt = megabyte('Task CODEX-BIG:');
    const message = megabyte('The rest:');
    const harness = codexHarness();
    const asked = await lab.run(sandbox, harness, { prompt }, codexEnv());
    expect(asked.exitCode, asked.output).toBe(0);
    expect(asked.outcome.question).toBe('and the rest?');
    const resumed = await lab.run(
      sandbox,
      harness,
      { prompt, sessionId: asked.outcome.sessionId, message },
      codexEnv(),
    );
    expect(resumed.exitCode, resumed.output).toBe(0);
    expect(resumed.outcome.finalMessage).toBe('Read the rest.');
    expect(userTexts(asked.requests.find((r) => r.conversation === 'CODEX-BIG')!.body).join('\n')).toContain(prompt);
    expect(userTexts(resumed.requests.find((r) => r.conversation === 'CODEX-BIG')!.body).at(-1)).toContain(message);
  });
});

describe('shell harness', () => {
  it('passes a 1 MB prompt, objective and resume message in files, and small ones in variables too', async () => {
    const sandbox = await lab.sandbox('shell-big');
    const report = [
      'for v in FLOTILLA_PROMPT FLOTILLA_OBJECTIVE FLOTILLA_RESUME_MESSAGE; do',
      '  f="${v}_FILE"; echo "$v file=$(wc -c < "${!f}") var=${!v+set}"',
      'done',
    ].join('\n');
    const small = await lab.run(
      sandbox,
      new ShellHarness(report),
      { prompt: 'small', objective: 'also small', message: 'short answer' },
      {},
    );
    expect(small.output.trim().split('\n')).toEqual([
      'FLOTILLA_PROMPT file=5 var=set',
      'FLOTILLA_OBJECTIVE file=10 var=set',
      'FLOTILLA_RESUME_MESSAGE file=12 var=set',
    ]);

    const big = megabyte('big');
    const large = await lab.run(sandbox, new ShellHarness(report), { prompt: big, objective: big, message: big }, {});
    expect(large.exitCode, large.output).toBe(0);
    const bytes = Buffer.byteLength(big);
    expect(bytes).toBeGreaterThan(TEXT_VARIABLE_CAP);
    expect(large.output.trim().split('\n')).toEqual([
      `FLOTILLA_PROMPT file=${bytes} var=`,
      `FLOTILLA_OBJECTIVE file=${bytes} var=`,
      `FLOTILLA_RESUME_MESSAGE file=${bytes} var=`,
    ]);
  });
});
