/**
 * Logs and command output live here, content-addressed, so workflow history can carry a short
 * reference and a tail instead of the text itself.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';

/** Bytes of output a report carries inline; the rest stays in the artifact. */
export const TAIL_BYTES = 2048;

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
      await mkdir(this.dir, { recursive: true });
      const tmp = `${file}.${process.pid}.tmp`;
      await writeFile(tmp, content);
      await rename(tmp, file);
    }
    return `sha256:${hex}`;
  }

  async get(ref: string): Promise<Buffer> {
    return readFile(this.pathOf(ref));
  }

  pathOf(ref: string): string {
    const m = /^sha256:([0-9a-f]{64})$/.exec(ref);
    if (!m) throw new Error(`not an artifact reference: ${ref}`);
    return this.fileFor(m[1]);
  }

  private fileFor(hex: string): string {
    return path.join(this.dir, `${hex}.log`);
  }
}
