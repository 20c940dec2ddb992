/**
 * The status query's name, in a module that loads nothing: `flotilla status` sends it without
 * loading messages.ts (its schemas, zod and the workflow SDK take a third of the command's time).
 * A name in every history: it never changes.
 */
export const STATUS_QUERY = 'status';
