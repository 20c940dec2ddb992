/**
 * The unattended-agent protocol shared by the CLI adapters: how an agent asks a question, what a
 * resumed or interrupted agent is told, and what it reads as its input (from a file on stdin, so
 * neither the shell nor the kernel's argument limits ever see user text).
 */
import { brief } from '../contracts/brief';
import { truncate } from './lines';
import type { AgentTask } from './types';

const NEEDS_ANSWER = 'NEEDS_ANSWER:';

/** Appended to the agent's system instructions. */
export const UNATTENDED_INSTRUCTIONS = [
  'You are running unattended, as one of a team of agents, each on a sub-task of its own; nobody reads your messages while you work.',
  'Make the changes in this repository yourself. Whatever you leave uncommitted is committed for you when you finish.',
  'If you cannot proceed without an answer from a human, stop working and end your final message with a line of the form',
  `${NEEDS_ANSWER} <your question>`,
  'You will be resumed with the answer. Never write that line otherwise.',
].join('\n');

export const INTERRUPTED_NOTE =
  'A previous attempt at this task was interrupted midway. Before doing anything else, inspect the workspace ' +
  '(git status, git log, git diff) to see what was already done, and continue from there rather than redoing it.';

/**
 * The file in the agent's input directory where Flotilla writes, as it happens, what it did to
 * the workspace while the agent ran (paths outside the sub-task's it reverted), one notice after
 * another. A shell agent finds it in $FLOTILLA_NOTICES_FILE; every agent is also told the latest
 * notice in its next invocation's input.
 */
export const NOTICES_FILE = 'notices.md';

/**
 * What an invocation of the agent is told beyond the task prompt: the interruption note, what
 * Flotilla did to its workspace, and the operator's message. For a resumed session this is the whole prompt (the task is in its history).
 */
export function followUp(task: AgentTask): string | undefined {
  const parts: string[] = [];
  if (task.interrupted) parts.push(INTERRUPTED_NOTE);
  if (task.notice) parts.push(`A notice from Flotilla:\n\n${task.notice}`);
  if (task.message)
    parts.push(`A message from the operator (the answer to your question, or a new instruction):\n\n${task.message}`);
  if (parts.length === 0 && task.sessionId) parts.push('Continue the task.');
  return parts.length ? parts.join('\n\n') : undefined;
}

/**
 * What a CLI agent reads on standard input: the task prompt (a sub-task's brief) and then the
 * follow-up, or for a resumed session the follow-up alone (the task is in its history).
 */
export function agentInput(task: AgentTask): string {
  const extra = followUp(task);
  if (task.sessionId) return extra!;
  const prompt = task.brief ? brief(task, task.brief) : task.prompt;
  return extra ? `${prompt}\n\n${extra}` : prompt;
}

/** An input file of the task's, as its in-sandbox path. */
export function inputPath(task: AgentTask, name: string): string {
  return `${task.inputDir.replace(/\/+$/, '')}/${name}`;
}

const QUESTION_LINE = /^[\s>*_`]*NEEDS_ANSWER[*_`]*:[*_`]*[ \t]*(.*?)[\s*_`]*$/gm;

/** The question in an agent's final message, if it ends by asking one. */
export function questionIn(message: string | undefined): string | undefined {
  if (!message) return undefined;
  let question: string | undefined;
  for (const match of message.matchAll(QUESTION_LINE)) if (match[1]) question = match[1];
  return question ? truncate(question, 2000) : undefined;
}
