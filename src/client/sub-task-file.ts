/** Reading one sub-task from a file, for `flotilla add`: YAML or JSON, checked against the sub-task schema. */
import { readFileSync } from 'node:fs';
import YAML from 'yaml';
import { RequestError, SubTask, describeIssues } from '../contracts/request';

/**
 * The sub-task in `file`, as the request schema reads a sub-task. Whether it fits the running
 * plan (a unique id, known dependencies) only the run can say.
 */
export function loadSubTaskFile(file: string): SubTask {
  const yaml = /\.ya?ml$/i.test(file);
  let raw: unknown;
  try {
    const text = readFileSync(file, 'utf8');
    raw = yaml ? YAML.parse(text) : JSON.parse(text);
  } catch (err) {
    const why = (err as NodeJS.ErrnoException).code ? 'cannot be read' : `is not valid ${yaml ? 'YAML' : 'JSON'}`;
    throw new RequestError([`${file} ${why}: ${(err as Error).message}`]);
  }
  const parsed = SubTask.safeParse(raw, { reportInput: true });
  if (!parsed.success) throw new RequestError(describeIssues(parsed.error.issues, '(sub-task)'));
  return parsed.data;
}
