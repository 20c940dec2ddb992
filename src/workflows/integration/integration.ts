/**
 * Integration: on the host, merge sub-tasks' commits onto the integration head (3-way, in the
 * staging repository), then run the setup and test commands on the result in a test sandbox. The
 * commit pushed is the one the host merged and tested; nothing a sandbox commits leaves it.
 *
 * A living plan (leader/plan-run.ts) merges each sub-task as it ends (`mergeEach`), testing each
 * merge when asked to; runs started before it (leader/fixed-plan.ts) merge all of them in plan
 * order once the last has ended (`integrate`, `mergeAll`), and redo a conflicting one here.
 *
 * With a resolver, a conflicting merge gets resolver rounds and then, if they fail, one redo of
 * its sub-task by a fresh sub-task workflow starting from the integrated tree. With a repair
 * agent, failing tests get repair rounds, each followed by the tests again. Hidden tests take
 * part in every test run and in nothing else: fixers work in a sandbox of their own that never
 * holds them. Every attempt shows in the status and the result as it happens; history carries
 * only SHAs, refs and short (redacted) tails. The sandboxes are destroyed however it ends.
 */
import {
  CancellationScope,
  ParentClosePolicy,
  isCancellation,
  patched,
  proxyActivities,
  startChild,
  workflowInfo,
} from '@temporalio/workflow';
import type { Activities, SandboxRef } from '../../activities';
import type { FixerRound, TestRun } from '../../activities/integration';
import type { RunStatus } from '../../contracts/messages';
import { redoNote } from '../../contracts/prompts';
import type {
  ConflictReport,
  IntegrationAttempt,
  IntegrationHead,
  IntegrationReport,
  RunResult,
  SubTaskReport,
} from '../../contracts/reports';
import type { FixerSpec, PlannedRequest, SubTask } from '../../contracts/request';
import { firstLine, lastLines } from '../../contracts/text';
import { summarizeTests } from '../../contracts/test-summary';
import type { FlakyRun } from '../../contracts/evidence';
import { PATCHES } from '../patches';
import { msOfMinutes, msOfSeconds } from '../durations';
import { SandboxHome } from '../host-affinity';
import { activityOptions, commandOptions } from '../options';
import { type SubTaskInput, subTaskWorkflowId } from '../subtask/subtask';
import { type EndAttempt, type Failure, conflictLine, how, repairablePaths, track } from './attempts';
import { type BaseRun, weigh } from './evidence';
import { keeperWorkflowId, sandboxKeeperWorkflow } from './keeper';

export interface IntegrationInput {
  req: PlannedRequest;
  runKey: string;
  baseSha: string;
  /** Where the integration head starts when not at the base: what a continued run already integrated. */
  startSha?: string;
  /** A run that rolled over: the integration's report and its fixers' spend so far. */
  resumed?: { report: IntegrationReport; spent: Record<Fixer, number> };
  /** The hidden tests' commit in the staging repository (fetchOracle), when there are any. */
  oracleSha?: string;
  /** Updated as integration proceeds (phase, attempts). */
  status: RunStatus;
  /** Filled with the conflict, the test outcome and the attempts. */
  result: RunResult;
  commandTimeoutMs: number;
  heartbeatTimeoutMs: number;
  /**
   * For `integrate` (the fixed plan): what the fan-out gives the sub-task workflow of `task`, and
   * running one as the fan-out does; a conflicting sub-task is redone with them. A living plan
   * redoes it as its next attempt instead.
   */
  subTaskInput?: (task: SubTask) => SubTaskInput;
  runSubTask?: (input: SubTaskInput) => Promise<SubTaskReport>;
}

export type IntegrationOutcome = { ok: true; sha: string; diffstat: string; testSummary: string } | Failure;

export async function integrate(input: IntegrationInput): Promise<IntegrationOutcome> {
  const integration = new Integration(input);
  input.status.phase = 'integrating';
  try {
    const conflict = await integration.mergeAll();
    if (conflict) return conflict;
    const tests = await integration.testAndRepair();
    if ('ok' in tests) return tests;
    return await integration.record(tests);
  } finally {
    await integration.destroySandboxes();
    if (integration.keepsSandboxes) await integration.sandboxesGone();
  }
}

/** Lines of failing output each repair round keeps in the report. */
const FAILED_TAIL_LINES = 15;

export type Fixer = 'resolver' | 'repair';
type SandboxOps = ReturnType<Integration['sandboxOps']>;
/** A fixer round that did not start: its rounds or its budget are spent. */
type NoRound = { stop: 'rounds' | 'budget' };
/** The keeper of the sandboxes on one host (keeper.ts), and what the integration knows of it. */
interface Keeper {
  host: string;
  /** Cancelling it releases the sandboxes: the keeper destroys them. */
  scope: CancellationScope;
  /** Settles once the keeper has ended (its sandboxes destroyed, or its host given up). */
  gone: Promise<void>;
  released: boolean;
  /** Its host was lost and left: its end is not waited for. */
  left: boolean;
}

/** One integration's state: the integration head, its sandboxes and their host, the fixers' spend. */
export class Integration {
  private req: PlannedRequest;
  private readonly agentTimeoutMs: number;
  /** The test and fixer sandboxes live on one host, claimed when the first is needed. */
  private readonly home: SandboxHome;
  private tasks: Map<string, SubTask>;
  /** The only sandbox the hidden tests are ever written to. */
  private readonly testSandbox: SandboxRef;
  /** Where resolver and repair agents work: it never holds the hidden tests. */
  private readonly fixerSandbox: SandboxRef;
  /** Sandboxes provisioned on the current host; every activity then makes its own fresh checkout in one. */
  private readonly ready = new Set<string>();
  /** The date of every commit the integration makes: a retried activity makes the same ones. */
  private readonly at: number;
  private readonly report: IntegrationReport;
  /** Dollars each fixer has spent over the whole integration (a rolled-over run's included). */
  private readonly spent: Record<Fixer, number>;
  /** The integration head, as the last merge, resolution or repair left it: a host commit. */
  private head: string;
  /** The last test run started, while one is in flight (settles, never rejects): the next waits for it. */
  private testing?: Promise<void>;
  /** Whether this run weighs its tests (PATCHES.testEvidence), asked once, at the first test run. */
  private evidenceOn?: boolean;
  /** Test runs that failed before a run of the same tests, in a fresh sandbox, passed. */
  private readonly flaky: FlakyRun[] = [];
  /**
   * Whether keepers own the sandboxes (PATCHES.keptSandboxes), which are then made ready while
   * the agents run and reset rather than replaced between test runs; asked once, as it starts.
   */
  private readonly keeping: boolean;
  private readonly keepers: Keeper[] = [];
  /** The sandboxes being made ready while the agents run (prepareSandboxes): every sandbox step waits for it. */
  private warming?: Promise<void>;
  /** The tests on the base, run while the agents ran. */
  private base?: BaseRun;

  constructor(private readonly input: IntegrationInput) {
    const { req, runKey, heartbeatTimeoutMs } = input;
    this.req = req;
    this.agentTimeoutMs = msOfMinutes(req.limits.agentTimeoutMinutes);
    this.home = SandboxHome.open('integration', {
      hostTimeoutMs: msOfSeconds(req.limits.hostTimeoutSeconds),
      heartbeatTimeoutMs,
    });
    this.tasks = new Map(req.subTasks.map((t) => [t.id, t]));
    this.testSandbox = { key: `${runKey}/integration`, ...req.sandbox };
    this.fixerSandbox = { key: `${runKey}/integration-fixer`, ...req.sandbox };
    this.at = Math.floor(Date.now() / 1000);
    this.head = input.startSha ?? input.baseSha;
    this.report = input.resumed?.report ?? { attempts: [], costUsd: 0 };
    this.spent = { resolver: 0, repair: 0, ...input.resumed?.spent };
    input.status.integration = input.result.integration = this.report;
    this.keeping = this.home.affinity && patched(PATCHES.keptSandboxes.id);
  }

  /** What each fixer has spent so far: a run that rolls over carries it. */
  get fixersSpent(): Record<Fixer, number> {
    return { ...this.spent };
  }

  /** Whether keepers own its sandboxes: destroySandboxes then only releases them (see sandboxesGone). */
  get keepsSandboxes(): boolean {
    return this.keeping;
  }

  /** The integration head: the commit the last merge, resolution or repair left. */
  get headSha(): string {
    return this.head;
  }

  /** A review round whose result was not pushed: the next one starts from what the branch holds. */
  rewind(sha: string): void {
    this.head = sha;
  }

  /** The plan changed (an amendment, a replan): what fixers are told and may change follows it. */
  planChanged(req: PlannedRequest): void {
    this.req = req;
    this.tasks = new Map(req.subTasks.map((t) => [t.id, t]));
  }

  // ---- Activities ----

  /** Store-only activities (merges, records): any host, on the shared queue. */
  private storeOps() {
    return proxyActivities<Activities>(activityOptions(this.input.heartbeatTimeoutMs));
  }

  /** The sandboxes' activities, on their host's queue as it is at the call. */
  sandboxOps() {
    const { home, agentTimeoutMs } = this;
    const { commandTimeoutMs, heartbeatTimeoutMs } = this.input;
    const commands = this.req.measure ? 3 : 2;
    const { provisionSandbox, destroySandbox, warmSandbox } = home.on(activityOptions(heartbeatTimeoutMs));
    return {
      provisionSandbox,
      destroySandbox,
      warmSandbox,
      // Setup, tests and (when asked for) the measure command run one after the other within one activity.
      runTests: home.on(commandOptions(commands * commandTimeoutMs, heartbeatTimeoutMs)).runTests,
      testBase: home.on(commandOptions(commands * commandTimeoutMs, heartbeatTimeoutMs)).testBase,
      resolveConflict: home.on(commandOptions(agentTimeoutMs, heartbeatTimeoutMs)).resolveConflict,
      // A repair round may first run the visible tests to show the agent their output.
      repairTests: home.on(commandOptions(agentTimeoutMs + commandTimeoutMs, heartbeatTimeoutMs)).repairTests,
    };
  }

  /**
   * While the agents run: claims the integration's host, provisions the test sandbox there (its
   * keeper first) and has its files set to the head, then tests the base in it, so that after the
   * merges the first test run writes only what they changed and the base's result is ready. Every
   * later step in the integration's sandboxes waits for this. A failure here is forgotten: the
   * steps that need the sandbox make it, and test the base, as they always did.
   */
  prepareSandboxes(): void {
    if (!this.keeping) return;
    // Settles, never rejects: a cancellation reaches the next step on its own.
    this.warming = this.warm().catch(() => undefined);
  }

  private async warm(): Promise<void> {
    const { runKey, baseSha } = this.input;
    const sandbox = this.testSandbox;
    await this.prepare(sandbox);
    await this.sandboxOps().warmSandbox.executeWithOptions({ summary: 'make the test sandbox ready' }, [
      { sandbox, runKey, baseSha, sha: this.head },
    ]);
    if (this.weighs() && !this.base) this.base = await this.baseTests(this.sandboxOps());
  }

  /**
   * Claims the host when no sandbox has one yet, and provisions `sandbox` there when it is not
   * yet; waits for the sandboxes being made ready first (warm() itself runs before `warming` is
   * set, or when the last warming has settled, so it never waits for itself).
   */
  private async prepare(sandbox: SandboxRef): Promise<void> {
    if (this.warming) await this.warming;
    if (!this.home.bound) await this.home.claim();
    if (this.ready.has(sandbox.key)) return;
    if (this.keeping) await this.keep();
    await this.sandboxOps().provisionSandbox(sandbox);
    this.ready.add(sandbox.key);
  }

  /**
   * Has a keeper (keeper.ts) hold the sandboxes on the current host before one is made there,
   * unless one holds them already. A keeper of a host the sandboxes moved from (it was lost) is
   * released and left to end when it can; one released earlier on this host must have destroyed
   * them before they are made again.
   */
  private async keep(): Promise<void> {
    const { host, taskQueue } = this.home.placement!;
    for (const k of this.keepers.filter((k) => !k.released && k.host !== host)) this.release(k, true);
    if (this.keepers.some((k) => !k.released && k.host === host)) return;
    await Promise.all(this.keepers.filter((k) => k.host === host).map((k) => k.gone));
    // Cancelled only by release(): neither the step that first needs a sandbox nor the run's own cancellation ends it.
    const scope = new CancellationScope({ cancellable: true, parent: new CancellationScope({ cancellable: false }) });
    const { req, heartbeatTimeoutMs } = this.input;
    const child = await scope.run(() =>
      startChild(sandboxKeeperWorkflow, {
        workflowId: keeperWorkflowId(workflowInfo().workflowId, this.keepers.length + 1),
        args: [
          {
            sandboxes: [this.testSandbox, this.fixerSandbox],
            placement: { host, taskQueue },
            runKey: this.input.runKey,
            hostTimeoutMs: msOfSeconds(req.limits.hostTimeoutSeconds),
            heartbeatTimeoutMs,
          },
        ],
        // Temporal cancels it when the leader closes without releasing it: its sandboxes go then too.
        parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
        staticSummary: `keeps the integration's sandboxes on ${host}`,
      }),
    );
    const gone = child.result().then(
      () => undefined,
      () => undefined,
    );
    this.keepers.push({ host, scope, gone, released: false, left: false });
  }

  private release(keeper: Keeper, left = false): void {
    keeper.released = true;
    keeper.left = left;
    keeper.scope.cancel();
  }

  /**
   * Runs a step in `sandbox`, provisioned first. When its host is lost, both sandboxes move to
   * another host and the step runs again there: each step checks out its own commit.
   */
  private inSandbox<T>(sandbox: SandboxRef, step: (ops: SandboxOps) => Promise<T>): Promise<T> {
    const once = async () => {
      await this.prepare(sandbox);
      return step(this.sandboxOps());
    };
    return this.home.run(once, async () => {
      this.ready.clear();
      await this.prepare(sandbox);
    });
  }

  // ---- Merging ----

  /** Merges every sub-task's commits onto the head in plan order; a conflict gets the resolver, then a redo. */
  async mergeAll(): Promise<Failure | undefined> {
    const { runKey, baseSha, result } = this.input;
    let pending = result.workers.filter((w) => w.ref && w.headSha);
    while (pending.length) {
      const merged = await this.storeOps().mergeWorkers.executeWithOptions(
        { summary: `merge ${pending.map((w) => w.workerId).join(', ')}` },
        [
          {
            runKey,
            baseSha,
            into: this.head,
            workers: pending.map((w) => ({
              workerId: w.workerId,
              headSha: w.headSha!,
              title: this.titleOf(this.tasks.get(w.workerId)!),
            })),
            at: this.at,
          },
        ],
      );
      this.head = merged.sha;
      if (merged.status === 'merged') return undefined;
      const index = pending.findIndex((w) => w.workerId === merged.workerId);
      const task = this.tasks.get(merged.workerId)!;
      const conflict = { workerId: merged.workerId, conflictsWith: merged.conflictsWith, files: merged.files };
      const failure = await this.overcomeConflict(conflict, task, pending[index].headSha!);
      if (failure) return failure;
      pending = pending.slice(index + 1);
    }
    return undefined;
  }

  private titleOf(task: SubTask): string {
    return `Integrate ${task.id}: ${firstLine(task.prompt)}`;
  }

  /**
   * Merges finished sub-tasks' commits onto the head in the order given, in one activity (a living
   * plan, as they end), stopping at the first conflict, which gets the resolver's rounds. Returns
   * how many of them are on the head, and for the one after those the conflict and what was tried
   * when the resolver did not fix it (its next attempt is then its redo). `attempt` names a
   * retried sub-task's attempt in the merge's title.
   */
  async mergeEach(
    finished: { task: SubTask; headSha: string; attempt: number }[],
    nameHead: boolean,
  ): Promise<{
    merged: number;
    conflicted?: { conflict: ConflictReport; reason: string };
    /** The integration head, when the merge named it (`nameHead` and no conflict). */
    head?: IntegrationHead;
  }> {
    const { runKey, baseSha } = this.input;
    const workers = finished.map(({ task, headSha, attempt }) => ({
      workerId: task.id,
      headSha,
      title: attempt > 1 ? `${this.titleOf(task)} (attempt ${attempt})` : this.titleOf(task),
    }));
    const summary = `merge ${finished.map((f) => f.task.id).join(', ')}`;
    const name = nameHead ? 'integration' : undefined;
    const merged = await this.storeOps().mergeWorkers.executeWithOptions({ summary }, [
      { runKey, baseSha, into: this.head, workers, at: this.at, name },
    ]);
    this.head = merged.sha;
    if (merged.status === 'merged') {
      const head = merged.ref ? { ref: merged.ref, sha: merged.sha } : undefined;
      return { merged: finished.length, head };
    }
    const at = finished.findIndex((f) => f.task.id === merged.workerId);
    const { task, headSha } = finished[at];
    const conflict = { workerId: task.id, conflictsWith: merged.conflictsWith, files: merged.files };
    const what = conflictLine(conflict);
    if (!this.req.resolver) return { merged: at, conflicted: { conflict, reason: what } };
    const tried = await this.resolve(this.req.resolver, conflict, task, headSha);
    if (!tried) return { merged: at + 1 };
    const reason = tried.length ? `${what}; tried ${tried.join(', then ')}` : what;
    return { merged: at, conflicted: { conflict, reason } };
  }

  /**
   * The tests on the head just merged (limits.testEachMerge): undefined when they pass; else the
   * head goes back to `before` (the merge is not kept) and the reason, with the output's last
   * lines unless hidden tests took part.
   */
  async testMerge(id: string, before: string): Promise<{ reason: string; output?: string } | undefined> {
    const tests = await this.runGate(0, `tests after merging ${id}: ${this.req.testCmd}`);
    if (!('ok' in tests) && tests.passed) return undefined;
    this.head = before;
    if ('ok' in tests) return { reason: tests.message };
    const output = this.input.oracleSha ? undefined : lastLines(tests.tail, FAILED_TAIL_LINES);
    return { reason: `the tests failed after its merge: ${tests.what} ${how(tests)}`, output };
  }

  /**
   * Names the head `refs/flotilla/<run key>/integration`, in the shared store too, for anyone to
   * fetch mid-run. Not checked against the hidden test paths: that is the test gate's, which
   * every tree to be pushed passes (and which says so the same way at every merge and at the end).
   */
  async recordHead(): Promise<IntegrationHead> {
    const { runKey, baseSha } = this.input;
    const recorded = await this.storeOps().recordIntegrated({ runKey, baseSha, sha: this.head, name: 'integration' });
    return { ref: recorded.ref, sha: recorded.sha };
  }

  /** Resolver rounds, then one redo of the sub-task on the integrated tree; the run's end when neither works. */
  private async overcomeConflict(
    conflict: ConflictReport,
    task: SubTask,
    headSha: string,
  ): Promise<Failure | undefined> {
    const what = conflictLine(conflict);
    const resolver = this.req.resolver;
    if (!resolver) {
      this.input.result.conflict = conflict;
      return { ok: false, outcome: 'conflict', message: what };
    }
    const tried = await this.resolve(resolver, conflict, task, headSha);
    if (!tried) return undefined;
    const reason = await this.redo(conflict, task);
    if (!reason) return undefined;
    tried.push(`redoing ${task.id} on the integrated tree (${reason})`);
    this.input.result.conflict = conflict;
    return { ok: false, outcome: 'conflict', message: `${what}; tried ${tried.join(', then ')}` };
  }

  /** Resolver rounds on a conflicting merge: undefined once one resolves it, or what was tried. */
  private async resolve(
    resolver: FixerSpec,
    conflict: ConflictReport,
    task: SubTask,
    headSha: string,
  ): Promise<string[] | undefined> {
    const tried: string[] = [];
    const rounds = { done: 0 };
    let previousFailure: string | undefined;
    for (;;) {
      const fixed = await this.resolverRound(resolver, rounds, { conflict, task, headSha, previousFailure });
      if ('stop' in fixed) {
        if (fixed.stop === 'budget')
          tried.push(`no further resolver round: its budget of $${resolver.budgetUsd!.toFixed(2)} is spent`);
        break;
      }
      const { round: resolved, end } = fixed;
      end(resolved.ok ? 'succeeded' : 'failed', {
        reason: resolved.reason,
        diffstat: resolved.diffstat,
        costUsd: resolved.costUsd,
        logRef: resolved.logRef,
      });
      if (resolved.ok) {
        this.head = resolved.sha;
        return undefined;
      }
      previousFailure = resolved.reason;
    }
    if (rounds.done > 0) tried.unshift(`${rounds.done} resolver round(s) (last: ${previousFailure})`);
    return tried;
  }

  private resolverRound(
    resolver: FixerSpec,
    rounds: { done: number },
    merge: { conflict: ConflictReport; task: SubTask; headSha: string; previousFailure?: string },
  ) {
    const { conflict, task, headSha, previousFailure } = merge;
    const attempt = (round: number) => ({
      kind: 'resolve' as const,
      workerId: conflict.workerId,
      round,
      files: conflict.files,
    });
    return this.fixRound('resolver', resolver, rounds, attempt, (ops, round, budgetUsd) =>
      ops.resolveConflict.executeWithOptions({ summary: `resolve ${conflict.workerId} conflict, round ${round}` }, [
        {
          ...this.fixerInput(),
          agent: resolver.agent,
          round,
          maxRounds: resolver.maxRounds,
          budgetUsd,
          workerId: conflict.workerId,
          headSha,
          intoSha: this.head,
          title: this.titleOf(task),
          incoming: { workerId: task.id, prompt: task.prompt },
          integrated: conflict.conflictsWith.flatMap((id) => {
            const other = this.tasks.get(id);
            return other ? [{ workerId: id, prompt: other.prompt }] : [];
          }),
          previousFailure,
        },
      ]),
    );
  }

  /** The sub-task redone by a fresh sub-task workflow on top of the integrated tree; why it did not work, if it did not. */
  private async redo(conflict: ConflictReport, task: SubTask): Promise<string | undefined> {
    const { runKey, baseSha, oracleSha } = this.input;
    const { attempt, end } = track(this.report, {
      kind: 'redispatch',
      workerId: conflict.workerId,
      round: 1,
      files: conflict.files,
    });
    const { recordIntegrated, mergeWorkers } = this.storeOps();
    const seed = await recordIntegrated({ runKey, baseSha, sha: this.head, name: `seeds/${task.id}`, oracleSha });
    const redoId = `${task.id}.redo`;
    attempt.workflowId = subTaskWorkflowId(workflowInfo().workflowId, redoId);
    const given = this.input.subTaskInput!(task);
    let reason: string | undefined;
    const redone = await this.input.runSubTask!({
      ...given,
      task: { ...given.task, id: redoId, prompt: given.task.prompt + redoNote(conflict.files, conflict.conflictsWith) },
      seed: { ref: seed.ref, sha: seed.sha },
    });
    if (redone.status !== 'done') reason = redone.reason ?? `the sub-task ended ${redone.status}`;
    else if (redone.headSha) {
      const title = `${this.titleOf(task)} (redone on the integrated tree)`;
      const merged = await mergeWorkers.executeWithOptions({ summary: `merge ${task.id} (redone)` }, [
        {
          runKey,
          baseSha,
          into: this.head,
          workers: [{ workerId: task.id, headSha: redone.headSha, title }],
          at: this.at,
        },
      ]);
      if (merged.status === 'merged') this.head = merged.sha;
      else reason = `its redone commits conflict in ${merged.files.join(', ')}`;
    }
    end(reason ? 'failed' : 'succeeded', { reason, costUsd: redone.costUsd });
    return reason;
  }

  // ---- Tests and repairs ----

  /** The test gate, and repair rounds while it fails: the passing run, or why the integration ends. */
  async testAndRepair(): Promise<TestRun | Failure> {
    this.input.status.phase = 'testing';
    const base = this.weighs() ? await this.testBase() : undefined;
    const tests = await this.testAndRepairTree();
    if ('ok' in tests || !this.weighs()) return tests;
    const { req, input } = this;
    const refused = weigh({ req, tests, base, flaky: this.flaky, hidden: Boolean(input.oracleSha) }, input);
    return refused ?? tests;
  }

  /** Whether this run weighs its tests' evidence: runs started before PATCHES.testEvidence do not. */
  private weighs(): boolean {
    return (this.evidenceOn ??= patched(PATCHES.testEvidence.id));
  }

  /**
   * The tests (and the measure command) on the base, to compare the integrated tree's with; the
   * worker reuses an earlier run's when it tested the same base with the same commands. None
   * when nothing changed the base, or when it cannot be tested (the comparison is then missing,
   * never made up).
   */
  private async testBase(): Promise<BaseRun | undefined> {
    if (this.head === this.input.baseSha) return undefined;
    // Tested while the agents ran, once that is done (a failure there is tried again here).
    if (this.warming) await this.warming;
    if (this.base) return this.base;
    try {
      return await this.inSandbox(this.testSandbox, (ops) => this.baseTests(ops));
    } catch (err) {
      if (isCancellation(err)) throw err;
      return undefined;
    }
  }

  /** The testBase activity in the test sandbox (a host that is lost fails it, to be moved). */
  private baseTests(ops: SandboxOps): Promise<BaseRun> {
    const { req } = this;
    const { runKey, baseSha, oracleSha, commandTimeoutMs } = this.input;
    const summary = `tests on the base: ${req.testCmd}`.slice(0, 200);
    return ops.testBase.executeWithOptions({ summary }, [
      {
        sandbox: this.testSandbox,
        runKey,
        baseSha,
        sha: baseSha,
        setupCmd: req.setupCmd,
        testCmd: req.testCmd,
        timeoutMs: commandTimeoutMs,
        oracleSha,
        measureCmd: req.measure?.cmd,
      },
    ]);
  }

  private async testAndRepairTree(): Promise<TestRun | Failure> {
    const rounds = { done: 0 };
    let gate = await this.runGate(0, undefined, { measure: true });
    while (!('ok' in gate) && !gate.passed) {
      const message = `${gate.what} ${how(gate)} on the integrated tree`;
      const repair = this.req.repair;
      if (!repair) return { ok: false, outcome: 'tests-failed', message };
      const fixed = await this.repairRound(repair, rounds, gate);
      if ('stop' in fixed) {
        const why =
          fixed.stop === 'rounds'
            ? `${rounds.done} repair round(s) did not fix it`
            : `the repair budget of $${repair.budgetUsd!.toFixed(2)} is spent after ${rounds.done} round(s)`;
        return { ok: false, outcome: 'tests-failed', message: `${message}; ${why}` };
      }
      const { round: repaired, end } = fixed;
      const spentRound = { costUsd: repaired.costUsd, logRef: repaired.logRef, diffstat: repaired.diffstat };
      if (!repaired.ok) {
        end('failed', { ...spentRound, reason: repaired.reason });
        continue;
      }
      this.head = repaired.sha;
      gate = await this.runGate(rounds.done, undefined, { measure: true });
      if ('ok' in gate) end('failed', { ...spentRound, reason: gate.message });
      else
        end(gate.passed ? 'succeeded' : 'failed', {
          ...spentRound,
          reason: gate.passed ? undefined : `${gate.what} still ${how(gate)}`,
        });
    }
    return gate;
  }

  /**
   * The test gate on `sha`, a commit other than the head (a best-of-N candidate merged onto it):
   * the same tests, hidden ones included; the head does not move.
   */
  testAt(sha: string, label: string): Promise<TestRun | Failure> {
    return this.runGate(0, label, { sha });
  }

  /**
   * The tests on the head (or on `on.sha`). `round` names the test activity in the Web UI: 0 is
   * the first, n the one after repair round n; or `label` does. `on.measure`: the measure command
   * runs after the tests (the final tree's). One run at a time: the test sandbox has a single checkout.
   */
  private runGate(
    round: number,
    label?: string,
    on: { sha?: string; measure?: boolean } = {},
  ): Promise<TestRun | Failure> {
    const sha = on.sha ?? this.head;
    const once = () => this.gateOnce(round, label, sha, on.measure ?? false);
    // Started at once when nothing else tests, as before candidates existed: replays see the same commands.
    const gate = this.testing ? this.testing.then(once) : once();
    const settled = gate.then(
      () => undefined,
      () => undefined,
    );
    this.testing = settled;
    void settled.then(() => {
      if (this.testing === settled) this.testing = undefined;
    });
    return gate;
  }

  /**
   * One gate: a failing run is run again, in a fresh sandbox, up to limits.flakyRetries times,
   * and a pass after a failure keeps the failures as flaky runs.
   */
  private async gateOnce(round: number, label: string | undefined, sha: string, measure: boolean) {
    const retries = this.weighs() ? (this.req.limits.flakyRetries ?? 0) : 0;
    const failures: FlakyRun[] = [];
    for (let attempt = 1; ; attempt++) {
      const tests = await this.testOnce(round, label, { attempt, measure: measure && this.weighs(), sha });
      if ('ok' in tests || tests.passed || attempt > retries) {
        if (!('ok' in tests) && tests.passed) this.flaky.push(...failures);
        return tests;
      }
      failures.push({ exitCode: tests.exitCode, timedOut: tests.timedOut, logRef: tests.logRef });
      await this.freshTestSandbox();
    }
  }

  /**
   * The next test run gets a test sandbox of its own: this one is destroyed, and provisioned again
   * when needed. A kept local one is reset instead, by the next run's checkout, which also empties
   * its scratch directory (its $HOME) for a retry: it is then as a new one would be.
   */
  private async freshTestSandbox(): Promise<void> {
    if (this.keeping && this.testSandbox.provider === 'local') return;
    if (!this.ready.delete(this.testSandbox.key)) return;
    await this.sandboxOps()
      .destroySandbox(this.testSandbox)
      .catch((err: unknown) => {
        if (!this.home.lost(err)) throw err;
      });
  }

  private async testOnce(
    round: number,
    label: string | undefined,
    run: { attempt: number; measure: boolean; sha: string },
  ): Promise<TestRun | Failure> {
    const { req } = this;
    const { runKey, baseSha, oracleSha, commandTimeoutMs, result } = this.input;
    const retry = run.attempt > 1 ? `, run ${run.attempt}` : '';
    const summary =
      (label ?? (round === 0 ? `tests: ${req.testCmd}` : `tests, repair round ${round}: ${req.testCmd}`)) + retry;
    const tests = await this.inSandbox(this.testSandbox, (ops) =>
      ops.runTests.executeWithOptions({ summary: summary.slice(0, 200) }, [
        {
          sandbox: this.testSandbox,
          runKey,
          baseSha,
          sha: run.sha,
          setupCmd: req.setupCmd,
          testCmd: req.testCmd,
          timeoutMs: commandTimeoutMs,
          oracleSha,
          ...(run.attempt > 1 && { attempt: run.attempt }),
          ...(run.measure && req.measure && { measureCmd: req.measure.cmd }),
        },
      ]),
    );
    if (tests.discarded) (this.report.discarded ??= []).push(tests.discarded);
    if (tests.logRef) result.test = { exitCode: tests.exitCode, tail: tests.tail, logRef: tests.logRef };
    if (tests.problem) return { ok: false, outcome: 'failed', message: `${tests.problem}; nothing is pushed` };
    return tests;
  }

  private repairRound(repair: FixerSpec, rounds: { done: number }, failing: TestRun) {
    const { oracleSha, commandTimeoutMs } = this.input;
    const attempt = (round: number) => ({
      kind: 'repair' as const,
      round,
      failed: lastLines(failing.tail, FAILED_TAIL_LINES),
    });
    return this.fixRound('repair', repair, rounds, attempt, (ops, round, budgetUsd) =>
      ops.repairTests.executeWithOptions({ summary: `repair round ${round} by ${repair.agent.kind}` }, [
        {
          ...this.fixerInput(),
          agent: repair.agent,
          round,
          maxRounds: repair.maxRounds,
          budgetUsd,
          fromSha: this.head,
          tasks: this.req.subTasks.map((t) => ({ workerId: t.id, prompt: firstLine(t.prompt) })),
          failedCmd: failing.command,
          exitCode: failing.exitCode,
          // With hidden tests the gate's output is theirs too: the agent gets a visible run instead.
          logRef: oracleSha ? undefined : failing.logRef,
          commandTimeoutMs,
          allowedPaths: repairablePaths(this.req),
        },
      ]),
    );
  }

  /**
   * One round of a fixer in the fixer sandbox, unless its rounds (`rounds.done` of its
   * maxRounds) or its budget are spent: counts the round, tracks it as an attempt, invokes the
   * agent with what its budget has left, and adds its cost to the fixer's spend. The caller
   * settles the attempt (a repair round only once the tests have run again).
   */
  private async fixRound(
    fixer: Fixer,
    spec: FixerSpec,
    rounds: { done: number },
    attempt: (round: number) => Omit<IntegrationAttempt, 'state' | 'costUsd'>,
    invoke: (ops: SandboxOps, round: number, budgetUsd: number | undefined) => Promise<FixerRound>,
  ): Promise<{ round: FixerRound; end: EndAttempt } | NoRound> {
    if (rounds.done >= spec.maxRounds) return { stop: 'rounds' };
    const budgetUsd = spec.budgetUsd === undefined ? undefined : spec.budgetUsd - this.spent[fixer];
    if (budgetUsd !== undefined && budgetUsd <= 0) return { stop: 'budget' };
    const round = ++rounds.done;
    const { end } = track(this.report, attempt(round));
    const done = await this.inSandbox(this.fixerSandbox, (ops) => invoke(ops, round, budgetUsd));
    this.spent[fixer] += done.costUsd;
    return { round: done, end };
  }

  /** What every fixer round is given, whichever the fixer. */
  private fixerInput() {
    const { req } = this;
    const { runKey, baseSha, oracleSha } = this.input;
    return {
      sandbox: this.fixerSandbox,
      runKey,
      baseSha,
      objective: req.objective,
      verifyCmd: req.setupCmd ? `${req.setupCmd} && ${req.testCmd}` : req.testCmd,
      timeoutMs: this.agentTimeoutMs,
      oracleSha,
      at: this.at,
    };
  }

  // ---- The end ----

  /** Names the tested head the integrated commit, for the push gate and the push. */
  async record(tests: TestRun): Promise<IntegrationOutcome> {
    const { runKey, baseSha, oracleSha } = this.input;
    const recorded = await this.storeOps().recordIntegrated({
      runKey,
      baseSha,
      sha: this.head,
      name: 'integrated',
      oracleSha,
    });
    return { ok: true, sha: recorded.sha, diffstat: recorded.diffstat, testSummary: summarizeTests(tests.tail) };
  }

  /**
   * Destroys both sandboxes, however the integration ended; not cancellable. Kept ones are
   * released: their keepers destroy them while the run goes on (sandboxesGone waits for that).
   */
  async destroySandboxes(): Promise<void> {
    await CancellationScope.nonCancellable(async () => {
      // A later review round provisions them again.
      if (this.keeping) {
        // A sandbox still being made ready must be made before it can be released.
        await this.warming;
        for (const k of this.keepers.filter((k) => !k.released)) this.release(k);
        this.ready.clear();
        return;
      }
      if (!this.home.bound) return; // no host was claimed: no sandbox was made
      const { destroySandbox } = this.sandboxOps();
      // A lost host took its sandboxes with it (`flotilla gc` prunes them if it comes back).
      const gone = (err: unknown) => {
        if (!this.home.lost(err)) throw err;
      };
      await Promise.all([destroySandbox(this.testSandbox).catch(gone), destroySandbox(this.fixerSandbox).catch(gone)]);
      this.ready.clear();
    });
  }

  /** Resolves once the keepers released on the sandboxes' current host have destroyed them. */
  async sandboxesGone(): Promise<void> {
    await Promise.all(this.keepers.filter((k) => k.released && !k.left).map((k) => k.gone));
  }
}
