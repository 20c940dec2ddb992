/**
 * What the CLI writes to a terminal: colour only where a person reads it, text from agents made
 * inert, and a live view that redraws only the lines that changed.
 */
import { setting } from '../config/variables';

export interface Output {
  write(text: string): unknown;
  isTTY?: boolean;
  columns?: number;
  rows?: number;
}

/** Colour on a terminal, never with NO_COLOR (https://no-color.org) or TERM=dumb. */
export function colourEnabled(out: Output, env: NodeJS.ProcessEnv = process.env): boolean {
  if (setting('NO_COLOR', env)) return false;
  if (setting('TERM', env) === 'dumb') return false;
  return out.isTTY === true;
}

const CODES = {
  bold: [1, 22],
  dim: [2, 22],
  red: [31, 39],
  green: [32, 39],
  yellow: [33, 39],
  cyan: [36, 39],
} as const;
export type Style = keyof typeof CODES;

export type Painter = (style: Style, text: string) => string;

export function painter(enabled: boolean): Painter {
  return enabled ? (style, text) => `\x1b[${CODES[style][0]}m${text}\x1b[${CODES[style][1]}m` : (_style, text) => text;
}

/**
 * Removes control characters (escape sequences included) but newlines and tabs: statuses carry
 * text an agent wrote (questions, reasons, its last output line), which must not drive the terminal.
 */
export function inert(text: string): string {
  return text.replace(/[\x00-\x08\x0b-\x1f\x7f-\x9f]/g, '');
}

/**
 * `text` on one line: each line break in it is shown as `\n`. Every line Flotilla prints is
 * built of such pieces, so that a question, a reason or a file name an agent chose cannot start
 * a line of its own (a fake `approve:` line in `flotilla status`, say).
 */
export function oneLine(text: string): string {
  return text.replace(/\r\n|[\n\r\u2028\u2029]/g, '\\n');
}

/** Lines as they are printed: each one inert and on one line, whatever the text in it. */
export function printableLines(lines: readonly string[]): string {
  return lines.map((line) => oneLine(inert(line))).join('\n');
}

/**
 * A block of lines kept up to date in place: each frame moves the cursor back to the block's
 * top and rewrites only the lines that differ from the last frame. Lines are cut to the
 * terminal's width, since a wrapped line would throw the line count off.
 */
export class InPlaceView {
  private shown: string[] = [];

  constructor(private readonly out: Output) {}

  draw(frame: string[]): void {
    const width = this.out.columns ? this.out.columns - 1 : Number.POSITIVE_INFINITY;
    const height = this.out.rows ? this.out.rows - 1 : Number.POSITIVE_INFINITY;
    let lines = frame.map((l) => oneLine(inert(l)).slice(0, width));
    if (lines.length > height) lines = [...lines.slice(0, height - 1), `… ${lines.length - height + 1} more line(s)`];
    let text = this.shown.length ? `\x1b[${this.shown.length}A\r` : '';
    lines.forEach((line, i) => {
      // An unchanged line is stepped over with a newline, which moves down without erasing.
      text += line === this.shown[i] ? '\n' : `\x1b[2K${line}\n`;
    });
    if (lines.length < this.shown.length) text += '\x1b[J';
    this.shown = lines;
    this.out.write(text);
  }
}

/**
 * For output that is not a terminal: one line per fact that changed since the last frame.
 * A fact is a [key, line] pair; a line is printed when its key is new or its text differs.
 */
export class ChangeLog {
  private last = new Map<string, string>();

  constructor(
    private readonly out: Output,
    private readonly clock: () => Date = () => new Date(),
  ) {}

  update(facts: [string, string][]): void {
    const stamp = this.clock().toISOString().slice(11, 19);
    for (const [key, line] of facts) {
      if (this.last.get(key) === line) continue;
      this.last.set(key, line);
      this.out.write(`${stamp} ${oneLine(inert(line))}\n`);
    }
  }
}
