/**
 * Any shell command as an agent. The prompt is in the file $FLOTILLA_PROMPT_FILE, and also in
 * $FLOTILLA_PROMPT while it is at most TEXT_VARIABLE_CAP bytes (Linux refuses to start a program
 * with a longer string in its environment); the same goes for $FLOTILLA_OBJECTIVE(_FILE),
 * $FLOTILLA_RESUME_MESSAGE(_FILE) and, for a sub-task's agent, its brief (src/contracts/brief.ts)
 * in $FLOTILLA_BRIEF(_FILE) and its owned and shared paths, one a line, in
 * $FLOTILLA_OWNED_PATHS(_FILE) and $FLOTILLA_SHARED_PATHS(_FILE). A command that wants to report
 * progress prints lines of the form
 *
 *   ::flotilla {"turns": 3, "costUsd": 0.42, "question": "Which database?", "sessionId": "s1"}
 *
 * where every field is optional and each line states totals so far (a lower total than an earlier
 * line's is ignored). A `question` means the agent stopped because it needs an answer. On resume,
 * $FLOTILLA_RESUME_MESSAGE_FILE holds the answer and $FLOTILLA_SESSION_ID the session it
 * reported; $FLOTILLA_NOTICES_FILE is where Flotilla writes what it did to the workspace while
 * the command runs (paths outside the sub-task's it reverted; the file exists once it has); $FLOTILLA_INTERRUPTED=1 says the previous attempt died midway; $FLOTILLA_MAX_TURNS
 * is its turn limit, if any. $FLOTILLA_SUBTASK_ID names the sub-task; $FLOTILLA_WORKER_ID is the same value under its old name, deprecated ("worker" now
 * means the worker process only) and kept so that existing commands keep working.
 */
import { brief } from '../contracts/brief';
import { LineSplitter, truncate } from './lines';
import { NOTICES_FILE, inputPath } from './protocol';
import type {
  AgentInvocation,
  AgentOutcome,
  AgentProgress,
  AgentRequirements,
  AgentTask,
  Harness,
  OutputParser,
} from './types';

const MARKER = '::flotilla ';

/** The largest text (UTF-8 bytes) also passed in a variable; beyond it only the _FILE variant is set. */
export const TEXT_VARIABLE_CAP = 32 * 1024;

class ShellParser implements OutputParser {
  private readonly lines = new LineSplitter();
  private state: AgentProgress = { turns: 0, toolCalls: 0, costUsd: 0 };
  private question?: string;
  private lastLine = '';

  push(chunk: string): void {
    for (const line of this.lines.push(chunk)) this.read(line);
  }

  private read(line: string): void {
    if (!line.startsWith(MARKER)) {
      if (line.trim()) this.lastLine = line;
      return;
    }
    let report: Record<string, unknown>;
    try {
      report = JSON.parse(line.slice(MARKER.length));
    } catch {
      return;
    }
    // Totals never go down: a later line (printed by anything the agent runs) cannot undo what an
    // earlier one reported, so a budget counts the highest figure.
    const num = (v: unknown, before: number) =>
      typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.max(v, before) : before;
    this.state = {
      turns: num(report.turns, this.state.turns),
      toolCalls: num(report.toolCalls, this.state.toolCalls),
      costUsd: num(report.costUsd, this.state.costUsd),
      sessionId: typeof report.sessionId === 'string' ? report.sessionId : this.state.sessionId,
      lastEvent: this.state.lastEvent,
    };
    if (typeof report.question === 'string' && report.question) this.question = truncate(report.question, 2000);
  }

  progress(): AgentProgress {
    return { ...this.state, lastEvent: this.lastLine ? truncate(this.lastLine, 200) : undefined };
  }

  finish(_exitCode: number): AgentOutcome {
    for (const line of this.lines.flush()) this.read(line);
    return {
      ...this.progress(),
      finalMessage: this.lastLine ? truncate(this.lastLine, 500) : undefined,
      question: this.question,
      hitTurnLimit: false,
      hitBudget: false,
    };
  }
}

/** A shell agent runs the sandbox's own bash and calls no model API. */
export function shellRequirements(): AgentRequirements {
  return { credentials: [] };
}

export class ShellHarness implements Harness {
  readonly kind = 'shell';
  readonly passEnv: readonly string[] = [];

  constructor(private readonly command: string) {}

  invocation(task: AgentTask): AgentInvocation {
    const env: Record<string, string> = { FLOTILLA_SUBTASK_ID: task.subTaskId, FLOTILLA_WORKER_ID: task.subTaskId };
    const files: Record<string, string> = {};
    const text = (name: string, value: string, file: string) => {
      files[inputPath(task, file)] = value;
      env[`${name}_FILE`] = inputPath(task, file);
      if (Buffer.byteLength(value) <= TEXT_VARIABLE_CAP) env[name] = value;
    };
    text('FLOTILLA_PROMPT', task.prompt, 'prompt.md');
    text('FLOTILLA_OBJECTIVE', task.objective, 'objective.md');
    if (task.brief) {
      text('FLOTILLA_BRIEF', brief(task, task.brief), 'brief.md');
      text('FLOTILLA_OWNED_PATHS', task.brief.ownedPaths.join('\n'), 'owned-paths.txt');
      text('FLOTILLA_SHARED_PATHS', task.brief.sharedPaths.join('\n'), 'shared-paths.txt');
    }
    if (task.message) text('FLOTILLA_RESUME_MESSAGE', task.message, 'resume-message.md');
    env.FLOTILLA_NOTICES_FILE = inputPath(task, NOTICES_FILE);
    if (task.sessionId) env.FLOTILLA_SESSION_ID = task.sessionId;
    if (task.interrupted) env.FLOTILLA_INTERRUPTED = '1';
    if (task.maxTurns !== undefined) env.FLOTILLA_MAX_TURNS = String(task.maxTurns);
    return { command: this.command, env, files };
  }

  parser(): OutputParser {
    return new ShellParser();
  }
}
