/** Quoting for the bash every sandbox runs its commands with. */

/** Single-quotes a word for bash: whatever it holds, bash reads it as one literal word. */
export function shellQuote(word: string): string {
  return `'${word.replace(/'/g, `'\\''`)}'`;
}
