/**
 * Logs and command output live here, content-addressed, so workflow history can carry a short
 * reference and a tail instead of the text itself. The store is private to the worker's user
 * (0700 directory, 0600 files): logs can hold whatever an agent printed.
 *
 * With a shared store every artifact stored here is also published there (a streamed log by its
 * writer's caller, see publish), and one this host does not have is fetched from there into this
 * directory, so a log written on one host reads on any.
 */
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream, existsSync, type WriteStream } from 'node:fs';
import { appendFile, lstat, mkdir, readFile, readdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { permanent } from '../contracts/failures';

/** Bytes of output a report carries inline; the rest stays in the artifact. */
export const TAIL_BYTES = 2048;
/** A streamed log keeps its first this many characters and its last this many bytes; the middle is dropped, and says so. */
export const LOG_KEEP = 8 * 1024 * 1024;

export function tail(text: string, max = TAIL_BYTES): string {
  if (Buffer.byteLength(text) <= max) return text;
  const cut = Buffer.from(text).subarray(-max).toString('utf8');
  const firstNewline = cut.indexOf('\n');
  return '…' + (firstNewline >= 0 && firstNewline < 200 ? cut.slice(firstNewline) : cut);
}

/** Where artifacts go beyond this host: see StagingRepo.publishBlob and fetchBlob. */
export interface SharedArtifacts {
  publish(hex: string, file: string): Promise<void>;
  /** Writes the artifact to `file`; false when the shared store does not have it. */
  fetch(hex: string, file: string): Promise<boolean>;
}

export class ArtifactStore {
  constructor(
    private readonly dir: string,
    private readonly shared?: SharedArtifacts,
  ) {}

  /** Stores `content` and returns its reference, "sha256:<hex>". Storing twice is harmless. */
  async put(content: string | Uint8Array): Promise<string> {
    const hex = createHash('sha256').update(content).digest('hex');
    const file = this.fileFor(hex);
    if (!existsSync(file)) {
      await this.ensureDir();
      const tmp = `${file}.${process.pid}.tmp`;
      try {
        await writeFile(tmp, content, { mode: 0o600 });
        await rename(tmp, file);
      } catch (err) {
        await rm(tmp, { force: true });
        throw homeWriteError(err, 'storing an artifact', this.dir);
      }
    }
    // Also when the file was here already: the shared store may have lost it to gc since.
    await this.shared?.publish(hex, file);
    return `sha256:${hex}`;
  }

  /**
   * A log written as it arrives, so memory stays bounded however much a command prints; claimed
   * by run `runKey`, if given. Stored here only: the caller publishes it (publish), since what
   * to do when the shared store is away is the caller's to decide.
   */
  async writer(runKey?: string): Promise<LogWriter> {
    await this.ensureDir();
    const tmp = path.join(this.dir, `stream.${process.pid}.${Date.now()}.${Math.random().toString(36).slice(2)}.tmp`);
    return new LogWriter(tmp, (hex) => this.fileFor(hex), runKey ? (hex) => this.claim(runKey, hex) : undefined);
  }

  /** Publishes an artifact stored here to the shared store (a no-op without one). */
  async publish(ref: string): Promise<void> {
    await this.shared?.publish(ref.slice('sha256:'.length), this.pathOf(ref));
  }

  async get(ref: string): Promise<Buffer> {
    const file = this.pathOf(ref);
    if (this.shared && !existsSync(file)) await this.fetchShared(ref, file);
    return readFile(file);
  }

  /** Copies an artifact from the shared store into this directory, checking it is what its name says. */
  private async fetchShared(ref: string, file: string): Promise<void> {
    await this.ensureDir();
    const tmp = `${file}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
    try {
      // Published before its reference was returned to anyone: a retry would not find it either.
      if (!(await this.shared!.fetch(ref.slice('sha256:'.length), tmp)))
        throw permanent('ArtifactMissing', `artifact ${ref} is neither on this host nor in the shared store`);
      const hash = createHash('sha256');
      for await (const chunk of createReadStream(tmp)) hash.update(chunk as Buffer);
      if (`sha256:${hash.digest('hex')}` !== ref)
        throw new Error(`the shared store's copy of artifact ${ref} does not match its hash`);
      await rename(tmp, file);
    } finally {
      await rm(tmp, { force: true });
    }
  }

  pathOf(ref: string): string {
    const m = /^sha256:([0-9a-f]{64})$/.exec(ref);
    if (!m) throw new Error(`not an artifact reference: ${ref}`);
    return this.fileFor(m[1]);
  }

  // --- Claims: which runs stored each artifact, so retention removes one only when every run that
  // stored it has gone (src/retention/gc.ts). Content is shared between runs, so a writer claims first and
  // only then looks whether the file exists; prune hides a file first and only then re-reads the
  // claims. Whichever order the two interleave in, a claimed file is never lost.

  /** Records that run `runKey` stored artifact `hex` (artifacts/<runKey>.claims, one hex a line). */
  async claim(runKey: string, hex: string): Promise<void> {
    if (!/^[A-Za-z0-9_-]+$/.test(runKey)) throw new Error(`not a run key: ${runKey}`);
    await this.ensureDir();
    await appendFile(this.claimsFile(runKey), `${hex}\n`, { mode: 0o600 });
  }

  /** The artifacts each run claimed. */
  async claims(): Promise<Map<string, Set<string>>> {
    const byRun = new Map<string, Set<string>>();
    for (const name of existsSync(this.dir) ? await readdir(this.dir) : []) {
      const runKey = /^([A-Za-z0-9_-]+)\.claims$/.exec(name)?.[1];
      if (!runKey) continue;
      const text = await readFile(this.claimsFile(runKey), 'utf8').catch(() => '');
      byRun.set(runKey, new Set(text.split('\n').filter((l) => /^[0-9a-f]{64}$/.test(l))));
    }
    return byRun;
  }

  private claimsFile(runKey: string): string {
    return path.join(this.dir, `${runKey}.claims`);
  }

  /** Every stored artifact, by hex. */
  async stored(): Promise<string[]> {
    const names = existsSync(this.dir) ? await readdir(this.dir) : [];
    return names.flatMap((n) => /^([0-9a-f]{64})\.log$/.exec(n)?.[1] ?? []);
  }

  /**
   * Removes the artifacts `hexes` and the claims of the runs `gone`, except an artifact some other
   * run claimed meanwhile. Returns the bytes freed.
   */
  async prune(hexes: string[], gone: Set<string>): Promise<{ removed: number; bytes: number }> {
    const hidden = (hex: string) => `${this.fileFor(hex)}.pruning`;
    for (const hex of hexes) await rename(this.fileFor(hex), hidden(hex)).catch(() => undefined);
    const keep = new Set(
      [...(await this.claims())].filter(([runKey]) => !gone.has(runKey)).flatMap(([, claimed]) => [...claimed]),
    );
    let removed = 0;
    let bytes = 0;
    for (const hex of hexes) {
      if (keep.has(hex)) await rename(hidden(hex), this.fileFor(hex)).catch(() => undefined);
      else {
        const size = (await lstat(hidden(hex)).catch(() => undefined))?.size;
        if (size === undefined) continue;
        await rm(hidden(hex), { force: true });
        removed++;
        bytes += size;
      }
    }
    for (const runKey of gone) await rm(this.claimsFile(runKey), { force: true });
    return { removed, bytes };
  }

  private async ensureDir(): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
  }

  private fileFor(hex: string): string {
    return path.join(this.dir, `${hex}.log`);
  }
}

/**
 * `err` from a write to the data directory, in words a person can act on when it is a full disk
 * (ENOSPC, EDQUOT): it names FLOTILLA_HOME and the fix. Anything else is returned as it is. The
 * step that wrote stays retryable: freeing space helps.
 */
export function homeWriteError(err: unknown, doing: string, where: string): unknown {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  if (code !== 'ENOSPC' && code !== 'EDQUOT') return err;
  return new Error(
    `FLOTILLA_HOME is full (${code}: no space left in ${where}) while ${doing}; free space there and this step is retried`,
  );
}

/**
 * Streams the first LOG_KEEP characters to disk and keeps the last LOG_KEEP bytes in a ring
 * buffer; `close` appends them after a line saying how much was dropped in between. The ring
 * is one fixed allocation, so a flood of output is garbage that dies young instead of a
 * stream of retained strings the collector only reclaims late.
 */
export class LogWriter {
  private readonly out: WriteStream;
  /** Set once the file cannot be written (a full disk): the log is lost, the command should stop, close() throws. */
  failed?: Error;
  private readonly failure = new AbortController();
  /**
   * Aborted when `failed` is set. The write fails after the chunk was taken, so a command that
   * then prints nothing more learns of it only through this signal, not at its next output.
   */
  readonly failedSignal = this.failure.signal;
  private readonly hash = createHash('sha256');
  private headChars = 0;
  private ring?: Buffer;
  /** Bytes ever written to the ring; the next write goes to ringBytes % LOG_KEEP. */
  private ringBytes = 0;
  private end = '';

  constructor(
    private readonly tmp: string,
    private readonly finalPath: (hex: string) => string,
    /** Records that the run storing this log claims it, before it is placed (see ArtifactStore.claim). */
    private readonly claim?: (hex: string) => Promise<void>,
  ) {
    this.out = createWriteStream(tmp, { mode: 0o600 });
    // Without a handler a failed write (ENOSPC) is an uncaught error that ends the worker process.
    this.out.on('error', (err) => {
      this.failed ??= homeWriteError(err, 'writing a log', path.dirname(tmp)) as Error;
      this.failure.abort(this.failed);
    });
  }

  write(chunk: string): void {
    this.end =
      chunk.length >= TAIL_BYTES * 2 ? chunk.slice(-TAIL_BYTES * 2) : (this.end + chunk).slice(-TAIL_BYTES * 2);
    const room = LOG_KEEP - this.headChars;
    if (room > 0) {
      const head = chunk.slice(0, room);
      this.emit(head);
      this.headChars += head.length;
      chunk = chunk.slice(head.length);
    }
    if (chunk) this.toRing(Buffer.from(chunk));
  }

  /** The last few kilobytes of output so far (for heartbeats and the report's tail). */
  last(): string {
    return this.end;
  }

  async close(): Promise<string> {
    if (this.failed) {
      await this.discard();
      throw this.failed;
    }
    if (this.ring) {
      const dropped = Math.max(0, this.ringBytes - LOG_KEEP);
      if (dropped > 0) this.emit(`\n… [flotilla: ${dropped} bytes of output omitted] …\n`);
      const at = this.ringBytes % LOG_KEEP;
      this.emit(
        dropped > 0
          ? Buffer.concat([this.ring.subarray(at), this.ring.subarray(0, at)])
          : this.ring.subarray(0, this.ringBytes),
      );
      this.ring = undefined;
    }
    await new Promise<void>((resolve, reject) =>
      this.out.end((err?: Error | null) => (err || this.failed ? reject(this.failed ?? err) : resolve())),
    ).catch(async (err: unknown) => {
      await this.discard();
      throw err;
    });
    const hex = this.hash.digest('hex');
    await this.claim?.(hex);
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

  private toRing(bytes: Buffer): void {
    this.ring ??= Buffer.alloc(LOG_KEEP);
    // Only the last LOG_KEEP bytes of a huge chunk can survive anyway.
    const keep = bytes.length > LOG_KEEP ? bytes.subarray(bytes.length - LOG_KEEP) : bytes;
    this.ringBytes += bytes.length - keep.length;
    let from = 0;
    while (from < keep.length) {
      const at = this.ringBytes % LOG_KEEP;
      const n = keep.copy(this.ring, at, from, Math.min(keep.length, from + LOG_KEEP - at));
      from += n;
      this.ringBytes += n;
    }
  }

  private emit(data: string | Buffer): void {
    if (!data.length || this.failed) return;
    this.hash.update(data);
    this.out.write(data);
  }
}
