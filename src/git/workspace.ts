/**
 * Git in a sandbox's workspace, driven from the host: Flotilla's short bash scripts (git
 * plumbing) run there with the sandbox policy (env.ts) and, unless they run beside a running
 * agent, a repository config of Flotilla's own. Their output is redacted of the worker's secrets
 * before anything reads it.
 */
import { tail } from '../store/artifacts';
import { redact } from '../store/secrets';
import type { Sandbox } from '../sandbox/types';
import { sandboxGitEnv } from './env';

/** Quotes a value for bash. */
export function sh(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}

/**
 * The repository config Flotilla gives a workspace: git's usual core settings, no signing, no
 * background maintenance (a process after each of the agent's commits, for a repository that lives
 * as long as its sandbox), and the commit identity.
 */
const FIXED_CONFIG =
  '[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n' +
  '[commit]\n\tgpgsign = false\n[maintenance]\n\tauto = false\n';

/** A value as `__flotilla_config` quotes it: in double quotes, `\`, `"`, newline and tab escaped. */
const QUOTED_VALUE = '"([^"\\\n]|\\\\[\\\\"nt])*"';

/** Bash functions: the config itself (`__flotilla_config NAME EMAIL`, an empty value left out), and whether .git/config is exactly such a config. */
const CONFIG_FUNCTIONS = `__flotilla_quote() { local v=$1; v=\${v//\\\\/\\\\\\\\}; v=\${v//\\"/\\\\\\"}; v=\${v//$'\\n'/\\\\n}; v=\${v//$'\\t'/\\\\t}; printf '"%s"' "$v"; }
__flotilla_config() {
  printf %s ${sh(FIXED_CONFIG)}
  if [ -n "$1$2" ]; then printf '[user]\\n'; fi
  if [ -n "$1" ]; then printf '\\tname = %s\\n' "$(__flotilla_quote "$1")"; fi
  if [ -n "$2" ]; then printf '\\temail = %s\\n' "$(__flotilla_quote "$2")"; fi
}
__flotilla_config_is_ours() {
  local c= more= re=${sh(`^${FIXED_CONFIG.replace(/[[\]]/g, '\\$&')}(\\[user\\]\n(\tname = ${QUOTED_VALUE}\n)?(\temail = ${QUOTED_VALUE}\n)?)?$`)}
  [ -f .git/config ] && [ ! -L .git/config ] || return 1
  { IFS= read -r -d '' -n 4096 c; IFS= read -r -d '' -n 1 more; } < .git/config || true
  [ -z "$more" ] && [[ $c =~ $re ]]
}`;

/**
 * Replaces the workspace's `.git/config` with Flotilla's own, keeping only the commit identity
 * (read without following includes, and only from a regular file: a FIFO would hang us). The new
 * config is written beside the old one and renamed over it, so a rewrite that fails (a full disk)
 * leaves the old config, and the identity, where they were. A config that is exactly Flotilla's
 * already (the common case: the agent did not touch it) is left as it is, without starting a
 * program. A `.git` that is a file or a link (pointing git at a directory the agent prepared
 * elsewhere) is refused, and `commondir`, which would make git read its config from another
 * directory, is removed: Flotilla's workspaces are never linked worktrees.
 */
const REPO_CONFIG_PREAMBLE = `${CONFIG_FUNCTIONS}
if [ -e .git ] || [ -L .git ]; then
  if [ -L .git ] || [ ! -d .git ]; then echo "the workspace's .git is not a directory; refusing to run git in it" >&2; exit 90; fi
  for __f in .git/commondir .git/config.worktree; do if [ -e "$__f" ] || [ -L "$__f" ]; then rm -rf "$__f"; fi; done
  if ! __flotilla_config_is_ours; then
    __name= __email= __new=.git/config.flotilla-new
    if [ -f .git/config ] && [ ! -L .git/config ]; then
      __name=$(git config --file .git/config --get user.name 2>/dev/null || true)
      __email=$(git config --file .git/config --get user.email 2>/dev/null || true)
    fi
    rm -rf "$__new" "$__new.lock"
    __flotilla_config "$__name" "$__email" > "$__new"
    if [ -d .git/config ] && [ ! -L .git/config ]; then rm -rf .git/config; fi
    mv -fT "$__new" .git/config
  fi
fi`;

/** The bash lines that give a fresh repository in the workspace Flotilla's config, with this identity. */
export function freshConfig(name: string, email: string): string {
  return `${CONFIG_FUNCTIONS}\n__flotilla_config ${sh(name)} ${sh(email)} > .git/config`;
}

export interface ScriptResult {
  exitCode: number;
  timedOut: boolean;
  /** Redacted output (its end, when long). */
  output: string;
}

export interface ScriptOptions {
  timeoutMs?: number;
  /**
   * The script runs while the agent does: the repository's config is left alone (the agent's git
   * would read a half-written one), so the script must not use it (see checkpoint.ts).
   */
  beside?: boolean;
}

const SCRIPT_TIMEOUT_MS = 5 * 60_000;

/** A sandbox's workspace, as Flotilla's git scripts reach it. */
export class Workspace {
  /** `signal`: stops a running script (the activity's cancellation); the script then throws its reason. */
  constructor(
    readonly sb: Sandbox,
    private readonly signal?: AbortSignal,
  ) {}

  /** Runs a short bash script in the workspace with git hardened; its exit code is the caller's to judge. */
  async run(body: string, opts: ScriptOptions = {}): Promise<ScriptResult> {
    const preamble = opts.beside ? '' : REPO_CONFIG_PREAMBLE;
    const r = await this.sb.exec(`set -euo pipefail\n${preamble}\n${body}`, {
      env: { ...sandboxGitEnv() },
      timeoutMs: opts.timeoutMs ?? SCRIPT_TIMEOUT_MS,
      signal: this.signal,
    });
    if (r.aborted) throw this.signal?.reason ?? new Error('the script was stopped');
    return { exitCode: r.exitCode, timedOut: r.timedOut, output: redact(r.output) };
  }

  /** Runs a short script and returns its output; a non-zero exit is an error saying `what` failed. */
  async script(body: string, what: string, opts: ScriptOptions = {}): Promise<string> {
    const r = await this.run(body, opts);
    if (r.exitCode !== 0) throw scriptFailed(what, r);
    return r.output;
  }
}

/** The error for a script that exited non-zero: what failed, how, and the end of its output. */
export function scriptFailed(what: string, r: ScriptResult, shown = 1500): Error {
  return new Error(`${what} failed (exit ${r.exitCode}${r.timedOut ? ', timed out' : ''}): ${tail(r.output, shown)}`);
}
