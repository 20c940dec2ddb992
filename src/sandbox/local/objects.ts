/**
 * A local sandbox's own links to its run's objects: the packs of the run store (git/run-mirror.ts)
 * hard-linked into the sandbox's directory, which bwrap mounts read-only where the workspace's git
 * finds them (its alternates). The sandbox reads its run's history without a copy of it, reaches
 * no other run's, and the links outlive the store: a sandbox keeps working when its run's store
 * is removed, and the space goes with the last of them.
 */
import { copyFile, link, mkdir, readdir, rename } from 'node:fs/promises';
import path from 'node:path';

/**
 * Links every pack of the objects directory `store` into the objects directory `dir` (made
 * read-only for anyone but its owner), each pack's index last: a pack git finds is whole. Across
 * file systems the files are copied instead. Safe to repeat, and to run twice at once.
 */
export async function lendPacks(store: string, dir: string): Promise<void> {
  const from = path.join(store, 'pack');
  const to = path.join(dir, 'pack');
  const names = await readdir(from).catch(() => [] as string[]);
  if (names.length === 0) return;
  const have = new Set(await readdir(to).catch(() => [] as string[]));
  const missing = names.filter((n) => !have.has(n));
  if (missing.length === 0) return;
  await mkdir(to, { recursive: true, mode: 0o755 });
  missing.sort((a, b) => Number(a.endsWith('.idx')) - Number(b.endsWith('.idx')));
  for (const name of missing) await linkOrCopy(path.join(from, name), path.join(to, name));
}

async function linkOrCopy(source: string, target: string): Promise<void> {
  try {
    await link(source, target);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return;
    if (code !== 'EXDEV') throw err;
    // Copied aside and renamed, so a file under its name is whole.
    const part = `${target}.part-${process.pid}`;
    await copyFile(source, part);
    await rename(part, target);
  }
}
