/** Running commands in a sandbox from an activity: heartbeats, cancellation, logs by reference. */
import { Context } from '@temporalio/activity';
import { tail } from '../store/artifacts';
import type { OutputParser } from '../agents/types';
import type { EgressRules } from '../sandbox/egress/rules';
import type { Sandbox } from '../sandbox/types';
import { StreamRedactor, redact } from '../store/secrets';
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
  opts: {
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
  },
): Promise<CommandReport & { budgetExceeded: boolean }> {
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
  const take = (text: string) => {
    if (!text) return;
    log.write(text);
    if (!opts.parser) return;
    opts.parser.push(text);
    if (opts.budgetUsd !== undefined && !budgetExceeded && opts.parser.progress().costUsd > opts.budgetUsd) {
      budgetExceeded = true;
      stop.abort();
    }
  };
  const beat = () => {
    // The last complete line: an unterminated one may still be growing (or held back by the redactor).
    const lines = log.last().split('\n');
    const partial = lines.pop() ?? '';
    const lastLine = (lines.filter((l) => l.trim()).pop() ?? partial).slice(0, 200);
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
      egress: opts.egress,
      signal: ctx.cancellationSignal.aborted ? ctx.cancellationSignal : stop.signal,
      onOutput: (chunk) => {
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
    clearInterval(timer);
    ctx.cancellationSignal.removeEventListener('abort', onCancel);
  }
  const logRef = await log.close();
  if (result.aborted && !budgetExceeded) await ctx.cancelled;
  return {
    exitCode: result.exitCode,
    timedOut: result.timedOut,
    durationMs: Date.now() - started,
    tail: tail(log.last()),
    logRef,
    budgetExceeded,
  };
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

/**
 * The environment of every git step Flotilla runs in a workspace. The agent controls the
 * workspace, `.git` included, so nothing in it may make our git run a program: no system or
 * global config, no hooks, no fsmonitor, and (see GIT_PREAMBLE) a repository config of our own,
 * so filter, diff and merge drivers an agent defined, `include.path`, aliases and
 * `core.sshCommand` are gone. Attributes naming such drivers then name nothing.
 */
const GIT_OVERRIDES: [string, string][] = [
  ['core.hooksPath', '/dev/null'],
  ['core.fsmonitor', 'false'],
  ['core.attributesFile', '/dev/null'],
  ['core.untrackedCache', 'false'],
  // No `git maintenance run --auto` after each commit and fetch: a process per step, for a
  // repository that lives as long as its sandbox.
  ['maintenance.auto', 'false'],
];
export const GIT_ENV: Record<string, string> = {
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_ATTR_NOSYSTEM: '1',
  GIT_TERMINAL_PROMPT: '0',
  // refs/replace/* would let the agent show our git a different history than the one exported.
  GIT_NO_REPLACE_OBJECTS: '1',
  GIT_CONFIG_COUNT: String(GIT_OVERRIDES.length),
  ...Object.fromEntries(
    GIT_OVERRIDES.flatMap(([k, v], i) => [
      [`GIT_CONFIG_KEY_${i}`, k],
      [`GIT_CONFIG_VALUE_${i}`, v],
    ]),
  ),
};

/**
 * Replaces the workspace's `.git/config` with Flotilla's own, keeping only the commit identity
 * (read without following includes, and only from a regular file: a FIFO would hang us). A
 * `.git` that is a file or a link (pointing git at a directory the agent prepared elsewhere) is
 * refused, and `commondir`, which would make git read its config from another directory, is
 * removed: Flotilla's workspaces are never linked worktrees.
 */
const GIT_PREAMBLE = `if [ -e .git ] || [ -L .git ]; then
  if [ -L .git ] || [ ! -d .git ]; then echo "the workspace's .git is not a directory; refusing to run git in it" >&2; exit 90; fi
  rm -rf .git/commondir
  __name= __email=
  if [ -f .git/config ] && [ ! -L .git/config ]; then
    __name=$(git config --file .git/config --get user.name 2>/dev/null || true)
    __email=$(git config --file .git/config --get user.email 2>/dev/null || true)
  fi
  rm -rf .git/config .git/config.worktree
  printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfilemode = true\\n\\tbare = false\\n\\tlogallrefupdates = true\\n[commit]\\n\\tgpgsign = false\\n' > .git/config
  if [ -n "$__name" ]; then git config user.name "$__name"; fi
  if [ -n "$__email" ]; then git config user.email "$__email"; fi
fi`;

export interface ScriptResult {
  exitCode: number;
  timedOut: boolean;
  /** Redacted output (its end, when long). */
  output: string;
}

/**
 * Runs a short bash script (git plumbing) in the workspace with git hardened; see GIT_ENV. With
 * `beside` (a script that runs while the agent does), the repository's config is left alone: the
 * script must not use the workspace's repository config (see checkpoint.ts).
 */
export async function runScript(
  sb: Sandbox,
  body: string,
  timeoutMs = 5 * 60_000,
  beside = false,
): Promise<ScriptResult> {
  const preamble = beside ? '' : GIT_PREAMBLE;
  const r = await sb.exec(`set -euo pipefail\n${preamble}\n${body}`, {
    env: GIT_ENV,
    timeoutMs,
    signal: Context.current().cancellationSignal,
  });
  if (r.aborted) await Context.current().cancelled;
  return { exitCode: r.exitCode, timedOut: r.timedOut, output: redact(r.output) };
}

/** Runs a short script (git plumbing) and returns its output; a non-zero exit is an error. */
export async function script(
  sb: Sandbox,
  body: string,
  what: string,
  timeoutMs = 5 * 60_000,
  beside = false,
): Promise<string> {
  const r = await runScript(sb, body, timeoutMs, beside);
  if (r.exitCode !== 0) {
    throw new Error(`${what} failed (exit ${r.exitCode}${r.timedOut ? ', timed out' : ''}): ${tail(r.output, 1500)}`);
  }
  return r.output;
}

/** Quotes a value for bash. */
export function sh(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}
