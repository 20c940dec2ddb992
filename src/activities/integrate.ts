/**
 * Integration: merging each worker's commits onto the base in a sandbox of its own, and the
 * agents that fix what the merge breaks (a conflict resolver, a repair agent), with the hidden
 * oracle tests kept out of their reach.
 *
 * Between activities the integration workspace is always at a commit with a clean tree (apart
 * from ignored files and placed oracles): an activity that leaves a merge or an agent's edits
 * behind on failure restores that state itself.
 */
import { randomBytes } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/activity';
import { BUNDLE_REF, runRef } from '../gitstore';
import { type Intent, conflictHunks, repairPrompt, resolverPrompt } from '../prompts';
import type { Sandbox } from '../sandbox/types';
import { type AgentSpec, pathIsUnder } from '../spec';
import { runHarness } from './agent';
import { type ActivityDeps, type SandboxRef, openSandbox } from './deps';
import { script, sh } from './exec';

const WORKER_TRAILER = 'Flotilla-Worker';
/** A report names at most this many offending paths. */
const MAX_LISTED_PATHS = 20;
const EXCLUDE_FILE = '.git/info/exclude';
const EXCLUDE_BEGIN = '# >>> flotilla oracle files (never committed)';
const EXCLUDE_END = '# <<< flotilla oracle files';

export type MergeOutcome =
  | { status: 'merged'; sha: string }
  | { status: 'conflict'; files: string[]; conflictsWith: string[] };

/** Where a redone worker starts instead of the base: a commit of the staging repository. */
export interface WorkerSeed {
  ref: string;
  sha: string;
}

/** One round of a resolver or repair agent. */
export interface FixerRound {
  ok: boolean;
  /** Why the round was rejected. */
  reason?: string;
  /** The integration head afterwards (the new commit when ok). */
  sha: string;
  diffstat?: string;
  costUsd: number;
  /** The agent's full output, when an agent ran. */
  logRef?: string;
}

interface FixerInput {
  sandbox: SandboxRef;
  runKey: string;
  agent: AgentSpec;
  objective: string;
  round: number;
  maxRounds: number;
  /** What the agent is told to verify its work with: the setup and test commands. */
  verifyCmd: string;
  timeoutMs: number;
  /** Dollars this round may spend; the agent is stopped when it passes them. */
  budgetUsd?: number;
  /** Hidden from the agent for the whole round. */
  oraclePaths: string[];
}

function mergeMessage(title: string, workerId: string, runKey: string, extra = ''): string {
  return `${title}\n\n${WORKER_TRAILER}: ${workerId}\nFlotilla-Run: ${runKey}${extra}`;
}

/** Starts the merge of `ref`; prints MERGED, or FILE lines naming the conflicts and leaves the merge in progress. */
function mergeScript(ref: string, message: string): string {
  return `if git merge -q --no-ff --no-verify -m ${sh(message)} ${sh(ref)} >/dev/null 2>&1; then
  echo MERGED
else
  git -c core.quotepath=off diff --name-only --diff-filter=U | sed 's/^/FILE /'
fi`;
}

/** Back to `sha` with a clean tree: any merge in progress and any edit an agent left are dropped. */
function restoreScript(sha: string): string {
  return `git merge --abort >/dev/null 2>&1 || true
git reset -q --hard ${sh(sha)}
git clean -fdq`;
}

function linesWith(out: string, prefix: string): string[] {
  return out
    .split('\n')
    .filter((l) => l.startsWith(prefix))
    .map((l) => l.slice(prefix.length));
}

function listed(paths: string[]): string {
  const more = paths.length > MAX_LISTED_PATHS ? ` and ${paths.length - MAX_LISTED_PATHS} more` : '';
  return paths.slice(0, MAX_LISTED_PATHS).join(', ') + more;
}

/** `git diff --stat` of from..to, at most 40 lines; the summary line survives a cut. */
async function diffstat(sb: Sandbox, from: string, to: string, paths: string[] = []): Promise<string> {
  const limit = paths.length ? ` -- ${paths.map(sh).join(' ')}` : '';
  const out = await script(sb, `git diff --stat=100 ${sh(from)} ${sh(to)}${limit} | { head -n 39; tail -n 1; } | awk '!seen[$0]++'`, 'summarizing changes');
  const stat = out.trimEnd().split('\n').filter(Boolean);
  return (stat.length > 40 ? [...stat.slice(0, 38), '...', stat[stat.length - 1]] : stat).join('\n');
}

/** A pattern for .git/info/exclude that matches exactly this path. */
function excludePattern(path: string): string {
  return '/' + path.replace(/[\\*?[\]!# ]/g, (c) => `\\${c}`);
}

/** Removes the oracle files (and their exclusion) and proves they are gone; fails the activity otherwise. */
async function hideOracles(sb: Sandbox, paths: string[]): Promise<void> {
  if (paths.length === 0) return;
  const out = await script(
    sb,
    `for p in ${paths.map(sh).join(' ')}; do
  rm -rf -- "$p"
  d=$(dirname -- "$p"); [ "$d" = . ] || rmdir -p --ignore-fail-on-non-empty -- "$d" 2>/dev/null || true
done
if [ -f ${EXCLUDE_FILE} ]; then sed -i ${sh(`\\|^${EXCLUDE_BEGIN}$|,\\|^${EXCLUDE_END}$|d`)} ${EXCLUDE_FILE}; fi
for p in ${paths.map(sh).join(' ')}; do if [ -e "$p" ] || [ -L "$p" ]; then echo "LEFT $p"; fi; done
if grep -qF ${sh(EXCLUDE_BEGIN)} ${EXCLUDE_FILE} 2>/dev/null; then echo "LEFT ${EXCLUDE_FILE}"; fi`,
    'hiding the oracle files',
  );
  const left = linesWith(out, 'LEFT ');
  if (left.length) throw ApplicationFailure.nonRetryable(`could not hide the oracle files from the agent: ${left.join(', ')} remain`, 'OracleExposed');
}

/** Why the oracle files cannot be used on this tree, or undefined: they must be in no commit and not tracked. */
async function oracleProblem(sb: Sandbox, baseSha: string, paths: string[]): Promise<string | undefined> {
  if (paths.length === 0) return undefined;
  const list = paths.map(sh).join(' ');
  const out = await script(
    sb,
    `git -c core.quotepath=off ls-files -- ${list} | sed 's/^/TRACKED /'
git -c core.quotepath=off log --full-history --format='COMMIT %h %s' ${sh(baseSha)}..HEAD -- ${list} | head -n 5`,
    'checking that no commit holds an oracle file',
  );
  const tracked = linesWith(out, 'TRACKED ');
  if (tracked.length) return `the integrated tree has files of its own at oracle paths: ${listed(tracked)}`;
  const commits = linesWith(out, 'COMMIT ');
  if (commits.length) return `commits of this run touch oracle paths: ${commits.join('; ')}`;
  return undefined;
}

/** Problems with what the staged changes since `from` would commit: markers, .rej files, paths it may not change. */
async function changeProblems(sb: Sandbox, from: string, allowed: (path: string) => boolean): Promise<{ changed: string[]; problems: string[] }> {
  const out = await script(
    sb,
    `git -c core.quotepath=off diff --cached --name-only --no-renames ${sh(from)} | sed 's/^/CHANGED /'
git -c core.quotepath=off diff --cached --check ${sh(from)} | grep -F 'leftover conflict marker' | sed 's/^/MARKER /' || true
find . -path ./.git -prune -o -name '*.rej' -print | sed 's/^/REJ /'`,
    'checking the changes',
  );
  const changed = linesWith(out, 'CHANGED ');
  const problems: string[] = [];
  const markers = linesWith(out, 'MARKER ').map((l) => l.replace(/: leftover conflict marker$/, ''));
  if (markers.length) problems.push(`conflict markers left at ${listed(markers)}`);
  const rejects = linesWith(out, 'REJ ').map((l) => l.replace(/^\.\//, ''));
  if (rejects.length) problems.push(`.rej files left: ${listed(rejects)}`);
  const outside = changed.filter((p) => !allowed(p));
  if (outside.length) problems.push(`changed paths it may not change: ${listed(outside)}`);
  return { changed, problems };
}

/** Runs a fixer agent on `prompt` in the integration sandbox; the caller has hidden the oracle files. */
async function runFixer(deps: ActivityDeps, sb: Sandbox, input: FixerInput, role: 'resolver' | 'repair', prompt: string) {
  const run = await runHarness(deps, sb, {
    agent: input.agent,
    workerId: role,
    objective: input.objective,
    prompt,
    timeoutMs: input.timeoutMs,
    budgetUsd: input.budgetUsd,
  });
  // No one is there to answer a fixer mid-integration: a question ends its round, and shows in the report.
  const failure = run.budgetExceeded
    ? `the ${role} agent was stopped at its budget`
    : run.timedOut
      ? `the ${role} agent timed out`
      : run.agent.question
        ? `the ${role} agent stopped to ask: ${run.agent.question}`
        : run.exitCode !== 0
          ? `the ${role} agent exited with code ${run.exitCode}`
          : undefined;
  return { failure, costUsd: run.agent.costUsd, logRef: run.logRef };
}

/** A failed round: the workspace goes back to `sha`, and the round's cost is still counted. */
async function rejectRound(
  sb: Sandbox,
  sha: string,
  reason: string,
  run: { costUsd: number; logRef: string },
  what: string,
): Promise<FixerRound> {
  await script(sb, restoreScript(sha), what);
  return { ok: false, reason, sha, costUsd: run.costUsd, logRef: run.logRef };
}

export function integrateActivities(deps: ActivityDeps) {
  return {
    /**
     * Merges one worker's commits into the integration branch with a 3-way merge. A worker that
     * is already merged is left alone, so a retry never merges twice. On conflict the merge is
     * aborted and the report names the files and the earlier workers that changed them.
     */
    async mergeWorker(input: {
      sandbox: SandboxRef;
      runKey: string;
      /** The sub-task, as the merge commit's trailer names it. */
      workerId: string;
      ref: string;
      headSha: string;
      /** The commit the worker started from: the base, or the seed of a redone sub-task. */
      startSha: string;
      baseSha: string;
      title: string;
    }): Promise<MergeOutcome> {
      const sb = await openSandbox(deps, input.sandbox);
      const already = await sb.exec(`git merge-base --is-ancestor ${sh(input.headSha)} HEAD && git rev-parse HEAD`, { timeoutMs: 60_000 });
      if (already.exitCode === 0) return { status: 'merged', sha: already.output.trim() };
      const staging = await deps.staging();
      const bundle = `${sb.scratch}/merge.bundle`;
      await sb.writeFile(bundle, await staging.createBundle(input.ref, input.startSha));
      const out = await script(
        sb,
        `git fetch -q ${sh(bundle)} ${sh(`+${input.ref}:${input.ref}`)}
rm -f ${sh(bundle)}
${mergeScript(input.ref, mergeMessage(input.title, input.workerId, input.runKey))}
if git rev-parse -q --verify MERGE_HEAD >/dev/null; then git merge --abort; fi
echo "HEAD $(git rev-parse HEAD)"`,
        `merging worker ${input.workerId}`,
      );
      if (out.includes('MERGED')) return { status: 'merged', sha: linesWith(out, 'HEAD ')[0] };
      const files = linesWith(out, 'FILE ');
      const owners = await script(
        sb,
        `git log --first-parent --format='%(trailers:key=${WORKER_TRAILER},valueonly)' ${sh(input.baseSha)}..HEAD -- ${files.map(sh).join(' ')}`,
        'finding the workers that touched the conflicting files',
      );
      const conflictsWith = [...new Set(owners.split('\n').map((l) => l.trim()).filter(Boolean))];
      return { status: 'conflict', files, conflictsWith };
    },

    /**
     * One resolver round: the worker's merge is started again from `intoSha` and left in
     * progress with its conflicts; the agent edits the tree. The round succeeds when the merge
     * is still in progress (not committed, aborted or restarted), no conflict marker or .rej file
     * is left and only files the merge touches changed; then the merge is committed here (what
     * the agent left unstaged is staged, as a worker's leftovers are committed). Otherwise the
     * merge is aborted and the workspace is back at `intoSha`.
     */
    async resolveConflict(
      input: FixerInput & {
        workerId: string;
        ref: string;
        headSha: string;
        intoSha: string;
        title: string;
        incoming: Intent;
        integrated: Intent[];
        previousFailure?: string;
      },
    ): Promise<FixerRound> {
      const sb = await openSandbox(deps, input.sandbox);
      await hideOracles(sb, input.oraclePaths);
      const message = mergeMessage(input.title, input.workerId, input.runKey, `\nFlotilla-Resolved-By: resolver round ${input.round}`);
      const started = await script(
        sb,
        `${restoreScript(input.intoSha)}
${mergeScript(input.ref, message)}
git -c core.quotepath=off diff --name-only --no-renames "$(git merge-base HEAD ${sh(input.headSha)})" ${sh(input.headSha)} | sed 's/^/TOUCHED /'
echo "HEAD $(git rev-parse HEAD)"`,
        'starting the conflicting merge',
      );
      if (started.includes('MERGED')) return { ok: true, sha: linesWith(started, 'HEAD ')[0], costUsd: 0 };
      const files = linesWith(started, 'FILE ');
      const touched = new Set(linesWith(started, 'TOUCHED '));
      const hunks: string[] = [];
      for (const file of files) {
        const text = await sb
          .readFile(`${sb.workspace}/${file}`)
          .then((b) => Buffer.from(b).toString('utf8'))
          .catch(() => undefined);
        hunks.push(text === undefined ? `--- ${file}\n(deleted on one side)` : conflictHunks(file, text));
      }
      const prompt = resolverPrompt({
        objective: input.objective,
        incoming: input.incoming,
        integrated: input.integrated,
        files,
        round: input.round,
        maxRounds: input.maxRounds,
        previousFailure: input.previousFailure,
        verifyCmd: input.verifyCmd,
        hunks: hunks.join('\n'),
        nonce: randomBytes(8).toString('hex'),
      });
      const run = await runFixer(deps, sb, input, 'resolver', prompt);
      const reject = (reason: string) => rejectRound(sb, input.intoSha, reason, run, 'aborting the merge');
      if (run.failure) return reject(run.failure);
      const state = await script(
        sb,
        `echo "HEAD $(git rev-parse HEAD)"
echo "MERGE_HEAD $(git rev-parse -q --verify MERGE_HEAD || true)"`,
        'reading the merge state',
      );
      if (linesWith(state, 'HEAD ')[0] !== input.intoSha || linesWith(state, 'MERGE_HEAD ')[0] !== input.headSha) {
        return reject('the merge was no longer in progress: the resolver committed, aborted or restarted it');
      }
      await script(sb, 'git add -A', 'staging the resolution');
      const { problems } = await changeProblems(sb, input.intoSha, (p) => touched.has(p) && !input.oraclePaths.some((o) => pathIsUnder(p, o)));
      if (problems.length) return reject(problems.join('; '));
      const committed = await script(sb, `git commit -q --no-verify -m ${sh(message)}\ngit rev-parse HEAD`, 'committing the resolved merge');
      return {
        ok: true,
        sha: committed.trim(),
        diffstat: await diffstat(sb, input.intoSha, 'HEAD', files),
        costUsd: run.costUsd,
        logRef: run.logRef,
      };
    },

    /**
     * One repair round on `fromSha`, whose tests failed with the output in `logRef`. The agent's
     * edits (even ones it committed against the rules) become one commit, unless they change a
     * path outside `allowedPaths` or an oracle path, leave conflict markers or .rej files, or
     * change nothing: then they are dropped and the workspace is back at `fromSha`.
     */
    async repairTests(
      input: FixerInput & {
        fromSha: string;
        tasks: Intent[];
        /** The command that failed, its exit code and full output. */
        failedCmd: string;
        exitCode: number;
        logRef: string;
        /** Normalized: the sub-tasks' ownedPaths and sharedPaths. */
        allowedPaths: string[];
      },
    ): Promise<FixerRound> {
      const sb = await openSandbox(deps, input.sandbox);
      await hideOracles(sb, input.oraclePaths);
      await script(sb, restoreScript(input.fromSha), 'cleaning the workspace');
      const output = (await deps.artifacts.get(input.logRef)).toString('utf8');
      const prompt = repairPrompt({
        objective: input.objective,
        tasks: input.tasks,
        failedCmd: input.failedCmd,
        verifyCmd: input.verifyCmd,
        exitCode: input.exitCode,
        round: input.round,
        maxRounds: input.maxRounds,
        allowedPaths: input.allowedPaths,
        output,
        nonce: randomBytes(8).toString('hex'),
      });
      const run = await runFixer(deps, sb, input, 'repair', prompt);
      const reject = (reason: string) => rejectRound(sb, input.fromSha, reason, run, 'dropping the repair');
      if (run.failure) return reject(run.failure);
      await script(sb, `git reset -q --soft ${sh(input.fromSha)}\ngit add -A`, 'staging the repair');
      const { changed, problems } = await changeProblems(
        sb,
        input.fromSha,
        (p) => input.allowedPaths.some((a) => pathIsUnder(p, a)) && !input.oraclePaths.some((o) => pathIsUnder(p, o)),
      );
      if (problems.length) return reject(problems.join('; '));
      if (changed.length === 0) return reject('the repair agent changed nothing');
      const message = `Repair round ${input.round}: make the tests pass\n\nFlotilla-Repair-Round: ${input.round}\nFlotilla-Run: ${input.runKey}`;
      const committed = await script(sb, `git commit -q --no-verify -m ${sh(message)}\ngit rev-parse HEAD`, 'committing the repair');
      return {
        ok: true,
        sha: committed.trim(),
        diffstat: await diffstat(sb, input.fromSha, 'HEAD'),
        costUsd: run.costUsd,
        logRef: run.logRef,
      };
    },

    /**
     * Keeps the oracle files host-side, in the artifact store, so that later activities (and
     * workflow history) carry only their references. Their contents cross history once more
     * here, as this activity's input.
     */
    async storeOracles(input: { files: Record<string, string> }): Promise<{ path: string; ref: string }[]> {
      return Promise.all(Object.entries(input.files).map(async ([path, content]) => ({ path, ref: await deps.artifacts.put(content) })));
    },

    /**
     * Writes the oracle files into the integration workspace for a test run, excluded from git.
     * Refuses (returning why) when the tree has files of its own at those paths or a commit of
     * the run touches them, since the tests would then not be the hidden ones.
     */
    async placeOracles(input: { sandbox: SandboxRef; baseSha: string; oracles: { path: string; ref: string }[] }): Promise<{ problem?: string }> {
      const sb = await openSandbox(deps, input.sandbox);
      const paths = input.oracles.map((o) => o.path);
      const problem = await oracleProblem(sb, input.baseSha, paths);
      if (problem) return { problem };
      await hideOracles(sb, paths);
      for (const o of input.oracles) await sb.writeFile(`${sb.workspace}/${o.path}`, await deps.artifacts.get(o.ref));
      const block = [EXCLUDE_BEGIN, ...paths.map(excludePattern), EXCLUDE_END].join('\n');
      await script(sb, `mkdir -p .git/info\nprintf '%s\\n' ${sh(block)} >> ${EXCLUDE_FILE}`, 'excluding the oracle files from git');
      return {};
    },

    /**
     * Copies the integration branch into the staging repository as `refs/flotilla/<run>/<name>`;
     * returns its SHA and a diffstat against the base for the people who approve the push. A
     * commit holding an oracle file is never exported.
     */
    async exportIntegrated(input: { sandbox: SandboxRef; runKey: string; baseSha: string; name: string; oraclePaths: string[] }): Promise<{
      sha: string;
      ref: string;
      diffstat: string;
    }> {
      const sb = await openSandbox(deps, input.sandbox);
      const problem = await oracleProblem(sb, input.baseSha, input.oraclePaths);
      if (problem) throw ApplicationFailure.nonRetryable(`refusing to export the integrated tree: ${problem}`, 'OracleExposed');
      const head = (await script(sb, 'git rev-parse HEAD', 'reading the integrated commit')).trim();
      const stat = await diffstat(sb, input.baseSha, head);
      const staging = await deps.staging();
      const ref = runRef(input.runKey, input.name);
      if (head === input.baseSha) {
        await staging.setRef(ref, head);
        return { sha: head, ref, diffstat: stat };
      }
      const bundle = `${sb.scratch}/integrated.bundle`;
      await script(sb, `git update-ref ${BUNDLE_REF} HEAD\ngit bundle create -q ${sh(bundle)} ${BUNDLE_REF} ^${sh(input.baseSha)}`, 'bundling the integrated commits');
      const sha = await staging.importBundle(await sb.readFile(bundle), ref);
      return { sha, ref, diffstat: stat };
    },

    /**
     * Moves a freshly seeded worker workspace onto `seed`, so a redone sub-task starts from the
     * integrated tree. A workspace already there (or past it) is left alone.
     */
    async checkoutSeed(input: { sandbox: SandboxRef; baseSha: string; seed: WorkerSeed }): Promise<void> {
      const sb = await openSandbox(deps, input.sandbox);
      const there = await sb.exec(`git merge-base --is-ancestor ${sh(input.seed.sha)} HEAD`, { timeoutMs: 60_000 });
      if (there.exitCode === 0) return;
      const staging = await deps.staging();
      const bundle = `${sb.scratch}/seed.bundle`;
      await sb.writeFile(bundle, await staging.createBundle(input.seed.ref, input.baseSha));
      await script(
        sb,
        `git fetch -q ${sh(bundle)} ${sh(`+${input.seed.ref}:refs/flotilla/seed`)}
rm -f ${sh(bundle)}
git reset -q --hard ${sh(input.seed.sha)}`,
        'moving the workspace onto the integrated tree',
      );
    },
  };
}
