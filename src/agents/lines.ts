/** Splits a stream of output chunks into complete lines; agents' event streams are line-based. */
export class LineSplitter {
  private rest = '';

  /** Returns the complete lines in `chunk` (plus what was buffered before). */
  push(chunk: string): string[] {
    const text = this.rest + chunk;
    const lines = text.split('\n');
    this.rest = lines.pop() ?? '';
    // A single huge line (a file dump) must not grow the buffer without bound.
    if (this.rest.length > 1024 * 1024) this.rest = '';
    return lines;
  }

  /** The last, unterminated line, once the stream has ended. */
  flush(): string[] {
    const last = this.rest;
    this.rest = '';
    return last ? [last] : [];
  }
}

export function truncate(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
