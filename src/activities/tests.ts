/**
 * The test gate: the setup and test commands on an integrated commit in the test sandbox, the
 * only place the hidden tests are ever written. Nothing is taken back from it: what the commands
 * commit or change is reported and discarded (src/git/edits.ts).
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { type TestCounts, parseTestOutput } from '../contracts/test-summary';
import { discardTestRun, testRunChanges, testRunChangesLine } from '../git/edits';
import { checkoutOnHost, traceTestRun } from '../git/host-checkout';
import {
  alteredOracles,
  filesAtOraclePaths,
  oracleRedactor,
  placeOracles,
  readOracles,
  withheldOutput,
} from '../git/oracle';
import { SANDBOX_OBJECTS, mountedObjects } from '../git/run-mirror';
import { baseObjects, checkoutCommit } from '../git/seeding';
import type { StagingRepo } from '../git/staging';
import { type Workspace, sh } from '../git/workspace';
import type { Sandbox } from '../sandbox/types';
import { type ActivityDeps, type SandboxRef, openWorkspace, runOfSandbox } from './deps';
import { execTracked } from './exec';
import { sandboxUse } from './integration-sandboxes';

/** One run of the setup and test commands on a commit, with the hidden tests in place. */
export interface TestRun {
  passed: boolean;
  /** "the setup command" or "the test command": the first that failed, or the test command. */
  what: string;
  command: string;
  exitCode: number;
  timedOut: boolean;
  /** Redacted of hidden test names and text; with hidden tests, only the counts (see withheldOutput). */
  tail: string;
  logRef: string;
  /** What the run committed or changed in its checkout, all of it discarded. */
  discarded?: string;
  /** Why the run does not count: the hidden tests could not be placed or were altered. */
  problem?: string;
  /** The test command's counts (and names, without hidden tests), read from its whole output. */
  counts?: TestCounts;
  /** The measure command's run, after the test command, when asked for one. */
  measure?: { exitCode: number; timedOut: boolean; tail: string; logRef: string };
}

interface TestInput {
  sandbox: SandboxRef;
  runKey: string;
  baseSha: string;
  sha: string;
  setupCmd?: string;
  testCmd: string;
  timeoutMs: number;
  oracleSha?: string;
  /** Which run of the tests on this commit this is (1 first; a flaky retry counts up): FLOTILLA_TEST_ATTEMPT. */
  attempt?: number;
  /** The observe-only measure command, run after the test command whether it passed or not. */
  measureCmd?: string;
}

/** The report of a run that never started: the hidden tests could not be placed. */
const NOT_RUN = {
  passed: false,
  what: 'the hidden tests',
  command: '',
  exitCode: -1,
  timedOut: false,
  tail: '',
  logRef: '',
};

/** Runs the setup command, when there is one, then the test command, stopping at the first that fails. */
async function runCommands(
  deps: ActivityDeps,
  sb: Sandbox,
  input: TestInput,
  redact: (text: string) => string,
  hidden: boolean,
): Promise<TestRun> {
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
      withhold: hidden,
      env: { FLOTILLA_TEST_ATTEMPT: String(input.attempt ?? 1) },
    });
    const passed = run.exitCode === 0 && !run.timedOut;
    const tail = hidden ? withheldOutput(run.tail) : run.tail;
    last = { passed, what, command, exitCode: run.exitCode, timedOut: run.timedOut, tail, logRef: run.logRef };
    if (!passed) break;
  }
  if (last!.what !== 'the test command') return last!;
  const counts = await countsOf(deps, last!, hidden);
  return counts ? { ...last!, counts } : last!;
}

/**
 * The test command's counts, from its whole log; with hidden tests the counts only (as much as
 * their withheld output says), never the names.
 */
async function countsOf(deps: ActivityDeps, run: TestRun, hidden: boolean): Promise<TestCounts | undefined> {
  const counts = parseTestOutput((await deps.artifacts.get(run.logRef)).toString('utf8'));
  if (!counts || !hidden) return counts;
  const { names: _names, ...tally } = counts;
  return tally;
}

/** The measure command, observe-only: its output (redacted like the tests') is compared, never its exit code alone. */
async function runMeasure(
  deps: ActivityDeps,
  sb: Sandbox,
  input: TestInput,
  redact: (text: string) => string,
  hidden: boolean,
): Promise<TestRun['measure']> {
  if (!input.measureCmd) return undefined;
  const run = await execTracked(deps, sb, input.measureCmd, {
    timeoutMs: input.timeoutMs,
    label: 'measure',
    redact,
    run: runOfSandbox(input.sandbox),
    withhold: hidden,
  });
  return { exitCode: run.exitCode, timedOut: run.timedOut, tail: run.tail, logRef: run.logRef };
}

/** Where the base's test run is kept, by everything that decides it: the commit, the commands, the hidden tests. */
function baseCacheFile(deps: ActivityDeps, input: TestInput): string {
  const { baseSha, setupCmd, testCmd, oracleSha, measureCmd } = input;
  const key = createHash('sha256')
    .update(JSON.stringify([baseSha, setupCmd ?? null, testCmd, oracleSha ?? null, measureCmd ?? null]))
    .digest('hex');
  return path.join(deps.dataDir, 'base-tests', `${key}.json`);
}

async function readCached(file: string): Promise<TestRun | undefined> {
  try {
    const run = JSON.parse(await readFile(file, 'utf8')) as TestRun;
    return typeof run.exitCode === 'number' && typeof run.logRef === 'string' ? run : undefined;
  } catch {
    return undefined; // none yet, or a torn write: test the base again
  }
}

/**
 * The test sandbox's checkout of `input.sha`: a local sandbox's made by the host alone
 * (host-checkout.ts: only what differs from what it holds is written), a cloud sandbox's by git in
 * it, whole. A flaky test run's retry (attempt 2 on) also finds the scratch directory, its $HOME
 * in a local sandbox, emptied: nothing an earlier run left there takes part.
 */
async function checkoutForTests(
  deps: ActivityDeps,
  ws: Workspace,
  staging: StagingRepo,
  input: TestInput,
): Promise<void> {
  const at = { sandboxKey: input.sandbox.key, runKey: input.runKey, baseSha: input.baseSha, sha: input.sha };
  if ((input.attempt ?? 1) > 1) await emptyScratch(ws.sb);
  const host = ws.sb.host;
  if (!host) return checkoutCommit(ws, staging, deps.dataDir, at);
  // The run mirror (the base's history), acquired for this sandbox: what its alternates name.
  await baseObjects(ws.sb, staging, deps.dataDir, at);
  const alternates =
    ws.sb.isolation === 'bubblewrap' ? SANDBOX_OBJECTS : mountedObjects(deps.dataDir, input.sandbox.key)!;
  await checkoutOnHost(host, staging.dir, { sha: input.sha, baseSha: input.baseSha, alternates });
}

async function emptyScratch(sb: Sandbox): Promise<void> {
  const dir = sh(sb.scratch);
  const r = await sb.exec(`chmod -R u+rwX -- ${dir} 2>/dev/null; find ${dir} -mindepth 1 -delete`, {
    timeoutMs: 60_000,
  });
  if (r.exitCode !== 0)
    throw new Error(`emptying the test sandbox's scratch directory failed: ${r.output.slice(-500)}`);
}

/**
 * Runs the setup and test commands on `sha` in the test sandbox, with the hidden tests placed
 * read-only. Afterwards: a hidden test changed or gone fails the run; whatever the commands
 * committed or changed is reported, and discarded by the next checkout (with hidden tests, every
 * untracked and ignored file goes at once): the host never takes anything from this sandbox.
 */
async function runTests(deps: ActivityDeps, input: TestInput): Promise<TestRun> {
  const ws = await openWorkspace(deps, input.sandbox);
  const staging = await deps.staging(input.runKey);
  await checkoutForTests(deps, ws, staging, input);
  const oracles = await readOracles(staging.dir, input.oracleSha);
  const oraclePaths = oracles.map((f) => f.path);
  const redact = oracleRedactor(oracles);
  if (oracles.length) {
    const clash = await filesAtOraclePaths(staging.dir, input.sha, oraclePaths);
    if (clash)
      return { ...NOT_RUN, problem: `the integrated tree has ${clash} file(s) of its own at hidden test paths` };
    await placeOracles(ws.sb, oracles);
  }
  const last = await runCommands(deps, ws.sb, input, redact, oracles.length > 0);
  const measure = await runMeasure(deps, ws.sb, input, redact, oracles.length > 0);
  const altered = await alteredOracles(ws.sb, oracles);
  const trace = ws.sb.host ? await traceTestRun(ws.sb.host, staging.dir) : await testRunChanges(ws);
  const discarded = testRunChangesLine(trace, input.sha, oraclePaths, redact);
  await discardTestRun(ws, input.sha, staging.dir, oracles.length > 0);
  const problem = altered
    ? `the test run changed or removed ${altered} hidden test file(s); its result does not count`
    : undefined;
  const run = { ...last, passed: last.passed && !problem, discarded, problem };
  return measure ? { ...run, measure } : run;
}

export function testActivities(deps: ActivityDeps) {
  const activities = {
    /** The setup and test commands on `sha` in the test sandbox (see runTests above). */
    async runTests(input: TestInput): Promise<TestRun> {
      return sandboxUse(deps).during(input.sandbox.key, () => runTests(deps, input));
    },

    /**
     * The tests (and the measure command) on the base, for comparing the integrated tree's with:
     * run once per base commit, commands and hidden tests on this host, and kept in the data
     * directory, so a later run on the same base reuses it (`cached`). Its `sha` must be the base.
     */
    async testBase(input: TestInput): Promise<TestRun & { cached: boolean }> {
      const file = baseCacheFile(deps, input);
      const cached = await readCached(file);
      if (cached) return { ...cached, cached: true };
      const run = await activities.runTests({ ...input, sha: input.baseSha, attempt: 1 });
      // A run that could not count says nothing about the base: the next run tries again.
      if (!run.problem) {
        await mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
        // Runs of the same base on this host may write it at once (while their agents run): each its own file.
        const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
        await writeFile(tmp, JSON.stringify(run), { mode: 0o600 });
        await rename(tmp, file);
      }
      return { ...run, cached: false };
    },
  };
  return activities;
}
