/**
 * How a sub-task's invocations and collected work read in its report and to the people waiting
 * on it. Pure: no workflow APIs, so the unit tests call these directly.
 */
import type { AgentRunReport, CommandReport } from '../../activities';
import type { SubTaskReport } from '../../contracts/reports';
import { clip } from '../../contracts/text';

/** Why an invocation stopped short of finishing and the sub-task should wait for a person; undefined when it finished. */
export function suspension(
  invocation: AgentRunReport,
  spentUsd: number,
  budgetUsd: number | undefined,
  maxTurns: number | undefined,
): string | undefined {
  const { agent } = invocation;
  if (agent.question) return 'the agent needs an answer';
  if (invocation.budgetExceeded)
    return `the agent used its budget ($${spentUsd.toFixed(2)} of $${(budgetUsd ?? 0).toFixed(2)})`;
  // Agents that cannot enforce a limit themselves (shell commands) are held to it here.
  if (agent.hitTurnLimit || (maxTurns !== undefined && agent.turns > maxTurns))
    return `the agent reached its turn limit (${maxTurns ?? 'its own'})`;
  return undefined;
}

/** The report's fields for a command (`what`: "the setup command", "the agent") that failed or timed out. */
export function commandFailure(what: string, command: CommandReport): Partial<SubTaskReport> & { status: 'failed' } {
  return {
    status: 'failed',
    reason: command.timedOut ? `${what} timed out` : `${what} exited with code ${command.exitCode}`,
    exitCode: command.exitCode,
    tail: command.tail,
    logRef: command.logRef,
  };
}

/** Why work that changed paths outside the sub-task's own is refused, naming the first few. */
export function outOfScopeReason(
  work: { outOfScope: string[]; outOfScopeCount: number },
  ownedPaths: string[],
): string {
  const more =
    work.outOfScopeCount > work.outOfScope.length ? ` and ${work.outOfScopeCount - work.outOfScope.length} more` : '';
  return `changed ${work.outOfScopeCount} path(s) outside its ownedPaths (${ownedPaths.join(', ')}): ${work.outOfScope.join(', ')}${more}`;
}

/** Lines and characters of an agent's final message its report keeps as its summary. */
const SUMMARY_LINES = 6;
const SUMMARY_MAX_CHARS = 600;

/** The first lines of an agent's final message: what the sub-tasks that depend on it are told it did. */
export function summaryOf(finalMessage: string | undefined): string | undefined {
  const text = finalMessage?.trim();
  if (!text) return undefined;
  return clip(text.split('\n').slice(0, SUMMARY_LINES).join('\n'), SUMMARY_MAX_CHARS);
}
