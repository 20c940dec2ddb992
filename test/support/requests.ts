/**
 * Requests as tests write them, from a few composable parts: a request on a repository
 * (`shellRequest`), its sub-tasks (`subTask`, `greet`), and the fields a test changes
 * (`withGates`, or any field of the request).
 */
import { type GateName, type LeaderRequestInput, RequestError, parseLeaderRequest } from '../../src/contracts/request';

export type SubTaskInput = NonNullable<LeaderRequestInput['subTasks']>[number];

/** A shell agent: runs `command` with bash in its workspace. */
export const shell = (command: string) => ({ kind: 'shell' as const, command });

/** A shell command that writes `content` to `file` and, unless `commit` is false, commits it. */
export function writeAgent(file: string, content: string, commit = true): string {
  const write = `mkdir -p "$(dirname '${file}')" && printf '%s\\n' '${content}' > '${file}'`;
  return commit ? `${write} && git add -A && git commit -qm 'write ${file}'` : write;
}

/** A sub-task whose shell agent runs `command`, owning the directory named after it. */
export function subTask(
  id: string,
  command: string,
  fields: { prompt?: string; ownedPaths?: string[]; dependsOn?: string[] } = {},
) {
  return { id, prompt: `do ${id}`, ownedPaths: [id], agent: shell(command), ...fields };
}
export type ShellSubTask = ReturnType<typeof subTask>;

/** A sub-task that greets, and in a review round writes the comments' bodies to `<id>/review.txt`. */
export const reviewed = (id: string) =>
  subTask(
    id,
    `mkdir -p ${id} && if printf '%s\\n' "$FLOTILLA_PROMPT" | grep -q '^\\[comment '; then printf '%s\\n' "$FLOTILLA_PROMPT" | sed -n '/^\\[comment /{n;p;}' > ${id}/review.txt; else printf 'hello from ${id}\\n' > ${id}/greeting.txt; fi && git add -A && git commit -qm ${id}`,
  );

/** A sub-task whose agent writes and commits `<id>/greeting.txt`: "hello from <id>". */
export const greet = (id: string) => subTask(id, writeAgent(`${id}/greeting.txt`, `hello from ${id}`));

/**
 * A request for `subTasks` on main of the repository at `url`, whose test command passes;
 * `fields` add to or replace any of its fields. Sub-tasks without an agent run `fields.agent`.
 */
export function shellRequest(url: string, subTasks: SubTaskInput[], fields: Partial<LeaderRequestInput> = {}) {
  return { objective: 'a test run', repo: { url, baseRef: 'main' }, testCmd: 'true', subTasks, ...fields };
}

/** A gate that waits for a person, as requests in tests write it. */
export const manual = { mode: 'manual' as const };

/** The `gates` field (for shellRequest) of a run held at each of these gates until a person decides. */
export function withGates(...gates: GateName[]): { gates: Partial<Record<GateName, typeof manual>> } {
  return { gates: Object.fromEntries(gates.map((gate) => [gate, manual])) };
}

/** What `validate` would say of `input`: each problem's line ("field: reason"), none when it is valid. */
export function requestProblems(input: unknown): string[] {
  try {
    parseLeaderRequest(input);
    return [];
  } catch (err) {
    if (err instanceof RequestError) return err.problems;
    throw err;
  }
}
