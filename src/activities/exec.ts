/** Running commands in a sandbox from an activity: heartbeats, cancellation, logs by reference. */
import { Context } from '@temporalio/activity';
import { tail } from '../artifacts';
import type { OutputParser } from '../agents/types';
import type { Sandbox } from '../sandbox/types';
import type { ActivityDeps } from './deps';

/** Full output kept for the artifact; beyond this only the end is kept. */
const LOG_CAP = 32 * 1024 * 1024;
const HEARTBEAT_MS = 2_000;

export interface CommandReport {
  exitCode: number;
  timedOut: boolean;
  durationMs: number;
  /** The last lines of output, small enough for workflow history. */
  tail: string;
  /** The full output in the artifact store. */
  logRef: string;
}

/**
 * Runs a long command (an agent, a test suite) with heartbeats carrying progress, so Temporal
 * notices a dead worker, and so a cancellation reaches us and kills the process tree. With a
 * parser, the agent's own progress rides along in the heartbeats; with a budget, the agent is
 * stopped as soon as its reported cost passes it.
 */
export async function execTracked(
  deps: ActivityDeps,
  sb: Sandbox,
  command: string,
  opts: {
    env?: Record<string, string>;
    timeoutMs: number;
    label: string;
    parser?: OutputParser;
    budgetUsd?: number;
    readOnly?: boolean;
    /** Applied to the output before it is heartbeated, stored or returned (hidden test text). */
    redact?: (text: string) => string;
  },
): Promise<CommandReport & { budgetExceeded: boolean }> {
  const ctx = Context.current();
  const started = Date.now();
  const redact = opts.redact ?? ((text: string) => text);
  let log = '';
  let bytes = 0;
  let budgetExceeded = false;
  const stop = new AbortController();
  const onCancel = () => stop.abort();
  ctx.cancellationSignal.addEventListener('abort', onCancel, { once: true });
  const beat = () => {
    const lastLine = redact(log.trimEnd().split('\n').pop() ?? '').slice(0, 200);
    ctx.heartbeat({ label: opts.label, outputBytes: bytes, lastLine, agent: opts.parser?.progress() });
  };
  beat();
  const timer = setInterval(beat, HEARTBEAT_MS);
  let result;
  try {
    result = await sb.exec(command, {
      env: opts.env,
      timeoutMs: opts.timeoutMs,
      readOnlyWorkspace: opts.readOnly,
      signal: ctx.cancellationSignal.aborted ? ctx.cancellationSignal : stop.signal,
      onOutput: (chunk) => {
        bytes += chunk.length;
        log += chunk;
        if (log.length > LOG_CAP) log = log.slice(-LOG_CAP / 2);
        if (opts.parser) {
          opts.parser.push(chunk);
          if (opts.budgetUsd !== undefined && !budgetExceeded && opts.parser.progress().costUsd > opts.budgetUsd) {
            budgetExceeded = true;
            stop.abort();
          }
        }
      },
    });
  } finally {
    clearInterval(timer);
    ctx.cancellationSignal.removeEventListener('abort', onCancel);
  }
  if (result.aborted && !budgetExceeded) await ctx.cancelled;
  log = redact(log);
  const logRef = await deps.artifacts.put(log);
  return {
    exitCode: result.exitCode,
    timedOut: result.timedOut,
    durationMs: Date.now() - started,
    tail: tail(log),
    logRef,
    budgetExceeded,
  };
}

/** Runs a short script (git plumbing) and returns its output; a non-zero exit is an error. */
export async function script(sb: Sandbox, body: string, what: string, timeoutMs = 5 * 60_000): Promise<string> {
  const r = await sb.exec(`set -euo pipefail\n${body}`, { timeoutMs, signal: Context.current().cancellationSignal });
  if (r.aborted) await Context.current().cancelled;
  if (r.exitCode !== 0) {
    throw new Error(`${what} failed (exit ${r.exitCode}${r.timedOut ? ', timed out' : ''}): ${tail(r.output, 1500)}`);
  }
  return r.output;
}

/** Quotes a value for bash. */
export function sh(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}
