/**
 * Importing a bundle a sandbox made (a sub-task's commits, a checkpoint, a fixer's edits) into the
 * staging repository. The sandbox is hostile, and the staging repository holds every run of every
 * repository (other runs' commits, their hidden tests), so the bundle is taken in through a
 * quarantine, a repository of its own beside the staging one, and checked there:
 *
 * - its pack is indexed with `index-pack --strict` and without `--fix-thin`: every delta's base
 *   must be in the pack, so no object is rebuilt from one the sandbox never had;
 * - every object its head needs beyond the seed (the commit the sandbox was given, with its
 *   history) must be in that pack: `rev-list --objects <head> --not <seed>` walks the staging
 *   repository and the quarantine together, and each object it lists is looked up in the
 *   quarantine alone. A header naming a commit the staging repository already holds, over an
 *   empty pack, names objects the bundle does not carry;
 * - each of those objects (files, trees, commits: names, messages, authors) is scanned for the
 *   values of the secrets the worker holds;
 * - the pack's size and object count are bounded before git reads it.
 *
 * Only then are its pack files moved into the staging repository; nothing refers to them until
 * the caller names the head in a ref. A refused bundle leaves nothing behind.
 */
import { createReadStream, existsSync } from 'node:fs';
import { mkdir, mkdtemp, open, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { permanent } from '../contracts/failures';
import { type HeldSecret, heldSecrets, redact } from '../store/secrets';
import { MAX_IMPORT_BYTES, readBundleHeader, transferDir } from './bundles';
import { type GitEnv, hostGitEnv } from './env';
import { GitError, gitPipe, runGit } from './spawn';

/** Objects one bundle may carry: far more than any sub-task's work, far fewer than exhaust the host. */
export const MAX_IMPORT_OBJECTS = 1_000_000;

/** What is being imported, and from what. */
export interface ImportOf {
  /** What the bundle is, as a refusal names it: "the worker's commits", "the checkpoint of api". */
  what: string;
  /** The commit the sandbox was given: with its history, the only objects the bundle may leave out. */
  seed: string;
  /** The head must descend from the seed (a checkpoint); collected work checks its lineage itself. */
  descends?: boolean;
  /** The most bytes its pack may take (by default MAX_IMPORT_BYTES). */
  maxBytes?: number;
  /** Note the first object the head brings that is a blob of more bytes than this (Walked.large). */
  largeBlob?: number;
}

/**
 * What the walk over the objects the head brings showed of its commits and blobs, taken while
 * they were checked (one `rev-list` and one `cat-file`): the commit checks of verify.ts need no
 * git of their own.
 */
export interface Walked {
  /** Commits the head brings beyond the seed. */
  commits: number;
  /** The seed is the parent of one of those commits, or the head itself: the head descends from it. */
  descends: boolean;
  /** A commit among them with no parent (history from elsewhere), the first one met. */
  root?: string;
  /** The head is one of those commits. */
  headIsCommit: boolean;
  /** The first blob over ImportOf.largeBlob bytes among the objects. */
  large?: { oid: string; size: number };
}

export interface ImportedPack {
  /** The commit the bundle names, now in the staging repository (no ref names it yet). */
  head: string;
  /** The pack's file name in objects/pack, without its extension ("pack-<hash>"). */
  pack: string;
  bytes: number;
  /** False when the repository held that very pack already (the same bytes imported before). */
  fresh: boolean;
  walked: Walked;
}

/**
 * Imports the bundle `file` (made by a sandbox, carrying BUNDLE_REF) into the repository `dir`
 * through a quarantine (see the module comment); a bundle that fails a check is refused with a
 * permanent failure that names `of.what` and never the content it would have brought.
 */
export async function importBundleInto(dir: string, file: string, of: ImportOf): Promise<ImportedPack> {
  const { head, packOffset } = await readBundleHeader(file);
  const bytes = (await stat(file)).size - packOffset;
  const maxBytes = of.maxBytes ?? MAX_IMPORT_BYTES;
  if (bytes > maxBytes)
    throw permanent('TooLarge', `${of.what}: ${bytes} bytes packed, over the import limit of ${maxBytes} bytes`);
  await checkObjectCount(file, packOffset, of.what);
  const parent = transferDir(dir);
  await mkdir(parent, { recursive: true, mode: 0o700 });
  const quarantine = await mkdtemp(path.join(parent, 'quarantine-'));
  try {
    await makeQuarantine(quarantine);
    const pack = await indexInto(dir, quarantine, file, packOffset, of.what);
    const walked = await checkObjects(dir, quarantine, head, of);
    if (of.descends && !walked.descends)
      throw permanent(
        'LineageBroken',
        `${of.what}: the bundle names ${head.slice(0, 12)}, which does not descend from ${of.seed.slice(0, 12)}, the commit its sandbox was given`,
      );
    const fresh = await moveInto(dir, quarantine, pack);
    return { head, pack, bytes, fresh, walked };
  } finally {
    await rm(quarantine, { recursive: true, force: true });
  }
}

/** The pack's header says how many objects follow: more than MAX_IMPORT_OBJECTS is refused unread. */
async function checkObjectCount(file: string, offset: number, what: string): Promise<void> {
  const handle = await open(file, 'r');
  const header = Buffer.alloc(12);
  try {
    await handle.read(header, 0, 12, offset);
  } finally {
    await handle.close();
  }
  if (header.subarray(0, 4).toString('latin1') !== 'PACK')
    throw permanent('CorruptObjects', `${what}: the bundle holds no git pack`);
  const count = header.readUInt32BE(8);
  if (count > MAX_IMPORT_OBJECTS)
    throw permanent('TooLarge', `${what}: ${count} objects, over the import limit of ${MAX_IMPORT_OBJECTS}`);
}

/**
 * A bare repository to take the pack in, made without git: what git needs to know it for one (HEAD,
 * objects/, refs/), and the staging repository's private modes, as its files become the staging
 * repository's (staging.ts).
 */
async function makeQuarantine(dir: string): Promise<void> {
  await mkdir(path.join(dir, 'objects', 'pack'), { recursive: true, mode: 0o700 });
  await mkdir(path.join(dir, 'refs'), { mode: 0o700 });
  await writeFile(path.join(dir, 'HEAD'), 'ref: refs/heads/main\n', { mode: 0o600 });
  await writeFile(
    path.join(dir, 'config'),
    '[core]\n\trepositoryformatversion = 0\n\tbare = true\n\tsharedrepository = 0600\n',
    { mode: 0o600 },
  );
}

/** Git on the staging repository `dir` that also sees the objects of `quarantine`, or the other way round. */
function seeing(objects: string): GitEnv {
  return { ...hostGitEnv(), GIT_ALTERNATE_OBJECT_DIRECTORIES: path.join(objects, 'objects') };
}

/** Indexes the bundle's pack into the quarantine (links may reach the staging repository's objects, for now). */
async function indexInto(dir: string, quarantine: string, file: string, offset: number, what: string) {
  const r = await runGit(['index-pack', '--stdin', '--strict'], {
    repo: quarantine,
    env: seeing(dir),
    input: createReadStream(file, { start: offset }),
  });
  const name = /^pack\t([0-9a-f]{40,64})$/m.exec(r.stdout.toString())?.[1];
  if (r.code !== 0 || !name) {
    const why = r.stderr.trim().split('\n').slice(-3).join('; ').slice(0, 500);
    throw permanent('CorruptObjects', `${what}: the bundle failed git's integrity check: ${redact(why)}`);
  }
  return `pack-${name}`;
}

/**
 * Every object the head needs beyond the seed is in the quarantine's pack and holds no secret the
 * worker holds; returns what the walk showed of them. rev-list sees both repositories (so it can
 * walk the seed's side); cat-file, which reads each object it lists, sees the quarantine alone.
 */
async function checkObjects(dir: string, quarantine: string, head: string, of: ImportOf): Promise<Walked> {
  const scanner = new ObjectScanner(heldSecrets(), { head, seed: of.seed, largeBlob: of.largeBlob });
  try {
    await gitPipe(
      {
        args: ['rev-list', '--objects', '--parents', head, '--not', of.seed],
        opts: { repo: dir, env: seeing(quarantine) },
      },
      {
        args: ['cat-file', '--batch=%(objectname) %(objecttype) %(objectsize) %(rest)'],
        opts: { repo: quarantine, env: hostGitEnv() },
      },
      (chunk) => scanner.push(chunk),
    );
  } catch (err) {
    // rev-list cannot even start from a head that is in neither repository.
    if (err instanceof GitError && err.command === 'rev-list')
      throw permanent('CorruptObjects', `${of.what}: the bundle names ${head.slice(0, 12)}, which it does not carry`);
    throw err;
  }
  const found = scanner.found;
  if (!found) return scanner.walked;
  if (found.kind === 'missing')
    throw permanent(
      'CorruptObjects',
      `${of.what}: the bundle does not carry object ${found.oid.slice(0, 12)}, which its commits need; a bundle from a sandbox must bring every object beyond the commit the sandbox was given`,
    );
  throw permanent(
    'SecretExposed',
    `${of.what}: ${found.where} holds the value of ${found.name}, a secret this worker holds`,
  );
}

/**
 * Moves the quarantine's pack files into the repository `dir`, the index last: a pack that is
 * listed is whole. Returns whether `dir` did not hold that pack before.
 */
async function moveInto(dir: string, quarantine: string, pack: string): Promise<boolean> {
  const from = path.join(quarantine, 'objects', 'pack');
  const to = path.join(dir, 'objects', 'pack');
  const fresh = !existsSync(path.join(to, `${pack}.idx`));
  const files = (await readdir(from)).sort((a, b) => Number(a.endsWith('.idx')) - Number(b.endsWith('.idx')));
  for (const name of files) await rename(path.join(from, name), path.join(to, name));
  return fresh;
}

type Finding = { kind: 'missing'; oid: string } | { kind: 'secret'; name: string; where: string };

/**
 * Reads `cat-file --batch` output (a header line "<oid> <type> <size> <rest>", the content, a
 * newline) as it streams, and looks for each secret's value in each object's content, across the
 * chunks it arrives in. Stops at the first object that is missing or holds one. Fed by
 * `rev-list --objects --parents`, a commit's rest is its parents and another object's its path:
 * it notes what `walked` says of them on the way.
 */
export class ObjectScanner {
  found?: Finding;
  readonly walked: Walked = { commits: 0, descends: false, headIsCommit: false };
  private header = Buffer.alloc(0);
  /** Content bytes of the current object still to come; -1 while a header is being read. */
  private left = -1;
  private skipNewline = false;
  private carry = Buffer.alloc(0);
  private object = { oid: '', type: '', path: '' };
  private readonly secrets: { name: string; value: Buffer }[];
  private readonly keep: number;

  constructor(
    secrets: readonly HeldSecret[],
    private readonly walk: { head?: string; seed?: string; largeBlob?: number } = {},
  ) {
    this.secrets = secrets.map((s) => ({ name: s.name, value: Buffer.from(s.value) }));
    this.keep = Math.max(0, ...this.secrets.map((s) => s.value.length - 1));
    if (walk.head !== undefined && walk.head === walk.seed) this.walked.descends = true;
  }

  /** Reads a chunk; false once something is found (nothing more need be read). */
  push(chunk: Buffer): boolean {
    let i = 0;
    while (i < chunk.length && !this.found) {
      if (this.skipNewline) {
        this.skipNewline = false;
        i++;
      } else if (this.left < 0) {
        const nl = chunk.indexOf(10, i);
        if (nl < 0) {
          this.header = Buffer.concat([this.header, chunk.subarray(i)]);
          return true;
        }
        this.startObject(Buffer.concat([this.header, chunk.subarray(i, nl)]).toString('utf8'));
        this.header = Buffer.alloc(0);
        i = nl + 1;
      } else {
        const n = Math.min(this.left, chunk.length - i);
        this.scan(chunk.subarray(i, i + n));
        this.left -= n;
        i += n;
        if (this.left === 0) this.endObject();
      }
    }
    return !this.found;
  }

  private startObject(line: string): void {
    const [oid, type, size, ...rest] = line.split(' ');
    if (type === 'missing') {
      this.found = { kind: 'missing', oid };
      return;
    }
    this.object = { oid, type, path: rest.join(' ') };
    this.carry = Buffer.alloc(0);
    this.left = Number(size);
    this.note(oid, type, this.left, rest);
    if (this.left === 0) this.endObject();
  }

  /** What a listed object says of the walk: a commit's parents, a blob's size. */
  private note(oid: string, type: string, size: number, rest: string[]): void {
    const { walked, walk } = this;
    if (type === 'commit') {
      const parents = rest.filter(Boolean);
      walked.commits++;
      if (oid === walk.head) walked.headIsCommit = true;
      if (walk.seed !== undefined && parents.includes(walk.seed)) walked.descends = true;
      if (parents.length === 0) walked.root ??= oid;
    } else if (type === 'blob' && walk.largeBlob !== undefined && size > walk.largeBlob) walked.large ??= { oid, size };
  }

  private endObject(): void {
    this.left = -1;
    this.skipNewline = true;
  }

  private scan(piece: Buffer): void {
    if (this.secrets.length === 0) return;
    const text = this.carry.length ? Buffer.concat([this.carry, piece]) : piece;
    const hit = this.secrets.find((s) => text.includes(s.value));
    if (hit) this.found = { kind: 'secret', name: hit.name, where: this.where() };
    this.carry = Buffer.from(text.subarray(Math.max(0, text.length - this.keep)));
  }

  /** Where the current object is, in words, without repeating anything a secret may be part of. */
  private where(): string {
    const { oid, type, path: at } = this.object;
    if (type === 'blob') return `"${redact(at)}"`;
    if (type === 'tree') return `a file name in ${at ? `"${redact(at)}"` : 'the top directory'}`;
    return `the message, author or committer of ${type} ${oid.slice(0, 12)}`;
  }
}
