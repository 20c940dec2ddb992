/**
 * The one place Flotilla starts git on the host (remote operations go through simple-git, built on
 * the same policies: see remote.ts). Every call names its whole environment, one of the policies
 * of env.ts, so no git inherits the worker's environment; stdin is bytes or a stream; output comes back whole,
 * record by record, or into a file; a failure carries the end of git's stderr, bounded, so it fits
 * a log line and a payload.
 */
import type { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { readableOf, startProgram, writableOf } from '../spawner';
import type { GitEnv } from './env';

export interface GitOptions {
  /** The repository git works on: its working directory and GIT_DIR (Flotilla's repositories are bare). */
  repo?: string;
  /** The whole environment: a policy of env.ts. */
  env: GitEnv;
  /** What git reads on stdin: bytes, or a stream piped as it is read. */
  input?: Buffer | string | Readable;
  /** Exit codes that are answers rather than failures (merge-tree's 1: a conflict); by default 0 only. */
  ok?: number[];
  /** The most stdout kept in memory; git printing more is a failure. */
  maxOutput?: number;
}

export interface GitResult {
  code: number;
  stdout: Buffer;
  /** Its last STDERR_KEEP characters. */
  stderr: string;
}

/** How much of git's stderr is kept: the end, where git says why it stopped. */
const STDERR_KEEP = 4000;
/** How much of it an error message carries. */
const STDERR_SHOWN = 1500;
const MAX_OUTPUT = 256 * 1024 * 1024;

/** A git that exited with a code its caller did not expect. */
export class GitError extends Error {
  name = 'GitError';

  constructor(
    /** The git command (`merge-tree`, `update-ref`, ...). */
    readonly command: string,
    readonly code: number,
    readonly stderr: string,
  ) {
    super(`git ${command} failed (exit ${code}): ${stderr.trim().slice(-STDERR_SHOWN)}`);
  }
}

/** The command in `args`, past the options before it (`-c key=value`, `-C dir`). */
export function commandOf(args: readonly string[]): string {
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '-c' || args[i] === '-C') i++;
    else if (!args[i].startsWith('-')) return args[i];
  }
  return args[0] ?? '';
}

/** Output made of NUL-terminated records (`-z`), as a list. */
export function nulRecords(output: Buffer | string): string[] {
  return output.toString().split('\0').filter(Boolean);
}

function start(args: readonly string[], opts: GitOptions) {
  const env = opts.repo ? { ...opts.env, GIT_DIR: opts.repo } : opts.env;
  const child = startProgram('git', args, { cwd: opts.repo, env, stdio: ['pipe', 'pipe', 'pipe'] });
  const [stdin, stdout, stderrOf] = [writableOf(child, 0), readableOf(child, 1), readableOf(child, 2)];
  let stderr = '';
  stderrOf.on('data', (b: Buffer) => (stderr = (stderr + b.toString()).slice(-STDERR_KEEP)));
  const input = opts.input;
  const closed = new Promise<number>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => resolve(code ?? -1));
    if (input === undefined || typeof input === 'string' || Buffer.isBuffer(input)) return;
    input.on('error', (err) => {
      child.kill();
      reject(err);
    });
  });
  // Handled here too: a caller that stops waiting (its output stream failed) leaves no unhandled rejection.
  closed.catch(() => undefined);
  // git may exit before reading all its input; its exit code says why.
  stdin.on('error', () => undefined);
  if (input === undefined || typeof input === 'string' || Buffer.isBuffer(input)) stdin.end(input);
  else input.pipe(stdin);
  return { child, stdout, stderr: () => stderr, closed };
}

/** Runs git to the end; resolves with its exit code whatever it is (only a git that cannot start rejects). */
export async function runGit(args: readonly string[], opts: GitOptions): Promise<GitResult> {
  const { child, stdout, stderr, closed } = start(args, opts);
  const max = opts.maxOutput ?? MAX_OUTPUT;
  const chunks: Buffer[] = [];
  let size = 0;
  stdout.on('data', (b: Buffer) => {
    size += b.length;
    if (size > max) child.kill();
    else chunks.push(b);
  });
  const code = await closed;
  if (size > max) throw new Error(`git ${commandOf(args)} printed more than ${max} bytes`);
  return { code, stdout: Buffer.concat(chunks), stderr: stderr() };
}

/** Runs git; an exit code other than `opts.ok` (by default 0) throws a GitError. */
export async function git(args: readonly string[], opts: GitOptions): Promise<GitResult> {
  const r = await runGit(args, opts);
  if (!(opts.ok ?? [0]).includes(r.code)) throw new GitError(commandOf(args), r.code, r.stderr);
  return r;
}

/** Runs git and returns its stdout as text. */
export async function gitText(args: readonly string[], opts: GitOptions): Promise<string> {
  return (await git(args, opts)).stdout.toString('utf8');
}

/**
 * Runs git and hands each `sep`-terminated record of its output to `onRecord` as it arrives, with
 * no cap on how much there is; `onRecord` returning false stops git early (no failure then).
 */
export async function gitRecords(
  args: readonly string[],
  opts: GitOptions,
  sep: '\n' | '\0',
  onRecord: (record: string) => boolean | void,
): Promise<void> {
  const { child, stdout, stderr, closed } = start(args, opts);
  let rest = '';
  let stopped = false;
  stdout.setEncoding('utf8');
  stdout.on('data', (chunk: string) => {
    if (stopped) return;
    const parts = (rest + chunk).split(sep);
    rest = parts.pop() ?? '';
    for (const part of parts) {
      if (onRecord(part) === false) {
        stopped = true;
        child.kill();
        return;
      }
    }
  });
  const code = await closed;
  if (!stopped && rest) onRecord(rest);
  if (code !== 0 && !stopped) throw new GitError(commandOf(args), code, stderr());
}

/**
 * Runs `from` with its stdout piped into the stdin of `to`, and hands `to`'s stdout to `onData`
 * chunk by chunk, never held whole; `onData` returning false stops both (no failure then). A git
 * that exits non-zero otherwise throws a GitError.
 */
export async function gitPipe(
  from: { args: readonly string[]; opts: GitOptions },
  to: { args: readonly string[]; opts: GitOptions },
  onData: (chunk: Buffer) => boolean | void,
): Promise<void> {
  const first = start(from.args, from.opts);
  const second = start(to.args, { ...to.opts, input: first.stdout });
  let stopped = false;
  second.stdout.on('data', (chunk: Buffer) => {
    if (stopped || onData(chunk) !== false) return;
    stopped = true;
    second.child.kill();
    first.child.kill();
  });
  const [a, b] = await Promise.all([first.closed, second.closed]);
  if (stopped) return;
  // The reader's failure first: the writer then only died of the broken pipe.
  if (b !== 0) throw new GitError(commandOf(to.args), b, second.stderr());
  if (a !== 0) throw new GitError(commandOf(from.args), a, first.stderr());
}

/** Runs git with its stdout streamed into `out` (a file: a blob of any size), never held in memory. */
export async function gitInto(args: readonly string[], opts: GitOptions, out: Writable): Promise<void> {
  const { stdout, stderr, closed } = start(args, opts);
  await pipeline(stdout, out);
  const code = await closed;
  if (code !== 0) throw new GitError(commandOf(args), code, stderr());
}
