/** A host process run as a group of its own, so that killing it reaches everything it started. */
import { constants as osConstants } from 'node:os';
import { StringDecoder } from 'node:string_decoder';
import { type Program, readableOf, startProgram, writableOf } from '../../spawner';
import { OutputTail } from '../output';
import type { ExecOptions, ExecResult } from '../types';

function killTree(pid: number | undefined): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // Already gone.
  }
}

/** What a sandboxed command's first programs say and wait for besides its output (see bwrap.ts). */
export interface GroupChannels {
  /** The command gets a pipe on fd 3 whose text goes here (bwrap's wrapper reports through it). */
  onReport?: (text: string) => void;
  /**
   * The command says its first process's pid on fd 4 and waits on fd 5 (bwrap's --info-fd and
   * --block-fd): `admit` is called with the pid, and the command goes on once it resolves. When it
   * rejects, the command is killed before it starts, and the run fails with its error.
   */
  admit?: (pid: number) => Promise<void>;
}

/**
 * Runs argv as its own process group and enforces the deadline and abort signal by killing
 * the whole group, so no grandchild outlives the command.
 */
export function runProcessGroup(
  argv: string[],
  cwd: string,
  options: ExecOptions,
  channels: GroupChannels = {},
): Promise<ExecResult> {
  const { onReport, admit } = channels;
  return new Promise((resolve, reject) => {
    if (options.signal?.aborted) {
      resolve({ exitCode: -1, output: '', timedOut: false, aborted: true });
      return;
    }
    const child = startProgram(argv[0], argv.slice(1), {
      cwd,
      env: options.env,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe', onReport ? 'pipe' : 'ignore', ...(admit ? (['pipe', 'pipe'] as const) : [])],
    });
    // Its pid may come a moment after it was asked for (spawner/): a kill before then waits for it.
    const killGroup = () =>
      child.pid === undefined ? child.once('spawn', () => killTree(child.pid)) : killTree(child.pid);
    if (onReport) readableOf(child, 3).on('data', (buf: Buffer) => onReport(buf.toString('utf8')));
    let refused: unknown;
    if (admit)
      admitWhenSaid(child, admit, (err) => {
        refused = err;
        killGroup();
      });
    const output = new OutputTail(options.onOutput);
    let timedOut = false;
    let aborted = false;
    // One decoder per stream, so a multi-byte character split across two reads is not mangled.
    const decoders = [new StringDecoder('utf8'), new StringDecoder('utf8')];
    readableOf(child, 1).on('data', (buf: Buffer) => output.push(decoders[0].write(buf)));
    readableOf(child, 2).on('data', (buf: Buffer) => output.push(decoders[1].write(buf)));
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup();
    }, options.timeoutMs);
    const onAbort = () => {
      aborted = true;
      killGroup();
    };
    options.signal?.addEventListener('abort', onAbort, { once: true });
    child.on('error', (err) => {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      reject(err);
    });
    // The command is done: whatever it left running in its group goes with it now, rather than
    // holding our pipes open (and the result back) until the deadline.
    child.on('exit', () => killTree(child.pid));
    child.on('close', (code: number | null, sig: NodeJS.Signals | null) => {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      // Whatever the command left running in its group goes with it.
      killTree(child.pid);
      if (refused !== undefined) {
        reject(refused);
        return;
      }
      output.push(decoders[0].end() + decoders[1].end());
      resolve({
        // Like a shell reports it (137 for SIGKILL), and as bwrap reports its child's death.
        exitCode: code ?? (sig ? 128 + (osConstants.signals[sig] ?? 0) : -1),
        output: output.value,
        timedOut,
        aborted,
      });
    });
  });
}

/**
 * Reads the first process's pid from the child's fd 4 (bwrap's JSON: `"child-pid": N`), calls
 * `admit`, and lets the command go on (a byte on fd 5) once it resolves; `refuse` when it does not.
 */
function admitWhenSaid(child: Program, admit: (pid: number) => Promise<void>, refuse: (err: unknown) => void) {
  const [info, go] = [readableOf(child, 4), writableOf(child, 5)];
  // Either end may go at any time: bwrap failed, or the command already ended.
  info.on('error', () => undefined);
  go.on('error', () => undefined);
  let said = '';
  let admitting = false;
  info.setEncoding('utf8').on('data', (chunk: string) => {
    if (admitting) return;
    said += chunk;
    const pid = /"child-pid":\s*(\d+)/.exec(said)?.[1];
    if (!pid) return;
    admitting = true;
    admit(Number(pid)).then(
      () => go.end('\n'),
      (err: unknown) => refuse(err),
    );
  });
}
