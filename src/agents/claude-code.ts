/**
 * Claude Code (`claude -p`) as an agent. It runs headless with every permission granted — the
 * sandbox is the boundary — and streams its events as JSON lines (--output-format stream-json),
 * which the parser turns into progress and an outcome.
 *
 * Sessions live under $HOME/.claude, the sandbox's scratch directory, so a task resumed in the
 * same sandbox continues the same conversation (`--resume <session id>`).
 *
 * The prompt is read from a file on stdin. Cost: while the agent runs, each streamed reply's
 * usage is priced (prices.ts), so a budget can stop it mid-invocation; at the end Claude Code's
 * own figure for the invocation replaces that estimate (see runCost). --max-budget-usd makes Claude Code
 * stop itself at the budget too; it is given the session's allowance (sessionBudgetUsd), which
 * is lenient if Claude Code counts this process alone: the host's check is what is exact.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { JsonEventReader, firstLine, str, truncate } from './lines';
import { priceClaudeReply } from './prices';
import { shellQuote } from '../sandbox/shell';
import { UNATTENDED_INSTRUCTIONS, agentInput, inputPath, questionIn } from './protocol';
import type {
  AgentInvocation,
  AgentOutcome,
  AgentProgress,
  AgentRequirements,
  AgentTask,
  Harness,
  OutputParser,
} from './types';

/** Anthropic's API, or wherever ANTHROPIC_BASE_URL points it. */
export const CLAUDE_MODEL_API = { hostnames: ['api.anthropic.com'], baseUrlEnv: 'ANTHROPIC_BASE_URL' } as const;

const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : undefined);

/**
 * What this invocation cost by Claude Code's own count: the models' cost since the last result (this
 * process's, even when the session was restored or its previous process was killed), else the
 * session's total_cost_usd less what the session cost before.
 */
function runCost(result: any, sessionCostUsd: number): number | undefined {
  const byModel = result.model_usage_since_last_result;
  if (byModel && typeof byModel === 'object') {
    const costs = Object.values(byModel).map((m: any) => num(m?.costUSD));
    if (costs.length && costs.every((c) => c !== undefined)) return costs.reduce((a, b) => a! + b!, 0);
  }
  const total = num(result.total_cost_usd);
  return total === undefined ? undefined : Math.max(0, total - sessionCostUsd);
}

class ClaudeCodeParser extends JsonEventReader implements OutputParser {
  /** Distinct model replies: Claude Code emits one line per content block, all with the reply's id. */
  private readonly replies = new Set<string>();
  private anonymousReplies = 0;
  /** The priced usage of each reply so far, by reply id (its lines repeat the reply's usage). */
  private readonly replyCosts = new Map<string, number>();
  private anonymousCostUsd = 0;
  private toolCalls = 0;
  /** Claude Code's own figure for this invocation, once it has ended. */
  private reportedCostUsd?: number;
  private sessionId?: string;
  private cwd?: string;
  private lastEvent?: string;
  private lastText?: string;
  private result?: { text?: string; subtype?: string; numTurns?: number };

  constructor(private readonly sessionCostUsd: number) {
    super();
  }

  protected onEvent(event: any): void {
    this.sessionId = str(event.session_id) ?? this.sessionId;
    switch (event.type) {
      case 'system':
        if (event.subtype === 'init') {
          this.cwd = str(event.cwd);
          this.lastEvent = `started${str(event.model) ? ` (${event.model})` : ''}`;
        } else if (event.subtype === 'api_retry') {
          // An unreachable model API shows here, minutes before Claude Code gives up.
          this.lastEvent = `retrying the model API (attempt ${num(event.attempt) ?? '?'} of ${num(event.max_retries) ?? '?'}): ${str(event.error) ?? 'error'}`;
        }
        break;
      case 'assistant':
        this.readReply(event.message, Boolean(event.parent_tool_use_id));
        break;
      case 'result': {
        const errors = Array.isArray(event.errors) ? event.errors.filter((e: unknown) => typeof e === 'string') : [];
        this.result = {
          text: str(event.result) ?? (errors.length ? errors.join('\n') : undefined),
          subtype: str(event.subtype),
          numTurns: num(event.num_turns),
        };
        this.reportedCostUsd = runCost(event, this.sessionCostUsd) ?? this.reportedCostUsd;
        this.lastEvent = `finished (${this.result.subtype ?? 'unknown'})`;
        break;
      }
    }
  }

  /** A subagent's replies are work done too, but only the main agent's words are its answer. */
  private readReply(message: any, fromSubagent: boolean): void {
    if (!message || typeof message !== 'object') return;
    const usage = message.usage ?? {};
    const cost = priceClaudeReply(str(message.model), {
      input: num(usage.input_tokens),
      cacheRead: num(usage.cache_read_input_tokens),
      cacheWrite: num(usage.cache_creation_input_tokens),
      output: num(usage.output_tokens),
    });
    if (str(message.id)) {
      this.replies.add(message.id);
      this.replyCosts.set(message.id, Math.max(cost, this.replyCosts.get(message.id) ?? 0));
    } else {
      this.anonymousReplies++;
      this.anonymousCostUsd += cost;
    }
    for (const block of Array.isArray(message.content) ? message.content : []) {
      if (block?.type === 'tool_use') {
        this.toolCalls++;
        this.lastEvent = truncate(`tool ${str(block.name) ?? '?'}${this.describeInput(block.input)}`, 200);
      } else if (block?.type === 'text' && str(block.text)?.trim()) {
        if (!fromSubagent) this.lastText = block.text;
        this.lastEvent = truncate(`says ${firstLine(block.text)}`, 200);
      }
    }
  }

  private describeInput(input: any): string {
    if (!input || typeof input !== 'object') return '';
    const file = str(input.file_path) ?? str(input.notebook_path);
    if (file) return ` ${this.cwd && file.startsWith(`${this.cwd}/`) ? file.slice(this.cwd.length + 1) : file}`;
    const detail =
      str(input.command) ?? str(input.pattern) ?? str(input.url) ?? str(input.query) ?? str(input.description);
    return detail ? ` ${firstLine(detail)}` : '';
  }

  progress(): AgentProgress {
    return {
      turns: this.replies.size + this.anonymousReplies || (this.result?.numTurns ?? 0),
      toolCalls: this.toolCalls,
      costUsd: this.costUsd(),
      sessionId: this.sessionId,
      lastEvent: this.lastEvent,
    };
  }

  /**
   * This invocation's cost: the streamed replies priced, or Claude Code's own figure once it has
   * one when that is higher. Never lower: a process the agent starts can write to its stdout, and
   * a forged result line must not undo what the replies cost.
   */
  private costUsd(): number {
    let streamed = this.anonymousCostUsd;
    for (const cost of this.replyCosts.values()) streamed += cost;
    return Math.max(streamed, this.reportedCostUsd ?? 0);
  }

  finish(_exitCode: number): AgentOutcome {
    this.drain();
    const finalMessage = this.result?.text ?? this.lastText ?? this.lastPlainLine;
    return {
      ...this.progress(),
      finalMessage: finalMessage ? truncate(finalMessage, 4000) : undefined,
      question: questionIn(this.result?.text ?? this.lastText),
      hitTurnLimit: this.result?.subtype === 'error_max_turns',
      hitBudget: this.result?.subtype === 'error_max_budget_usd',
    };
  }
}

/**
 * The claude binary this package depends on. The npm wrapper's postinstall (which this project
 * does not allow to run) copies the platform package's native binary over bin/claude.exe, so the
 * platform package is asked first and the wrapper's bin is the fallback.
 */
export function defaultClaudeBinary(): string {
  try {
    const platformDir = path.dirname(
      require.resolve(`@anthropic-ai/claude-code-${process.platform}-${process.arch}/package.json`),
    );
    const native = path.join(platformDir, process.platform === 'win32' ? 'claude.exe' : 'claude');
    if (existsSync(native)) return native;
  } catch {
    // Not installed for this platform: the wrapper's bin is all there is.
  }
  return path.join(path.dirname(require.resolve('@anthropic-ai/claude-code/package.json')), 'bin', 'claude.exe');
}

/** Claude Code's binary from this package's dependency, and an API key or a gateway's token. */
export function claudeCodeRequirements(): AgentRequirements {
  return { binary: defaultClaudeBinary, credentials: ['ANTHROPIC_API_KEY', 'ANTHROPIC_AUTH_TOKEN'] };
}

export interface ClaudeCodeOptions {
  /** A model name or alias (`sonnet`, `claude-opus-4-5`); Claude Code's default otherwise. */
  model?: string;
  /** A turn limit for every invocation, unless the task sets its own. */
  maxTurns?: number;
  /** The claude executable as the sandbox sees it; defaults to this package's dependency. */
  binary?: string;
  /** More system instructions, after Flotilla's own. */
  appendSystemPrompt?: string;
}

export class ClaudeCodeHarness implements Harness {
  readonly kind = 'claude-code';
  readonly passEnv: readonly string[] = ['ANTHROPIC_API_KEY', 'ANTHROPIC_BASE_URL', 'ANTHROPIC_AUTH_TOKEN'];
  readonly modelApi = CLAUDE_MODEL_API;
  private readonly binary: string;

  constructor(private readonly options: ClaudeCodeOptions = {}) {
    this.binary = options.binary ?? defaultClaudeBinary();
  }

  invocation(task: AgentTask): AgentInvocation {
    const input = inputPath(task, 'agent-input.md');
    const systemPrompt = inputPath(task, 'system-prompt.md');
    const files = {
      [input]: agentInput(task),
      [systemPrompt]: [UNATTENDED_INSTRUCTIONS, this.options.appendSystemPrompt].filter(Boolean).join('\n\n'),
    };
    const words = [
      shellQuote(this.binary),
      '-p',
      '--output-format',
      'stream-json',
      '--verbose',
      '--permission-mode',
      'bypassPermissions',
      '--append-system-prompt-file',
      shellQuote(systemPrompt),
    ];
    const maxTurns = task.maxTurns ?? this.options.maxTurns;
    if (maxTurns !== undefined) words.push('--max-turns', String(maxTurns));
    if (task.sessionBudgetUsd !== undefined && task.sessionBudgetUsd > 0)
      words.push('--max-budget-usd', task.sessionBudgetUsd.toFixed(6));
    if (this.options.model) words.push('--model', shellQuote(this.options.model));
    const env: Record<string, string> = {
      // Claude Code refuses bypassPermissions as root unless told it is sandboxed, which it is.
      IS_SANDBOX: '1',
      // No auto-update, telemetry, error reporting or other traffic beyond the model API.
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      DISABLE_AUTOUPDATER: '1',
      DISABLE_TELEMETRY: '1',
      DISABLE_ERROR_REPORTING: '1',
    };
    if (task.sessionId) {
      words.push('--resume', '"$FLOTILLA_SESSION_ID"');
      env.FLOTILLA_SESSION_ID = task.sessionId;
    }
    // With no prompt argument, claude -p reads the prompt from stdin. One pipe for both streams
    // keeps a warning from landing in the middle of a JSON line.
    words.push('<', shellQuote(input), '2>&1');
    return { command: `exec ${words.join(' ')}`, env, files };
  }

  parser(sessionCostUsd = 0): OutputParser {
    return new ClaudeCodeParser(sessionCostUsd);
  }
}
