/** Where Flotilla keeps its state, and which Temporal it talks to; all from the environment. */
import os from 'node:os';
import path from 'node:path';

/** Sandboxes, the staging repository, artifacts and the embedded server's database live here. */
export function dataDir(): string {
  return path.resolve(process.env.FLOTILLA_HOME ?? path.join(os.homedir(), '.flotilla'));
}

export const DEFAULT_TASK_QUEUE = 'flotilla';

export function taskQueue(): string {
  return process.env.FLOTILLA_TASK_QUEUE ?? DEFAULT_TASK_QUEUE;
}

export function namespace(): string {
  return process.env.TEMPORAL_NAMESPACE ?? 'default';
}
