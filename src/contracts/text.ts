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

/** Bytes one UTF-16 unit takes in a JSON payload (escapes, UTF-8; a surrogate is half of 4). */
function jsonBytes(code: number): number {
  if (
    code === 0x22 ||
    code === 0x5c ||
    code === 0x08 ||
    code === 0x0c ||
    code === 0x0a ||
    code === 0x0d ||
    code === 0x09
  )
    return 2;
  if (code < 0x20) return 6;
  if (code < 0x80) return 1;
  if (code < 0x800 || (code >= 0xd800 && code <= 0xdfff)) return 2;
  return 3;
}

/** The longest prefix (or, with fromEnd, suffix) of `text` that takes at most `max` bytes in JSON. */
function within(text: string, max: number, fromEnd: boolean): string {
  let used = 0;
  let n = 0;
  for (; n < text.length; n++) {
    used += jsonBytes(text.charCodeAt(fromEnd ? text.length - 1 - n : n));
    if (used > max) break;
  }
  // Never split a surrogate pair: half of one would be escaped to six bytes, and is not text.
  const edge = fromEnd ? text.charCodeAt(text.length - n) : text.charCodeAt(n - 1);
  if (n > 0 && n < text.length && (fromEnd ? edge >= 0xdc00 && edge <= 0xdfff : edge >= 0xd800 && edge <= 0xdbff)) n--;
  return fromEnd ? text.slice(text.length - n) : text.slice(0, n);
}

/**
 * `text` cut, in order, into pieces of at most `max` bytes each once JSON-encoded: a text too
 * large for one payload (a big plan, a rollover's carry) travels a piece at a time.
 */
export function pieces(text: string, max: number): string[] {
  const out: string[] = [];
  for (let at = 0; at < text.length;) {
    const piece = within(text.slice(at, at + max), max, false);
    if (!piece.length) throw new Error(`pieces: ${max} bytes cannot hold the character at ${at}`);
    out.push(piece);
    at += piece.length;
  }
  return out.length ? out : [''];
}

/**
 * `text` as a short excerpt for a report that many sub-tasks add up in one payload: its first and
 * last bytes with a marker between, each end bounded by its size once JSON-encoded. The full
 * text stays in the artifact the report names.
 */
export function excerpt(text: string, headBytes: number, tailBytes: number): string {
  if (within(text, headBytes + tailBytes, false).length === text.length) return text;
  return `${within(text, headBytes, false)}\n…\n${within(text, tailBytes, true)}`;
}

/** Bytes `value` takes as JSON in UTF-8, as a payload carries it; pure JavaScript, so workflow code can measure too. */
export function jsonSize(value: unknown): number {
  const json = JSON.stringify(value) ?? '';
  let bytes = 0;
  for (let i = 0; i < json.length; i++) {
    const code = json.charCodeAt(i);
    // A surrogate pair is 4 bytes: 2 for each half.
    bytes += code < 0x80 ? 1 : code < 0x800 || (code >= 0xd800 && code <= 0xdfff) ? 2 : 3;
  }
  return bytes;
}

/** The largest time a JavaScript Date holds, in milliseconds either side of 1970. */
const LAST_DATE_MS = 8.64e15;

/**
 * `ms` as an ISO 8601 time, clamped into the range a Date holds: a time computed from a value in
 * history is shown, never thrown over (`toISOString` throws a RangeError outside that range).
 */
export function isoTime(ms: number): string {
  const clamped = Number.isNaN(ms) ? 0 : Math.max(-LAST_DATE_MS, Math.min(LAST_DATE_MS, ms));
  return new Date(clamped).toISOString();
}
