/** Short summaries of text for status and commit messages. */

export function firstLine(text: string): string {
  const line = text.trim().split('\n')[0];
  return line.length > 72 ? `${line.slice(0, 69)}...` : line;
}

export function lastLines(text: string, n: number): string {
  return text.trimEnd().split('\n').slice(-n).join('\n');
}

/** At most `max` characters, saying how much was cut: for text a sender controls. */
export function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max)}… (${text.length - max} more characters)` : text;
}
