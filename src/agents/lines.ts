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

/** A string field of an agent's event, or undefined. */
export const str = (v: unknown): string | undefined => (typeof v === 'string' && v ? v : undefined);

export function firstLine(text: string): string {
  return text.trim().split('\n')[0] ?? '';
}

/**
 * Reads an agent's JSON-lines event stream. Lines that are not JSON objects are the CLI's own
 * messages (bad flags, missing credentials); the last one is kept, since it often says why an
 * invocation ended.
 */
export abstract class JsonEventReader {
  private readonly lines = new LineSplitter();
  protected lastPlainLine?: string;

  push(chunk: string): void {
    for (const line of this.lines.push(chunk)) this.read(line);
  }

  /** Reads what is left of the stream once it has ended. */
  protected drain(): void {
    for (const line of this.lines.flush()) this.read(line);
  }

  protected abstract onEvent(event: any): void;

  private read(line: string): void {
    let event: unknown;
    try {
      event = line.trimStart().startsWith('{') ? JSON.parse(line) : undefined;
    } catch {
      event = undefined;
    }
    if (event && typeof event === 'object') this.onEvent(event);
    else if (line.trim()) this.lastPlainLine = line.trim();
  }
}
