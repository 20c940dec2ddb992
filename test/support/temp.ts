/** Throwaway directories, removed when the test (or, made outside a test, the file) ends. */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { releaseAtEnd } from './cleanup';

/** A fresh directory `flotilla-<prefix>-*` under the system's temp directory. */
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), `flotilla-${prefix}-`));
  releaseAtEnd(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}
