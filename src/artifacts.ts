/**
 * Logs and command output live here, content-addressed, so workflow history can carry a short
 * reference and a tail instead of the text itself. The store is private to the worker's user
 * (0700 directory, 0600 files): logs can hold whatever an agent printed.
 */
import { createHash } from 'node:crypto';
import { createWriteStream, existsSync, type WriteStream } from 'node:fs';
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';

/** Bytes of output a report carries inline; the rest stays in the artifact. */
export const TAIL_BYTES = 2048;
/** A streamed log keeps its first and its last this many characters; the middle is dropped, and says so. */
export const LOG_KEEP = 8 * 1024 * 1024;

export function tail(text: string, max = TAIL_BYTES): string {
  if (Buffer.byteLength(text) <= max) return text;
  const cut = Buffer.from(text).subarray(-max).toString('utf8');
  const firstNewline = cut.indexOf('\n');
  return '…' + (firstNewline >= 0 && firstNewline < 200 ? cut.slice(firstNewline) : cut);
}

export class ArtifactStore {
  constructor(private readonly dir: string) {}

  /** Stores `content` and returns its reference, "sha256:<hex>". Storing twice is harmless. */
  async put(content: string | Uint8Array): Promise<string> {
    const hex = createHash('sha256').update(content).digest('hex');
    const file = this.fileFor(hex);
    if (!existsSync(file)) {
      await this.ensureDir();
      const tmp = `${file}.${process.pid}.tmp`;
      await writeFile(tmp, content, { mode: 0o600 });
      await rename(tmp, file);
    }
    return `sha256:${hex}`;
  }

  /** A log written as it arrives, so memory stays bounded however much a command prints. */
  async writer(): Promise<LogWriter> {
    await this.ensureDir();
    const tmp = path.join(this.dir, `stream.${process.pid}.${Date.now()}.${Math.random().toString(36).slice(2)}.tmp`);
    return new LogWriter(tmp, (hex) => this.fileFor(hex));
  }

  async get(ref: string): Promise<Buffer> {
    return readFile(this.pathOf(ref));
  }

  pathOf(ref: string): string {
    const m = /^sha256:([0-9a-f]{64})$/.exec(ref);
    if (!m) throw new Error(`not an artifact reference: ${ref}`);
    return this.fileFor(m[1]);
  }

  private async ensureDir(): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
  }

  private fileFor(hex: string): string {
    return path.join(this.dir, `${hex}.log`);
  }
}

/**
 * Streams the first LOG_KEEP characters to disk and keeps a rolling window of the last ones in
 * memory; `close` appends that window after a line saying how much was dropped in between.
 */
export class LogWriter {
  private readonly out: WriteStream;
  private readonly hash = createHash('sha256');
  private headChars = 0;
  private recent = '';
  private dropped = 0;
  private end = '';

  constructor(
    private readonly tmp: string,
    private readonly finalPath: (hex: string) => string,
  ) {
    this.out = createWriteStream(tmp, { mode: 0o600 });
  }

  write(chunk: string): void {
    this.end = (this.end + chunk).slice(-TAIL_BYTES * 2);
    const room = LOG_KEEP - this.headChars;
    if (room > 0) {
      const head = chunk.slice(0, room);
      this.emit(head);
      this.headChars += head.length;
      chunk = chunk.slice(head.length);
    }
    if (!chunk) return;
    this.recent += chunk;
    if (this.recent.length > 2 * LOG_KEEP) {
      this.dropped += this.recent.length - LOG_KEEP;
      // Copy, so the window does not keep the whole concatenation alive as a sliced string.
      this.recent = Buffer.from(this.recent.slice(-LOG_KEEP)).toString();
    }
  }

  /** The last few kilobytes of output so far (for heartbeats and the report's tail). */
  last(): string {
    return this.end;
  }

  async close(): Promise<string> {
    let rest = this.recent;
    if (rest.length > LOG_KEEP) {
      this.dropped += rest.length - LOG_KEEP;
      rest = rest.slice(-LOG_KEEP);
    }
    if (this.dropped > 0) this.emit(`\n… [flotilla: ${this.dropped} characters of output omitted] …\n`);
    this.emit(rest);
    await new Promise<void>((resolve, reject) => this.out.end((err?: Error | null) => (err ? reject(err) : resolve())));
    const hex = this.hash.digest('hex');
    const file = this.finalPath(hex);
    if (existsSync(file)) await rm(this.tmp, { force: true });
    else await rename(this.tmp, file);
    return `sha256:${hex}`;
  }

  /** Drops the partial log (the command could not run). */
  async discard(): Promise<void> {
    this.out.destroy();
    await rm(this.tmp, { force: true });
  }

  private emit(text: string): void {
    if (!text) return;
    this.hash.update(text);
    this.out.write(text);
  }
}
