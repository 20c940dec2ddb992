/** A host process run as a group of its own, so that killing it reaches everything it started. */
import { spawn } from 'node:child_process';
import { constants as osConstants } from 'node:os';
import { StringDecoder } from 'node:string_decoder';
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

/**
 * Runs argv as its own process group and enforces the deadline and abort signal by killing
 * the whole group, so no grandchild outlives the command.
 */
export function runProcessGroup(
  argv: string[],
  cwd: string,
  options: ExecOptions,
  /** When given, the command gets a pipe on fd 3 whose text goes here (bwrap's wrapper reports through it). */
  onReport?: (text: string) => void,
): Promise<ExecResult> {
  return new Promise((resolve, reject) => {
    if (options.signal?.aborted) {
      resolve({ exitCode: -1, output: '', timedOut: false, aborted: true });
      return;
    }
    const child = spawn(argv[0], argv.slice(1), {
      cwd,
      env: options.env,
      detached: true,
      stdio: onReport ? ['ignore', 'pipe', 'pipe', 'pipe'] : ['ignore', 'pipe', 'pipe'],
    });
    if (onReport) child.stdio[3]!.on('data', (buf: Buffer) => onReport(buf.toString('utf8')));
    const output = new OutputTail(options.onOutput);
    let timedOut = false;
    let aborted = false;
    // One decoder per stream, so a multi-byte character split across two reads is not mangled.
    const decoders = [new StringDecoder('utf8'), new StringDecoder('utf8')];
    child.stdout!.on('data', (buf: Buffer) => output.push(decoders[0].write(buf)));
    child.stderr!.on('data', (buf: Buffer) => output.push(decoders[1].write(buf)));
    const timer = setTimeout(() => {
      timedOut = true;
      killTree(child.pid);
    }, options.timeoutMs);
    const onAbort = () => {
      aborted = true;
      killTree(child.pid);
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
    child.on('close', (code, sig) => {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      // Whatever the command left running in its group goes with it.
      killTree(child.pid);
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
