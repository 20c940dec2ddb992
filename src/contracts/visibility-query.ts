/**
 * Strings of Temporal's visibility query language, in a module that loads nothing (no SDK):
 * `flotilla status` asks which runs continue a run without loading the client.
 */

/** The search attribute a continuing run carries (src/contracts/search-attributes.ts defines its key). */
export const CONTINUES_ATTRIBUTE = 'FlotillaContinues';

/**
 * A string literal of the visibility query language. Its parser (a MySQL dialect) reads a
 * backslash as an escape, so both it and the quote are escaped: a value can neither end the
 * literal nor swallow the quote that does. (The dev server's SQLite store then matches no value
 * holding a backslash at all: such a filter finds nothing, never too much.)
 */
export function quote(value: string): string {
  return `'${value.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
}

/** The runs that continue run `runId`, newest first. */
export function continuedByQuery(runId: string): string {
  return `WorkflowType = 'leaderWorkflow' AND ${CONTINUES_ATTRIBUTE} = ${quote(runId)}`;
}
