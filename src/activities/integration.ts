/**
 * Integration: merging the workers' commits on the host (src/git/merge.ts), testing the result in a
 * sandbox, and the agents that fix what the merge breaks (a conflict resolver, a repair agent).
 *
 * Every commit of the integration is made here, on the host, from trees computed or checked
 * here: what a sandbox sends back is only ever a tree, accepted after checks (paths, conflict
 * markers, hidden test paths). Two sandboxes keep the hidden tests apart from the fixers: the
 * test sandbox, the only place they are ever written, and the fixer sandbox, which never sees
 * them, so nothing a test process leaves behind (a copy in an ignored file, in .git, in /tmp)
 * can reach a fixer.
 */
import { randomBytes } from 'node:crypto';
import { BUNDLE_REF } from '../git/bundles';
import { scrubSecrets } from '../git/remote';
import { SharedStoreError } from '../git/shared-store';
import { runKeyOfRef, runRef } from '../git/staging';
import { permanent } from '../contracts/failures';
import {
  addedMarkers,
  changedPaths,
  commitTree,
  diffstat,
  listTree,
  mergeBase,
  mergeMessage,
  mergeTrees,
  mergeWorkers,
  readBlob,
  treeOf,
  type MergeRun,
  type SubTaskHead,
} from '../git/merge';
import { type OracleFile, clashesWithOracle, oracleFiles, oracleRedactor } from '../git/oracle';
import { type Intent, conflictHunks, repairPrompt, resolverPrompt } from '../contracts/prompts';
import type { Sandbox } from '../sandbox/types';
import { type AgentSpec } from '../contracts/request';
import { pathIsUnder } from '../contracts/names';
import { runHarness } from './agent';
import { type ActivityDeps, type SandboxRef, openSandbox, runOfSandbox } from './deps';
import { execTracked, script, sh } from './exec';
import { baseObjects } from './sandbox';

/** A report names at most this many offending paths. */
const MAX_LISTED_PATHS = 20;

export type { MergeRun, SubTaskHead };

/** Where a redone worker starts instead of the base: a commit of the staging repository. */
export interface SubTaskSeed {
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

/** One run of the setup and test commands on a commit, with the hidden tests in place. */
export interface TestRun {
  passed: boolean;
  /** "the setup command" or "the test command": the first that failed, or the test command. */
  what: string;
  command: string;
  exitCode: number;
  timedOut: boolean;
  /** Redacted of hidden test names and text. */
  tail: string;
  logRef: string;
  /** What the run committed or changed in its checkout, all of it discarded. */
  discarded?: string;
  /** Why the run does not count: the hidden tests could not be placed or were altered. */
  problem?: string;
}

interface FixerInput {
  /** The fixer sandbox: never holds the hidden tests. */
  sandbox: SandboxRef;
  runKey: string;
  baseSha: string;
  agent: AgentSpec;
  objective: string;
  round: number;
  maxRounds: number;
  /** What the agent is told to verify its work with: the setup and test commands. */
  verifyCmd: string;
  timeoutMs: number;
  /** Dollars this round may spend; the agent is stopped when it passes them. */
  budgetUsd?: number;
  /** The hidden tests' commit in the staging repository: their paths are off limits. */
  oracleSha?: string;
  /** Seconds since the epoch for the commits this round makes, so a retry makes the same ones. */
  at: number;
}

function listed(paths: string[]): string {
  const more = paths.length > MAX_LISTED_PATHS ? ` and ${paths.length - MAX_LISTED_PATHS} more` : '';
  return paths.slice(0, MAX_LISTED_PATHS).join(', ') + more;
}

async function stagingDir(deps: ActivityDeps, runKey: string): Promise<string> {
  return (await deps.staging(runKey)).dir;
}

async function oraclePathsOf(deps: ActivityDeps, runKey: string, sha: string | undefined): Promise<string[]> {
  return sha ? (await listTree(await stagingDir(deps, runKey), sha)).map((e) => e.path) : [];
}

/**
 * Makes the workspace a fresh checkout of `sha` (a staging commit): everything in it, .git
 * included, is replaced, so nothing an earlier command left (ignored files, a planted hook,
 * replace refs that would make git check out another tree) survives. With `indexAt`, HEAD and
 * the index are at that commit, so the working tree shows `sha`'s changes as edits.
 */
async function checkout(
  deps: ActivityDeps,
  sb: Sandbox,
  c: { sandbox: SandboxRef; runKey: string; baseSha: string; sha: string; indexAt?: string },
): Promise<void> {
  const staging = await deps.staging(c.runKey);
  const base = await baseObjects(deps, sb, { sandboxKey: c.sandbox.key, runKey: c.runKey, baseSha: c.baseSha });
  // Only what the run added to the base travels; the base's objects are there already.
  const bundle = `${sb.scratch}/checkout.bundle`;
  const ref = runRef(c.runKey, 'checkout');
  if (c.sha !== c.baseSha) {
    await staging.setRef(ref, c.sha);
    await staging.withBundleFile(async (file) => {
      await staging.createBundle(file, ref, c.baseSha);
      await sb.copyIn(file, bundle);
    });
  }
  await script(
    sb,
    `# Configuration a command may have planted in $HOME does not apply either.
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 GIT_NO_REPLACE_OBJECTS=1
chmod -R u+w . 2>/dev/null || true
find . -mindepth 1 -maxdepth 1 -exec rm -rf {} +
git init -q .
git config user.name 'Flotilla integration'
git config user.email flotilla@localhost
git config commit.gpgsign false
${base}
${c.sha !== c.baseSha ? `git fetch -q ${sh(bundle)} ${sh(`+${ref}:${ref}`)}\nrm -f ${sh(bundle)}` : ''}
git checkout -q --detach ${sh(c.sha)}${c.indexAt ? `\ngit reset -q ${sh(c.indexAt)}` : ''}`,
    'checking out the tree to work on',
  );
}

/**
 * Brings the fixer's working tree back to the host as a commit of the staging repository and
 * returns its tree. The commit is only the transport (whatever the agent did to HEAD, its
 * history and metadata are dropped); the tree is checked before the host commits it.
 */
async function bringBack(
  deps: ActivityDeps,
  sb: Sandbox,
  c: { runKey: string; from: string },
): Promise<{ tree: string } | { problem: string }> {
  const bundle = `${sb.scratch}/edits.bundle`;
  try {
    await script(
      sb,
      `git add -A
git -c user.name=fixer -c user.email=fixer@localhost -c commit.gpgsign=false commit -q --no-verify --allow-empty -m 'fixer edits'
git update-ref ${BUNDLE_REF} HEAD
git bundle create -q ${sh(bundle)} ${BUNDLE_REF} ^${sh(c.from)}`,
      'collecting the edits',
    );
    const staging = await deps.staging(c.runKey);
    const sha = await staging.withBundleFile(async (file) => {
      await sb.copyOut(bundle, file);
      return staging.importBundle(file, runRef(c.runKey, 'edits'));
    });
    return { tree: await treeOf(staging.dir, sha) };
  } catch (err) {
    if (err instanceof SharedStoreError) throw err;
    // The agent controls the workspace's .git: a failure here is its doing, and fails its round.
    return {
      problem: `its edits could not be collected: ${scrubSecrets(err instanceof Error ? err.message : String(err)).slice(0, 300)}`,
    };
  }
}

/**
 * Problems with `tree` as a change of `from`: conflict markers, .rej files, paths it may not
 * change. Hidden test paths are counted, never named: the reason goes into history.
 */
async function editProblems(
  dir: string,
  c: { from: string; tree: string; allowed: (path: string) => boolean; oraclePaths: string[] },
): Promise<{ changed: string[]; problems: string[] }> {
  const changed = await changedPaths(dir, c.from, c.tree);
  const problems: string[] = [];
  const markers = await addedMarkers(dir, c.from, c.tree);
  if (markers.length) problems.push(`conflict markers left at ${listed(markers)}`);
  const hidden = changed.filter((p) => clashesWithOracle(p, c.oraclePaths));
  if (hidden.length) problems.push(`changed ${hidden.length} path(s) reserved for the hidden tests`);
  const rest = changed.filter((p) => !hidden.includes(p));
  const rejects = rest.filter((p) => /\.(rej|orig)$/.test(p));
  if (rejects.length) problems.push(`.rej or .orig files left: ${listed(rejects)}`);
  const outside = rest.filter((p) => !c.allowed(p) && !rejects.includes(p));
  if (outside.length) problems.push(`changed paths it may not change: ${listed(outside)}`);
  return { changed, problems };
}

/** Runs a fixer agent on `prompt` in the fixer sandbox. */
async function runFixer(
  deps: ActivityDeps,
  sb: Sandbox,
  input: FixerInput,
  role: 'resolver' | 'repair',
  prompt: string,
) {
  const run = await runHarness(
    deps,
    sb,
    {
      agent: input.agent,
      workerId: role,
      objective: input.objective,
      prompt,
      timeoutMs: input.timeoutMs,
      budgetUsd: input.budgetUsd,
    },
    input.runKey,
  );
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

/**
 * The hidden tests go in read-only. The owner of a file can still make it writable again, so
 * this is a tripwire; the hash check after the run is the guarantee.
 */
async function placeReadOnly(sb: Sandbox, files: OracleFile[]): Promise<void> {
  // Owned by the host's user, not the sandbox's: test code cannot chmod them back and rewrite them.
  for (const f of files)
    await sb.writeFile(`${sb.workspace}/${f.path}`, f.content, { readOnly: true, executable: f.executable });
}

/** How many hidden test files are no longer exactly what was placed (changed, replaced or gone). */
async function alteredOracles(sb: Sandbox, files: OracleFile[]): Promise<number> {
  let altered = 0;
  for (const f of files) {
    const now = await sb.readFile(`${sb.workspace}/${f.path}`).catch(() => undefined);
    if (!now || !Buffer.from(now).equals(f.content)) altered++;
  }
  return altered;
}

/** What a test run committed or changed in its checkout, in words; undefined when nothing. */
async function testRunChanges(
  sb: Sandbox,
  sha: string,
  oraclePaths: string[],
  redact: (t: string) => string,
): Promise<string | undefined> {
  const r = await sb.exec(
    'git rev-parse HEAD; git -c core.quotepath=off status --porcelain --no-renames --untracked-files=all -z',
    { timeoutMs: 60_000 },
  );
  const [headLine, ...rest] = r.output.split('\n');
  const head = headLine.trim();
  const changed = rest
    .join('\n')
    .split('\0')
    .filter(Boolean)
    .map((e) => e.slice(3))
    .filter((p) => p && !clashesWithOracle(p, oraclePaths));
  const said: string[] = [];
  if (r.exitCode !== 0) said.push('the test run left the checkout unreadable by git');
  else if (head !== sha) said.push(`the test run moved HEAD to ${head.slice(0, 12)}: its commits were discarded`);
  if (changed.length) said.push(`the test run changed ${changed.length} file(s), discarded: ${listed(changed)}`);
  return said.length ? redact(said.join('; ')) : undefined;
}

async function rejected(reason: string, sha: string, run: { costUsd: number; logRef: string }): Promise<FixerRound> {
  return { ok: false, reason, sha, costUsd: run.costUsd, logRef: run.logRef };
}

export function integrateActivities(deps: ActivityDeps) {
  return {
    /**
     * Fetches the hidden tests into the staging repository. History learns only the commit and
     * how many files it has; their names and contents stay on the host.
     */
    async fetchOracle(input: { runKey: string; url: string; ref: string }): Promise<{ sha: string; count: number }> {
      const staging = await deps.staging(input.runKey);
      let sha: string;
      try {
        sha = await staging.fetchBranch(input.url, input.ref, runRef(input.runKey, 'oracle'));
      } catch (err) {
        const why = scrubSecrets(err instanceof Error ? err.message : String(err))
          .split('\n')[0]
          .slice(0, 300);
        throw permanent(
          'RemoteRefused',
          `cannot fetch the hidden tests (oracle.ref ${input.ref} of oracle.repo): ${why}`,
        );
      }
      const read = await oracleFiles(staging.dir, sha);
      if ('problem' in read) throw permanent('InvalidRequest', `oracle: ${read.problem}`);
      return { sha, count: read.files.length };
    },

    /**
     * Merges the workers in order onto `into`, in the staging repository (see mergeWorkers in
     * src/git/merge.ts); stops at the first conflict. A retry recomputes the same commits.
     */
    async mergeWorkers(input: {
      runKey: string;
      baseSha: string;
      into: string;
      workers: SubTaskHead[];
      at: number;
    }): Promise<MergeRun> {
      const staging = await deps.staging(input.runKey);
      const merged = await mergeWorkers(staging.dir, input);
      if (merged.sha !== input.into) await staging.share(input.runKey, merged.sha);
      return merged;
    },

    /**
     * Names an integration commit `refs/flotilla/<run>/<name>` for a redone worker or the push;
     * returns a diffstat against the base for the people who approve it. A tree with a file at a
     * hidden test path is never recorded.
     */
    async recordIntegrated(input: {
      runKey: string;
      baseSha: string;
      sha: string;
      name: string;
      oracleSha?: string;
    }): Promise<{
      sha: string;
      ref: string;
      diffstat: string;
    }> {
      const staging = await deps.staging(input.runKey);
      const oraclePaths = await oraclePathsOf(deps, input.runKey, input.oracleSha);
      if (oraclePaths.length) {
        const clash = (await listTree(staging.dir, input.sha)).filter((e) => clashesWithOracle(e.path, oraclePaths));
        if (clash.length)
          throw permanent(
            'OracleExposed',
            `refusing to record the integrated tree: ${clash.length} of its files are at hidden test paths`,
          );
      }
      const ref = runRef(input.runKey, input.name);
      await staging.setRef(ref, input.sha);
      return { sha: input.sha, ref, diffstat: await diffstat(staging.dir, input.baseSha, input.sha) };
    },

    /**
     * Runs the setup and test commands on `sha` in the test sandbox, with the hidden tests placed
     * read-only. Afterwards: a hidden test changed or gone fails the run; whatever the commands
     * committed or changed is reported and discarded (the host never takes anything from this
     * sandbox); the checkout is cleaned, hidden tests included.
     */
    async runTests(input: {
      sandbox: SandboxRef;
      runKey: string;
      baseSha: string;
      sha: string;
      setupCmd?: string;
      testCmd: string;
      timeoutMs: number;
      oracleSha?: string;
    }): Promise<TestRun> {
      const sb = await openSandbox(deps, input.sandbox);
      const dir = await stagingDir(deps, input.runKey);
      await checkout(deps, sb, input);
      let oracles: OracleFile[] = [];
      if (input.oracleSha) {
        const read = await oracleFiles(dir, input.oracleSha);
        if ('problem' in read) throw permanent('InvalidRequest', `oracle: ${read.problem}`);
        oracles = read.files;
      }
      const oraclePaths = oracles.map((f) => f.path);
      const redact = oracleRedactor(oracles);
      const notRun = {
        passed: false,
        what: 'the hidden tests',
        command: '',
        exitCode: -1,
        timedOut: false,
        tail: '',
        logRef: '',
      };
      if (oracles.length) {
        const clash = (await listTree(dir, input.sha)).filter((e) => clashesWithOracle(e.path, oraclePaths));
        if (clash.length)
          return {
            ...notRun,
            problem: `the integrated tree has ${clash.length} file(s) of its own at hidden test paths`,
          };
        await placeReadOnly(sb, oracles);
      }
      const steps: [string, string][] = [];
      if (input.setupCmd) steps.push(['the setup command', input.setupCmd]);
      steps.push(['the test command', input.testCmd]);
      let last: TestRun | undefined;
      for (const [what, command] of steps) {
        const run = await execTracked(deps, sb, command, {
          timeoutMs: input.timeoutMs,
          label: what === 'the setup command' ? 'setup' : 'tests',
          redact,
          run: runOfSandbox(input.sandbox),
        });
        const passed = run.exitCode === 0 && !run.timedOut;
        last = {
          passed,
          what,
          command,
          exitCode: run.exitCode,
          timedOut: run.timedOut,
          tail: run.tail,
          logRef: run.logRef,
        };
        if (!passed) break;
      }
      const altered = await alteredOracles(sb, oracles);
      const discarded = await testRunChanges(sb, input.sha, oraclePaths, redact);
      await script(
        sb,
        `git reset -q --hard ${sh(input.sha)} 2>/dev/null || true\ngit clean -ffdxq 2>/dev/null || true`,
        'cleaning up after the tests',
      );
      const problem = altered
        ? `the test run changed or removed ${altered} hidden test file(s); its result does not count`
        : undefined;
      return { ...last!, passed: last!.passed && !problem, discarded, problem };
    },

    /**
     * One resolver round on the host's conflicted merge of `headSha` into `intoSha`: the fixer
     * sandbox gets a checkout at `intoSha` whose working tree holds the merge with its conflict
     * markers. The round succeeds when the tree it leaves has no conflict marker or .rej file and
     * changes only files the merge touches; the host then commits the merge with that tree.
     */
    async resolveConflict(
      input: FixerInput & {
        workerId: string;
        headSha: string;
        intoSha: string;
        title: string;
        incoming: Intent;
        integrated: Intent[];
        previousFailure?: string;
      },
    ): Promise<FixerRound> {
      const sb = await openSandbox(deps, input.sandbox);
      const staging = await deps.staging(input.runKey);
      const dir = staging.dir;
      const message = mergeMessage(
        input.title,
        input.workerId,
        input.runKey,
        `\nFlotilla-Resolved-By: resolver round ${input.round}`,
      );
      const merged = await mergeTrees(dir, input.intoSha, input.headSha);
      if (merged.clean) {
        const sha = await commitTree(dir, {
          tree: merged.tree,
          parents: [input.intoSha, input.headSha],
          message,
          at: input.at,
        });
        await staging.share(input.runKey, sha);
        return { ok: true, sha, costUsd: 0 };
      }
      const conflicted = await commitTree(dir, {
        tree: merged.tree,
        parents: [input.intoSha],
        message: 'conflicted merge (never pushed)',
        at: input.at,
      });
      await checkout(deps, sb, {
        sandbox: input.sandbox,
        runKey: input.runKey,
        baseSha: input.baseSha,
        sha: conflicted,
        indexAt: input.intoSha,
      });
      const touched = new Set(
        await changedPaths(dir, await mergeBase(dir, input.intoSha, input.headSha), input.headSha),
      );
      const entries = new Map((await listTree(dir, merged.tree)).map((e) => [e.path, e.oid]));
      const hunks: string[] = [];
      for (const file of merged.files) {
        const oid = entries.get(file);
        hunks.push(
          oid ? conflictHunks(file, (await readBlob(dir, oid)).toString('utf8')) : `--- ${file}\n(deleted on one side)`,
        );
      }
      const prompt = resolverPrompt({
        objective: input.objective,
        incoming: input.incoming,
        integrated: input.integrated,
        files: merged.files,
        round: input.round,
        maxRounds: input.maxRounds,
        previousFailure: input.previousFailure,
        verifyCmd: input.verifyCmd,
        hunks: hunks.join('\n'),
        nonce: randomBytes(8).toString('hex'),
      });
      const run = await runFixer(deps, sb, input, 'resolver', prompt);
      if (run.failure) return rejected(run.failure, input.intoSha, run);
      const back = await bringBack(deps, sb, { runKey: input.runKey, from: input.intoSha });
      if ('problem' in back) return rejected(back.problem, input.intoSha, run);
      const oraclePaths = await oraclePathsOf(deps, input.runKey, input.oracleSha);
      const { problems } = await editProblems(dir, {
        from: input.intoSha,
        tree: back.tree,
        allowed: (p) => touched.has(p),
        oraclePaths,
      });
      if (problems.length) return rejected(problems.join('; '), input.intoSha, run);
      const sha = await commitTree(dir, {
        tree: back.tree,
        parents: [input.intoSha, input.headSha],
        message,
        at: input.at,
      });
      await staging.share(input.runKey, sha);
      return {
        ok: true,
        sha,
        diffstat: await diffstat(dir, input.intoSha, sha, merged.files),
        costUsd: run.costUsd,
        logRef: run.logRef,
      };
    },

    /**
     * One repair round on `fromSha`, whose tests failed. The agent sees output of a run without
     * the hidden tests: the gate's own output when there are none, else a run of the visible
     * tests in the fixer sandbox (and, when those pass, only that hidden tests fail). Its working
     * tree becomes one host commit on `fromSha`, unless it changes a path outside `allowedPaths`
     * or a hidden test path, leaves conflict markers or .rej files, or changes nothing.
     */
    async repairTests(
      input: FixerInput & {
        fromSha: string;
        tasks: Intent[];
        /** The command that failed on the gate and its exit code. */
        failedCmd: string;
        exitCode: number;
        /** The gate's output, when no hidden tests took part in it. */
        logRef?: string;
        /** Per command, for the visible run. */
        commandTimeoutMs: number;
        /** Normalized: the sub-tasks' ownedPaths and sharedPaths. */
        allowedPaths: string[];
      },
    ): Promise<FixerRound> {
      const sb = await openSandbox(deps, input.sandbox);
      const staging = await deps.staging(input.runKey);
      const dir = staging.dir;
      await checkout(deps, sb, {
        sandbox: input.sandbox,
        runKey: input.runKey,
        baseSha: input.baseSha,
        sha: input.fromSha,
      });
      let output: string;
      let exitCode = input.exitCode;
      let hiddenOnly = false;
      if (input.logRef) output = (await deps.artifacts.get(input.logRef)).toString('utf8');
      else {
        const visible = await execTracked(deps, sb, input.verifyCmd, {
          timeoutMs: input.commandTimeoutMs,
          label: 'visible tests',
          run: runOfSandbox(input.sandbox),
        });
        output = (await deps.artifacts.get(visible.logRef)).toString('utf8');
        exitCode = visible.exitCode;
        hiddenOnly = visible.exitCode === 0 && !visible.timedOut;
        await script(sb, `git reset -q --hard ${sh(input.fromSha)}`, 'resetting after the visible tests');
      }
      const prompt = repairPrompt({
        objective: input.objective,
        tasks: input.tasks,
        failedCmd: input.logRef ? input.failedCmd : input.verifyCmd,
        verifyCmd: input.verifyCmd,
        exitCode,
        round: input.round,
        maxRounds: input.maxRounds,
        allowedPaths: input.allowedPaths,
        hidden: !input.logRef,
        hiddenOnly,
        output,
        nonce: randomBytes(8).toString('hex'),
      });
      const run = await runFixer(deps, sb, input, 'repair', prompt);
      if (run.failure) return rejected(run.failure, input.fromSha, run);
      const back = await bringBack(deps, sb, { runKey: input.runKey, from: input.fromSha });
      if ('problem' in back) return rejected(back.problem, input.fromSha, run);
      const oraclePaths = await oraclePathsOf(deps, input.runKey, input.oracleSha);
      const { changed, problems } = await editProblems(dir, {
        from: input.fromSha,
        tree: back.tree,
        allowed: (p) => input.allowedPaths.some((a) => pathIsUnder(p, a)),
        oraclePaths,
      });
      if (problems.length) return rejected(problems.join('; '), input.fromSha, run);
      if (changed.length === 0) return rejected('the repair agent changed nothing', input.fromSha, run);
      const message = `Repair round ${input.round}: make the tests pass\n\nFlotilla-Repair-Round: ${input.round}\nFlotilla-Run: ${input.runKey}`;
      const sha = await commitTree(dir, { tree: back.tree, parents: [input.fromSha], message, at: input.at });
      await staging.share(input.runKey, sha);
      return {
        ok: true,
        sha,
        diffstat: await diffstat(dir, input.fromSha, sha),
        costUsd: run.costUsd,
        logRef: run.logRef,
      };
    },

    /**
     * Moves a freshly seeded worker workspace onto `seed`, so a redone sub-task starts from the
     * integrated tree. A workspace already there (or past it) is left alone.
     */
    async checkoutSeed(input: { sandbox: SandboxRef; baseSha: string; seed: SubTaskSeed }): Promise<void> {
      const sb = await openSandbox(deps, input.sandbox);
      const there = await sb.exec(`git merge-base --is-ancestor ${sh(input.seed.sha)} HEAD`, { timeoutMs: 60_000 });
      if (there.exitCode === 0) return;
      const staging = await deps.staging(runKeyOfRef(input.seed.ref));
      const bundle = `${sb.scratch}/seed.bundle`;
      await staging.withBundleFile(async (file) => {
        await staging.createBundle(file, input.seed.ref, input.baseSha);
        await sb.copyIn(file, bundle);
      });
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
