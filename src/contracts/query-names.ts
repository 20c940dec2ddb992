/**
 * The status query's name, in a module that loads nothing: `flotilla status` sends it without
 * loading messages.ts (its schemas, zod and the workflow SDK take a third of the command's time).
 * A name in every history: it never changes.
 */
export const STATUS_QUERY = 'status';

/** Every state a sub-task's status line can be in, in the order a run moves through them; a name in every history. */
export const SUB_TASK_STATES = ['queued', 'running', 'suspended', 'done', 'failed', 'cancelled', 'dropped'] as const;
