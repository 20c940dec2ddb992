/** Short summaries of text for status and commit messages. */

export function firstLine(text: string): string {
  const line = text.trim().split('\n')[0];
  return line.length > 72 ? `${line.slice(0, 69)}...` : line;
}

export function lastLines(text: string, n: number): string {
  return text.trimEnd().split('\n').slice(-n).join('\n');
}

/** At most `max` characters in all, saying how much was cut: for text a sender controls. */
export function clip(text: string, max: number): string {
  if (text.length <= max) return text;
  const keep = Math.max(0, max - `… (+${text.length} chars)`.length);
  return `${text.slice(0, keep)}… (+${text.length - keep} chars)`;
}
