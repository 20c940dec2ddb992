/**
 * The brief: what a sub-task's agent is told, whichever kind of agent it is. The objective, its
 * sub-task (the prompt, with what it builds on and why a redo or retry is one: predecessorsNote,
 * retryNote, redoNote), the paths it may change and that anything else is refused, and the other
 * sub-tasks one line each. Claude Code and Codex read it as their prompt; a shell agent finds it
 * in $FLOTILLA_BRIEF_FILE and its parts in variables of their own (src/agents/shell.ts).
 *
 * Pure: the others' lines are made in workflow code, where the plan is.
 */
import { clip, firstLine } from './text';

/** Where a sub-task's agent may write, and who else works on the plan. */
export interface BriefContext {
  ownedPaths: string[];
  sharedPaths: string[];
  /** The plan's other sub-tasks, one line each, bounded (otherSubTaskLines). */
  others: string[];
}

/** Characters the others' lines take at most in all: a plan of 100 sub-tasks shrinks to this. */
export const OTHERS_MAX_CHARS = 2_000;
const OTHER_LINE_MAX_CHARS = 160;

/** "… and 97 more sub-task(s)": what stands for the lines that do not fit. */
function more(n: number): string {
  return `… and ${n} more sub-task(s)`;
}

/**
 * One line for each sub-task of the plan but `selfId` (its id, owned paths and first prompt
 * line), as many as fit in OTHERS_MAX_CHARS, then how many more there are.
 */
export function otherSubTaskLines(
  subTasks: readonly { id: string; ownedPaths: string[]; prompt: string }[],
  selfId: string,
): string[] {
  const others = subTasks.filter((t) => t.id !== selfId);
  const lines: string[] = [];
  let used = 0;
  for (const [i, t] of others.entries()) {
    const line = clip(`${t.id} (owns ${t.ownedPaths.join(', ')}): ${firstLine(t.prompt)}`, OTHER_LINE_MAX_CHARS);
    const room = i === others.length - 1 ? 0 : more(others.length).length + 1;
    if (used + line.length + 1 + room > OTHERS_MAX_CHARS) {
      lines.push(more(others.length - i));
      break;
    }
    lines.push(line);
    used += line.length + 1;
  }
  return lines;
}

/** The paths as the agent reads them: "." (or nothing) is the whole repository. */
function describePaths(paths: string[]): string {
  return paths.map((p) => (p.replace(/^\.\/?$/, '') === '' ? '. (the whole repository)' : p)).join(', ');
}

/** The brief of sub-task `subTaskId`, between BEGIN and END lines naming it. */
export function brief(task: { objective: string; subTaskId: string; prompt: string }, ctx: BriefContext): string {
  const id = JSON.stringify(task.subTaskId);
  return [
    `===== BEGIN FLOTILLA BRIEF: sub-task ${id} =====`,
    'You are one of a team of coding agents working on one repository in parallel, each on a sub-task of its own.',
    '',
    `The team's objective:\n${task.objective.trim()}`,
    '',
    `Your sub-task, ${id}:\n${task.prompt.trim()}`,
    '',
    `Paths you own: ${describePaths(ctx.ownedPaths)}`,
    ...(ctx.sharedPaths.length
      ? [`Shared paths, which every sub-task may change too: ${describePaths(ctx.sharedPaths)}`]
      : []),
    'Change nothing outside these paths. When you finish, Flotilla checks every path your work changed: a change anywhere else is refused, and the sub-task fails naming it.',
    ...(ctx.others.length
      ? [
          '',
          'The other sub-tasks, which other agents do (leave their work to them):',
          ...ctx.others.map((l) => `- ${l}`),
        ]
      : []),
    `===== END FLOTILLA BRIEF: sub-task ${id} =====`,
  ].join('\n');
}
