/**
 * How Flotilla drives one kind of coding agent: a harness per agent CLI beside this file
 * (shell.ts, claude-code.ts, codex.ts). Activities only ever see this interface, and every
 * harness passes the same contract suite, test/support/harness-contract.ts.
 */
import type { BriefContext } from '../contracts/brief';

export interface AgentTask {
  /** The sub-task the agent works on; for an agent that is none's, its role ("planner", "resolver", "repair"). */
  subTaskId: string;
  objective: string;
  prompt: string;
  /** For a sub-task's agent: what its brief says beyond the objective and the prompt. */
  brief?: BriefContext;
  /**
   * An in-sandbox directory (the sandbox's scratch dir) for the files that carry the agent's
   * input: text of any size travels in files, never in argv or the environment, which Linux caps
   * at 128 KiB a string.
   */
  inputDir: string;
  /** Continue this earlier session of the same agent, where the harness supports it. */
  sessionId?: string;
  /** A message for a resumed agent: an operator's answer or instruction. */
  message?: string;
  /** What Flotilla did to the workspace meanwhile (paths outside the sub-task's it reverted). */
  notice?: string;
  /** At most this many model turns in this invocation, where the harness supports a limit. */
  maxTurns?: number;
  /** The previous attempt was interrupted (the worker process died): inspect before redoing. */
  interrupted?: boolean;
  /**
   * What the agent's session may have cost in all by the end of this invocation, for an agent that
   * enforces a budget itself. Flotilla stops the agent from the host as well.
   */
  sessionBudgetUsd?: number;
}

export interface AgentInvocation {
  /** Run with `bash -c` in the workspace. */
  command: string;
  /** Variables the agent needs, and nothing else: the sandbox adds only PATH, HOME and LANG. */
  env: Record<string, string>;
  /** Files to write (in-sandbox path to content) before the command runs: its input. */
  files: Record<string, string>;
}

/** What the agent has done so far, read from its output; small enough for a heartbeat. */
export interface AgentProgress {
  turns: number;
  toolCalls: number;
  /** Dollars this invocation has cost, as reported by the agent or priced from its token counts. */
  costUsd: number;
  sessionId?: string;
  /** A one-line description of the latest event ("tool Write src/a.ts"). */
  lastEvent?: string;
}

export interface AgentOutcome extends AgentProgress {
  /** The agent's final message, truncated. */
  finalMessage?: string;
  /** Set when the agent stopped because it needs an answer: the question. */
  question?: string;
  /** The agent stopped because it reached its turn limit. */
  hitTurnLimit: boolean;
  /** The agent stopped itself because it reached its budget (sessionBudgetUsd). */
  hitBudget: boolean;
}

/** Reads an agent's output stream incrementally. */
export interface OutputParser {
  push(chunk: string): void;
  progress(): AgentProgress;
  finish(exitCode: number): AgentOutcome;
}

/**
 * What a worker must have to run one kind of agent, checked before a run spends anything: an
 * agent that starts without them does not fail, it hangs (Codex without a key retries for ever).
 */
export interface AgentRequirements {
  /**
   * The executable a local sandbox mounts from the worker's host (it throws when its package is
   * not installed); absent when the sandbox brings its own, as every sandbox brings bash.
   */
  binary?: () => string;
  /** Variables the agent authenticates to its model API with: the worker must set at least one. */
  credentials: readonly string[];
}

export interface Harness {
  readonly kind: string;
  invocation(task: AgentTask): AgentInvocation;
  /**
   * A parser whose progress().costUsd is what this invocation alone has cost. `sessionCostUsd` is what
   * the resumed session had cost before this invocation: an agent that reports session totals has it
   * subtracted.
   */
  parser(sessionCostUsd?: number): OutputParser;
  /** Host environment variables this agent needs inside the sandbox (its API key, base URL). */
  readonly passEnv: readonly string[];
  /**
   * The model API the agent calls from its sandbox: the hostnames it uses by default, and the
   * variable that points it elsewhere (whose host:port the worker's configuration thus names).
   */
  readonly modelApi?: { readonly hostnames: readonly string[]; readonly baseUrlEnv: string };
}
