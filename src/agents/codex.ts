/**
 * OpenAI's Codex CLI (`codex exec --json`) as an agent. It runs with its own sandbox and
 * approvals off — Flotilla's sandbox is the boundary — and streams JSON lines (thread.started,
 * turn.*, item.*), which the parser turns into progress and an outcome.
 *
 * Sessions (threads) live under $HOME/.codex, the sandbox's scratch directory, so a task resumed
 * in the same sandbox continues the same thread (`codex exec resume <thread id>`).
 *
 * The prompt is read from a file on stdin. Codex reports tokens, not dollars, and only when its
 * turn completes (one turn per invocation): the cost is priced from the usage of turn.completed, which
 * covers the whole thread, so the parser subtracts what a resumed session had cost before. Codex
 * has neither a budget nor a turn limit of its own; `turns` counts its turns.
 *
 * Reaching a provider: Codex 0.171 reads neither OPENAI_API_KEY nor OPENAI_BASE_URL for its
 * built-in OpenAI provider (it takes CODEX_API_KEY and the `openai_base_url` setting), so the
 * command maps the conventional variables onto those. Any other provider is configured with
 * `config` entries (`-c key=value`, values in TOML), e.g.
 *   model_providers.local={name="local",base_url="http://127.0.0.1:8080/v1",env_key="OPENAI_API_KEY",wire_api="responses"}
 *   model_provider=local
 */
import path from 'node:path';
import { JsonEventReader, firstLine, str, truncate } from './lines';
import { shellQuote } from '../sandbox/shell';
import { UNATTENDED_INSTRUCTIONS, agentInput, inputPath, questionIn } from './protocol';
import { priceTokens } from './prices';
import type {
  AgentInvocation,
  AgentOutcome,
  AgentProgress,
  AgentRequirements,
  AgentTask,
  Harness,
  OutputParser,
} from './types';

/** OpenAI's API, or wherever OPENAI_BASE_URL points it. */
export const CODEX_MODEL_API = { hostnames: ['api.openai.com'], baseUrlEnv: 'OPENAI_BASE_URL' } as const;

const count = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : 0);

/** Items that are the agent acting on the world rather than talking. */
const TOOL_ITEMS = new Set(['command_execution', 'file_change', 'mcp_tool_call', 'web_search', 'collab_tool_call']);

class CodexParser extends JsonEventReader implements OutputParser {
  private readonly toolItems = new Set<string>();
  private turns = 0;
  private costUsd = 0;
  private sessionId?: string;
  private lastEvent?: string;
  private lastMessage?: string;
  private lastError?: string;

  constructor(
    private readonly model: string | undefined,
    private readonly sessionCostUsd: number,
  ) {
    super();
  }

  protected onEvent(event: any): void {
    switch (event.type) {
      case 'thread.started':
        this.sessionId = str(event.thread_id) ?? this.sessionId;
        this.lastEvent = 'started';
        break;
      case 'turn.completed': {
        this.turns++;
        const usage = event.usage ?? {};
        const threadCost = priceTokens(this.model, {
          inputTokens: count(usage.input_tokens),
          cachedInputTokens: count(usage.cached_input_tokens),
          outputTokens: count(usage.output_tokens),
        });
        // Never lower than a turn before: the thread's usage only grows, unless a line is forged.
        this.costUsd = Math.max(this.costUsd, threadCost - this.sessionCostUsd);
        this.lastEvent = 'turn completed';
        break;
      }
      case 'turn.failed':
        this.turns++;
        this.lastError = str(event.error?.message) ?? 'turn failed';
        this.lastEvent = truncate(`turn failed: ${firstLine(this.lastError)}`, 200);
        break;
      case 'error':
        // Also sent for retries Codex recovers from ("Reconnecting... 2/5").
        this.lastError = str(event.message) ?? this.lastError;
        if (this.lastError) this.lastEvent = truncate(`error: ${firstLine(this.lastError)}`, 200);
        break;
      case 'item.started':
      case 'item.updated':
      case 'item.completed':
        this.readItem(event.item);
        break;
    }
  }

  private readItem(item: any): void {
    if (!item || typeof item !== 'object') return;
    const type = str(item.type) ?? '';
    if (TOOL_ITEMS.has(type)) {
      const id = str(item.id) ?? `anonymous-${this.toolItems.size}`;
      if (this.toolItems.has(id)) return;
      this.toolItems.add(id);
      this.lastEvent = truncate(`tool ${describeTool(type, item)}`, 200);
    } else if (type === 'agent_message' && str(item.text)) {
      this.lastMessage = item.text;
      this.lastEvent = truncate(`says ${firstLine(item.text)}`, 200);
    }
  }

  progress(): AgentProgress {
    return {
      turns: this.turns,
      toolCalls: this.toolItems.size,
      costUsd: this.costUsd,
      sessionId: this.sessionId,
      lastEvent: this.lastEvent,
    };
  }

  finish(_exitCode: number): AgentOutcome {
    this.drain();
    const finalMessage = this.lastMessage ?? this.lastError ?? this.lastPlainLine;
    return {
      ...this.progress(),
      finalMessage: finalMessage ? truncate(finalMessage, 4000) : undefined,
      question: questionIn(this.lastMessage),
      hitTurnLimit: false,
      hitBudget: false,
    };
  }
}

function describeTool(type: string, item: any): string {
  switch (type) {
    case 'command_execution':
      return `exec ${firstLine(str(item.command) ?? '')}`;
    case 'file_change': {
      const paths = Array.isArray(item.changes) ? item.changes.map((c: any) => str(c?.path)).filter(Boolean) : [];
      return `edit ${paths.join(', ')}`;
    }
    case 'mcp_tool_call':
      return `${str(item.server) ?? '?'}.${str(item.tool) ?? '?'}`;
    case 'web_search':
      return `web_search ${str(item.query) ?? ''}`;
    default:
      return type;
  }
}

/** The codex launcher this package depends on (a node script that runs the platform's binary). */
export function defaultCodexBinary(): string {
  return path.join(path.dirname(require.resolve('@openai/codex/package.json')), 'bin', 'codex.js');
}

/**
 * Codex's launcher from this package's dependency, and a key under either name (the command maps
 * OPENAI_API_KEY onto CODEX_API_KEY; a provider of `config` reads its `env_key`, which only these
 * two reach the sandbox as).
 */
export function codexRequirements(): AgentRequirements {
  return { binary: defaultCodexBinary, credentials: ['OPENAI_API_KEY', 'CODEX_API_KEY'] };
}

export interface CodexOptions {
  /** The model (`gpt-5.5`); Codex's default otherwise, priced at the default rate. */
  model?: string;
  /** `key=value` settings passed as `-c` (values in TOML): providers, reasoning effort, ... */
  config?: readonly string[];
  /** The codex executable as the sandbox sees it; defaults to this package's dependency. */
  binary?: string;
}

export class CodexHarness implements Harness {
  readonly kind = 'codex';
  /**
   * CODEX_HOME is deliberately not passed: a host path means nothing in the sandbox, whose
   * $HOME/.codex keeps the sessions a resume needs.
   */
  readonly passEnv: readonly string[] = ['OPENAI_API_KEY', 'OPENAI_BASE_URL', 'CODEX_API_KEY'];
  readonly modelApi = CODEX_MODEL_API;
  private readonly binary: string;

  constructor(private readonly options: CodexOptions = {}) {
    this.binary = options.binary ?? defaultCodexBinary();
  }

  invocation(task: AgentTask): AgentInvocation {
    const words = [shellQuote(this.binary), 'exec'];
    if (task.sessionId) words.push('resume');
    words.push(
      '--json',
      // Flotilla's sandbox is the boundary; Codex's own (Landlock/seccomp) cannot nest inside it.
      '--dangerously-bypass-approvals-and-sandbox',
      // A sub-task's checkout is a git repository, but a bare scratch workspace need not be.
      '--skip-git-repo-check',
      '-c',
      'analytics.enabled=false',
      '-c',
      'check_for_update_on_startup=false',
      // A JSON string is a valid TOML basic string.
      '-c',
      shellQuote(`developer_instructions=${JSON.stringify(UNATTENDED_INSTRUCTIONS)}`),
      '"$@"',
    );
    if (this.options.model) words.push('-m', shellQuote(this.options.model));
    for (const setting of this.options.config ?? []) words.push('-c', shellQuote(setting));
    const env: Record<string, string> = {};
    if (task.sessionId) {
      words.push('"$FLOTILLA_SESSION_ID"');
      env.FLOTILLA_SESSION_ID = task.sessionId;
    }
    const input = inputPath(task, 'agent-input.md');
    // `-` reads the prompt from stdin. One pipe for both streams keeps a warning from landing in
    // the middle of a JSON line.
    words.push('-', '<', shellQuote(input), '2>&1');
    const command = [
      'if [ -z "${CODEX_API_KEY:-}" ] && [ -n "${OPENAI_API_KEY:-}" ]; then export CODEX_API_KEY="$OPENAI_API_KEY"; fi',
      'set --',
      'if [ -n "${OPENAI_BASE_URL:-}" ]; then set -- -c "openai_base_url=\\"$OPENAI_BASE_URL\\""; fi',
      `exec ${words.join(' ')}`,
    ].join('\n');
    return { command, env, files: { [input]: agentInput(task) } };
  }

  parser(sessionCostUsd = 0): OutputParser {
    return new CodexParser(this.options.model, sessionCostUsd);
  }
}
