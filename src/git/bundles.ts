/**
 * Bundles: how commits travel between the staging repository and a sandbox. They go as files,
 * streamed, never whole in memory (see Sandbox.copyIn and copyOut), through a private directory of
 * the data directory (not /tmp, which may be memory). A bundle from a sandbox is untrusted: its
 * header is read within a bound, and it is imported through a quarantine (import.ts).
 */
import { createReadStream } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import path from 'node:path';
import { permanent } from '../contracts/failures';
import { hostGitEnv } from './env';
import { git } from './spawn';
import { sh } from './workspace';

/** The ref every bundle exchanged with a sandbox carries. */
export const BUNDLE_REF = 'refs/flotilla/export';

/** Bytes of packed commits one sub-task may hand over. */
export const MAX_IMPORT_BYTES = 512 * 1024 * 1024;

/** A bundle over `max` bytes is refused before it is copied out of the sandbox, and after. */
export function checkImportSize(bytes: number, what = "the worker's commits", max = MAX_IMPORT_BYTES): void {
  if (bytes > max) throw permanent('TooLarge', `${what}: ${bytes} bytes packed, over the import limit of ${max} bytes`);
}

/**
 * The bash lines that write to `file`, in a sandbox's workspace, a bundle of the commit `head` (a
 * bash word: by default, what BUNDLE_REF names) under the name BUNDLE_REF, without the history of
 * `exclude`. Not `git bundle create`, whose pack is thin (its deltas lean on objects of
 * `exclude`'s side): this pack is whole, so the host can take every object from the bundle alone
 * and refuse one that leans on anything else (see import.ts).
 */
export function bundleScript(file: string, exclude: string, head?: string): string {
  const named = head ?? `"$(git rev-parse --verify ${BUNDLE_REF})"`;
  return `{ printf '# v2 git bundle\n-%s\n%s %s\n\n' ${sh(exclude)} ${named} ${BUNDLE_REF}
  printf '%s\n^%s\n' ${head ?? BUNDLE_REF} ${sh(exclude)} | git pack-objects --revs --stdout -q --delta-base-offset; } > ${sh(file)}`;
}

/** The private directory beside the repository `dir` where bundles and quarantines are made. */
export function transferDir(dir: string): string {
  return path.join(path.dirname(dir), 'transfer');
}

/** Runs `fn` with a path for a bundle in a fresh private directory beside the repository `dir`, removed afterwards. */
export async function withBundleFile<T>(dir: string, fn: (file: string) => Promise<T>): Promise<T> {
  const parent = transferDir(dir);
  await mkdir(parent, { recursive: true, mode: 0o700 });
  const tmp = await mkdtemp(path.join(parent, 'bundle-'));
  try {
    return await fn(path.join(tmp, 'transfer.bundle'));
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

/** Writes to `file` a bundle of `ref` of the repository `dir` (minus history reachable from `exclude`). */
export async function createBundle(dir: string, file: string, ref: string, exclude?: string): Promise<void> {
  const args = ['bundle', 'create', '--quiet', file, ref];
  if (exclude) args.push(`^${exclude}`);
  await git(args, { repo: dir, env: hostGitEnv() });
}

/**
 * Writes to `file` a bundle of `ref`'s commit alone, for a seed that needs no history (a cloud
 * sandbox): made in a temporary shallow repository, since a bundle of the repository `dir` always
 * names the commit's parents. The reader records the commit in .git/shallow before fetching it.
 */
export async function createShallowBundle(dir: string, file: string, ref: string): Promise<void> {
  const tmp = await mkdtemp(`${file}.shallow-`);
  const opts = { repo: tmp, env: hostGitEnv() };
  try {
    await git(['init', '--quiet', '--bare'], opts);
    await git(['fetch', '--quiet', '--no-tags', '--depth=1', `file://${dir}`, `+${ref}:${ref}`], opts);
    await git(['bundle', 'create', '--quiet', file, ref], opts);
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

/** The most a bundle's header (its refs and prerequisites) may take; a sandbox's has a handful of lines. */
const MAX_BUNDLE_HEADER = 1024 * 1024;

/**
 * Reads a bundle's (v2 or v3) header: the commit it names for BUNDLE_REF and where its pack
 * starts. The header ends at the first empty line.
 */
export async function readBundleHeader(file: string): Promise<{ head: string; packOffset: number }> {
  let text = Buffer.alloc(0);
  for await (const chunk of createReadStream(file, { end: MAX_BUNDLE_HEADER - 1, highWaterMark: 64 * 1024 })) {
    text = Buffer.concat([text, chunk as Buffer]);
    if (text.includes('\n\n')) break;
  }
  const end = text.indexOf('\n\n');
  const header = end > 0 ? text.subarray(0, end).toString('utf8').split('\n') : [];
  if (!/^# v[23] git bundle$/.test(header[0] ?? ''))
    throw permanent('CorruptObjects', "the worker's bundle is not a git bundle");
  const line = header.find((l) => /^[0-9a-f]{40} /.test(l) && l.slice(41) === BUNDLE_REF);
  if (!line) throw permanent('CorruptObjects', `the worker's bundle does not carry ${BUNDLE_REF}`);
  return { head: line.slice(0, 40), packOffset: end + 2 };
}
