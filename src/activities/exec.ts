/** Running commands in a sandbox from an activity: heartbeats, cancellation, logs by reference. */
import { Context } from '@temporalio/activity';
import { SharedStoreError } from '../git/shared-store';
import { tail } from '../store/artifacts';
import type { AgentProgress, OutputParser } from '../agents/types';
import type { EgressRules } from '../sandbox/egress/rules';
import type { Sandbox } from '../sandbox/types';
import { StreamRedactor } from '../store/secrets';
import type { ActivityDeps } from './deps';

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

export interface TrackedOptions {
  env?: Record<string, string>;
  timeoutMs: number;
  label: string;
  parser?: OutputParser;
  budgetUsd?: number;
  readOnly?: boolean;
  egress?: EgressRules;
  /** Applied to every whole line of output before it is heartbeated, stored or returned (hidden test text). */
  redact?: (text: string) => string;
  /** The run the output belongs to (its runKey), so retention keeps the log as long as the run. */
  run?: string;
  /** The output may carry what no one may be shown (hidden tests): heartbeats carry none of it. */
  withhold?: boolean;
  /** The command is stopped once it has printed nothing for this long (limits.idleMinutes). */
  idleMs?: number;
  /** Told the parser's progress after every chunk of output. */
  onProgress?: (progress: AgentProgress) => void;
}

/** The last complete line of `text`, for a heartbeat: an unterminated one may still be growing (or held back by the redactor). */
function lastLine(text: string): string {
  const lines = text.split('\n');
  const partial = lines.pop() ?? '';
  return (lines.filter((l) => l.trim()).pop() ?? partial).slice(0, 200);
}

/**
 * Runs a long command (an agent, a test suite) with heartbeats carrying progress, so Temporal
 * notices a dead worker, and so a cancellation reaches us and kills the process tree. With a
 * parser, the agent's own progress rides along in the heartbeats; with a budget, the agent is
 * stopped as soon as its reported cost passes it. Output is redacted of the worker's secrets
 * before anything reads it, and streamed to the artifact (its head and tail when it is huge),
 * so memory stays bounded whatever the command prints.
 */
export async function execTracked(
  deps: ActivityDeps,
  sb: Sandbox,
  command: string,
  opts: TrackedOptions,
): Promise<CommandReport & { budgetExceeded: boolean; idle?: true }> {
  const ctx = Context.current();
  const started = Date.now();
  const log = await deps.artifacts.writer(opts.run);
  const redactor = new StreamRedactor();
  const byLine = opts.redact ? new LineFilter(opts.redact) : undefined;
  let bytes = 0;
  let budgetExceeded = false;
  const stop = new AbortController();
  const onCancel = () => stop.abort();
  ctx.cancellationSignal.addEventListener('abort', onCancel, { once: true });
  // The log cannot be written (a full FLOTILLA_HOME): the command stops, and close() says why.
  log.failedSignal.addEventListener('abort', () => stop.abort(), { once: true });
  const take = (text: string) => {
    if (!text) return;
    log.write(text);
    if (!opts.parser) return;
    opts.parser.push(text);
    opts.onProgress?.(opts.parser.progress());
    if (opts.budgetUsd !== undefined && !budgetExceeded && opts.parser.progress().costUsd > opts.budgetUsd) {
      budgetExceeded = true;
      stop.abort();
    }
  };
  let waiting: string | undefined;
  const beat = () =>
    ctx.heartbeat({
      label: opts.label,
      outputBytes: bytes,
      lastLine: waiting ?? (opts.withhold ? undefined : lastLine(log.last())),
      agent: opts.parser?.progress(),
    });
  beat();
  const timer = setInterval(beat, HEARTBEAT_MS);
  const idle = watchIdle(opts.idleMs, () => stop.abort());
  let result;
  let logRef: string;
  try {
    try {
      result = await sb.exec(command, {
        env: opts.env,
        timeoutMs: opts.timeoutMs,
        readOnlyWorkspace: opts.readOnly,
        egress: opts.egress,
        signal: ctx.cancellationSignal.aborted ? ctx.cancellationSignal : stop.signal,
        onOutput: (chunk) => {
          idle.output();
          bytes += chunk.length;
          const clean = redactor.push(chunk);
          take(byLine ? byLine.push(clean) : clean);
        },
      });
      const rest = redactor.end();
      take(byLine ? byLine.push(rest) + byLine.end() : rest);
    } catch (err) {
      await log.discard();
      throw err;
    } finally {
      ctx.cancellationSignal.removeEventListener('abort', onCancel);
    }
    logRef = await log.close();
    await publishLog(deps, logRef, ctx, (why) => {
      waiting = why;
      beat();
    });
  } finally {
    clearInterval(timer);
    idle.end();
  }
  if (result.aborted && !budgetExceeded && !idle.fired) await ctx.cancelled;
  return {
    exitCode: result.exitCode,
    timedOut: result.timedOut,
    durationMs: Date.now() - started,
    tail: tail(log.last()),
    logRef,
    budgetExceeded,
    ...(idle.fired && { idle: true as const }),
  };
}

/**
 * Calls `stop` once no output has come for `idleMs` (never, without it). Checked a few times
 * per idle period, so the stop comes within about a quarter of it late.
 */
function watchIdle(idleMs: number | undefined, stop: () => void) {
  let last = Date.now();
  const state = { fired: false, output: () => void (last = Date.now()), end: () => clearInterval(timer) };
  const timer =
    idleMs === undefined
      ? undefined
      : setInterval(
          () => {
            if (state.fired || Date.now() - last < idleMs) return;
            state.fired = true;
            stop();
          },
          Math.min(HEARTBEAT_MS, Math.max(100, idleMs / 4)),
        );
  return state;
}

/** The longest wait between two attempts at publishing a finished command's log. */
const PUBLISH_RETRY_MAX_MS = 30_000;

/**
 * Publishes a finished command's log to the shared store, waiting (heartbeating, saying so) for
 * as long as the store cannot be reached: the command has run, and failing the activity would run
 * it again only to publish its log, an agent's whole cost paid twice. A cancellation ends the wait.
 */
async function publishLog(deps: ActivityDeps, logRef: string, ctx: Context, onWait: (why: string) => void) {
  for (let delay = 1000; ; delay = Math.min(2 * delay, PUBLISH_RETRY_MAX_MS)) {
    try {
      await deps.artifacts.publish(logRef);
      return;
    } catch (err) {
      if (!(err instanceof SharedStoreError)) throw err;
      const why = `finished; its log waits for the shared store (tried again in ${delay / 1000}s): ${err.message}`;
      ctx.log.warn(why);
      onWait(why.slice(0, 200));
      await ctx.sleep(delay);
    }
  }
}

/**
 * Passes text through `filter` a whole line at a time, holding back an unfinished line (up to
 * LINE_CAP: output that never ends a line must not grow without bound).
 */
const LINE_CAP = 64 * 1024;
class LineFilter {
  private pending = '';

  constructor(private readonly filter: (text: string) => string) {}

  push(text: string): string {
    const all = this.pending + text;
    const cut = all.length > LINE_CAP ? all.length : all.lastIndexOf('\n') + 1;
    this.pending = all.slice(cut);
    return cut ? this.filter(all.slice(0, cut)) : '';
  }

  end(): string {
    const rest = this.pending;
    this.pending = '';
    return rest ? this.filter(rest) : '';
  }
}
