/**
 * Integration: on the host, merge every worker's commits in plan order (3-way, in the staging
 * repository), then run the setup and test commands on the result in a test sandbox. The
 * commit pushed is the one the host merged and tested; nothing a sandbox commits leaves it.
 *
 * With a resolver, a conflicting merge gets resolver rounds and then, if they fail, one redo of
 * its sub-task by a fresh worker starting from the integrated tree. With a repair agent, failing
 * tests get repair rounds, each followed by the tests again. Hidden tests take part in every
 * test run and in nothing else: fixers work in a sandbox of their own that never holds them.
 * Every attempt shows in the status and the result as it happens; history carries only SHAs,
 * refs and short (redacted) tails. The sandboxes are destroyed however it ends.
 */
import { type ActivityOptions, CancellationScope, proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { Activities, SandboxRef } from '../../activities';
import type { TestRun } from '../../activities/integration';
import { redoNote } from '../../contracts/prompts';
import {
  type ConflictReport,
  type IntegrationAttempt,
  type IntegrationReport,
  type RunOutcome,
  type RunResult,
  type SubTaskReport,
} from '../../contracts/reports';
import { type FixerSpec, type PlannedRequest, type SubTask } from '../../contracts/request';
import { normalizeRepoPath } from '../../contracts/names';
import { msOfMinutes, msOfSeconds } from '../durations';
import { SandboxHome } from '../host-affinity';
import type { RunStatus } from '../../contracts/messages';
import { activityOptions, commandOptions } from '../options';
import { firstLine, lastLines } from '../../contracts/text';
import { summarizeTests } from '../../contracts/test-summary';
import { type SubTaskInput, subTaskWorkflowId } from '../subtask/subtask';

export interface IntegrationInput {
  req: PlannedRequest;
  runKey: string;
  baseSha: string;
  /** The hidden tests' commit in the staging repository (fetchOracle), when there are any. */
  oracleSha?: string;
  /** Updated as integration proceeds (phase, attempts). */
  status: RunStatus;
  /** Filled with the conflict, the test outcome and the attempts. */
  result: RunResult;
  commandTimeoutMs: number;
  heartbeatTimeoutMs: number;
  /** What the fan-out gives the worker of `task`; a conflicting sub-task is redone with it. */
  workerInput: (task: SubTask) => SubTaskInput;
  /** Runs a worker child as the fan-out does, shown in the status beside the others. */
  runWorker: (input: SubTaskInput) => Promise<SubTaskReport>;
}

type Failure = { ok: false; outcome: RunOutcome; message: string };

export type IntegrationOutcome = { ok: true; sha: string; diffstat: string; testSummary: string } | Failure;

/** Lines of failing output each repair round keeps in the report. */
const FAILED_TAIL_LINES = 15;

function how(run: TestRun): string {
  return run.timedOut ? 'timed out' : `exited with code ${run.exitCode}`;
}

export async function integrate(input: IntegrationInput): Promise<IntegrationOutcome> {
  const { req, runKey, baseSha, oracleSha, status, result, commandTimeoutMs, heartbeatTimeoutMs } = input;
  const { mergeWorkers, recordIntegrated } = proxyActivities<Activities>(activityOptions(heartbeatTimeoutMs));
  const agentTimeoutMs = msOfMinutes(req.limits.agentTimeoutMinutes);
  // The test and fixer sandboxes live on one host, claimed when the first is needed; runs started
  // before host affinity keep them on the shared queue.
  const home = SandboxHome.open('integration', {
    hostTimeoutMs: msOfSeconds(req.limits.hostTimeoutSeconds),
    heartbeatTimeoutMs,
  });
  const bind = () => {
    const proxy = (options: ActivityOptions) => home.on(options);
    const { provisionSandbox, destroySandbox } = proxy(activityOptions(heartbeatTimeoutMs));
    return {
      provisionSandbox,
      destroySandbox,
      // Setup and tests run one after the other within one activity.
      runTests: proxy(commandOptions(2 * commandTimeoutMs, heartbeatTimeoutMs)).runTests,
      resolveConflict: proxy(commandOptions(agentTimeoutMs, heartbeatTimeoutMs)).resolveConflict,
      // A repair round may first run the visible tests to show the agent their output.
      repairTests: proxy(commandOptions(agentTimeoutMs + commandTimeoutMs, heartbeatTimeoutMs)).repairTests,
    };
  };
  let on = home.affinity ? undefined : bind();

  const tasks = new Map(req.subTasks.map((t) => [t.id, t]));
  const verifyCmd = req.setupCmd ? `${req.setupCmd} && ${req.testCmd}` : req.testCmd;
  /** The only sandbox the hidden tests are ever written to. */
  const testSandbox: SandboxRef = { key: `${runKey}/integration`, ...req.sandbox };
  /** Where resolver and repair agents work: it never holds the hidden tests. */
  const fixerSandbox: SandboxRef = { key: `${runKey}/integration-fixer`, ...req.sandbox };
  // Provisioned when first needed; every activity then makes its own fresh checkout in it.
  const ready = new Set<string>();
  const prepare = async (sandbox: SandboxRef) => {
    if (!on) {
      await home.claim();
      on = bind();
    }
    if (ready.has(sandbox.key)) return;
    await on!.provisionSandbox(sandbox);
    ready.add(sandbox.key);
  };
  /**
   * Runs a step in `sandbox`, provisioned first. When its host is lost, both sandboxes move to
   * another host and the step runs again there: each step checks out its own commit.
   */
  const inSandbox = <T>(sandbox: SandboxRef, step: (activities: ReturnType<typeof bind>) => Promise<T>): Promise<T> => {
    const once = async () => {
      await prepare(sandbox);
      return step(on!);
    };
    return home.run(once, async () => {
      on = bind();
      ready.clear();
      await prepare(sandbox);
    });
  };
  /** The date of every commit the integration makes: a retried activity makes the same ones. */
  const at = Math.floor(Date.now() / 1000);
  const report: IntegrationReport = { attempts: [], costUsd: 0 };
  status.integration = result.integration = report;
  const spent = { resolver: 0, repair: 0 };
  /** What a fixer's next round may spend; undefined when it has no budget. */
  const budgetLeft = (spec: FixerSpec, used: number) =>
    spec.budgetUsd === undefined ? undefined : spec.budgetUsd - used;
  /** Records an attempt as running; `end` settles it. The same object is in the status and the result. */
  const track = (fields: Omit<IntegrationAttempt, 'state' | 'costUsd'>) => {
    const attempt: IntegrationAttempt = { ...fields, state: 'running', costUsd: 0 };
    const started = Date.now();
    report.attempts.push(attempt);
    return {
      attempt,
      end(state: 'succeeded' | 'failed', outcome: Partial<IntegrationAttempt>) {
        Object.assign(attempt, outcome, { state, durationMs: Date.now() - started });
        // A redone sub-task's cost is already counted with the workers.
        if (attempt.kind !== 'redispatch') report.costUsd += attempt.costUsd;
      },
    };
  };
  /** The integration head, as the last merge, resolution or repair left it: a host commit. */
  let head = baseSha;
  const fixer = () => ({
    sandbox: fixerSandbox,
    runKey,
    baseSha,
    objective: req.objective,
    verifyCmd,
    timeoutMs: agentTimeoutMs,
    oracleSha,
    at,
  });

  /** Resolver rounds, then one redo of the sub-task on the integrated tree; the run's end when neither works. */
  const overcomeConflict = async (
    conflict: ConflictReport,
    task: SubTask,
    headSha: string,
    title: string,
  ): Promise<Failure | undefined> => {
    const others = conflict.conflictsWith.length ? conflict.conflictsWith.join(', ') : 'earlier workers';
    const what = `worker ${conflict.workerId} conflicts with ${others} in ${conflict.files.join(', ')}`;
    const resolver = req.resolver;
    if (!resolver) {
      result.conflict = conflict;
      return { ok: false, outcome: 'conflict', message: what };
    }
    const tried: string[] = [];
    let previousFailure: string | undefined;
    let rounds = 0;
    while (rounds < resolver.maxRounds) {
      const budgetUsd = budgetLeft(resolver, spent.resolver);
      if (budgetUsd !== undefined && budgetUsd <= 0) {
        tried.push(`no further resolver round: its budget of $${resolver.budgetUsd!.toFixed(2)} is spent`);
        break;
      }
      rounds++;
      if (!home.affinity) await prepare(fixerSandbox);
      const { end } = track({ kind: 'resolve', workerId: conflict.workerId, round: rounds, files: conflict.files });
      const resolved = await inSandbox(fixerSandbox, (a) =>
        a.resolveConflict.executeWithOptions({ summary: `resolve ${conflict.workerId} conflict, round ${rounds}` }, [
          {
            ...fixer(),
            agent: resolver.agent,
            round: rounds,
            maxRounds: resolver.maxRounds,
            budgetUsd,
            workerId: conflict.workerId,
            headSha,
            intoSha: head,
            title,
            incoming: { workerId: task.id, prompt: task.prompt },
            integrated: conflict.conflictsWith.flatMap((id) => {
              const other = tasks.get(id);
              return other ? [{ workerId: id, prompt: other.prompt }] : [];
            }),
            previousFailure,
          },
        ]),
      );
      spent.resolver += resolved.costUsd;
      end(resolved.ok ? 'succeeded' : 'failed', {
        reason: resolved.reason,
        diffstat: resolved.diffstat,
        costUsd: resolved.costUsd,
        logRef: resolved.logRef,
      });
      if (resolved.ok) {
        head = resolved.sha;
        return undefined;
      }
      previousFailure = resolved.reason;
    }
    if (rounds > 0) tried.unshift(`${rounds} resolver round(s) (last: ${previousFailure})`);

    // ---- The sub-task redone by a fresh worker on top of the integrated tree ----
    const { attempt, end } = track({
      kind: 'redispatch',
      workerId: conflict.workerId,
      round: 1,
      files: conflict.files,
    });
    const seed = await recordIntegrated({ runKey, baseSha, sha: head, name: `seeds/${task.id}`, oracleSha });
    const redoId = `${task.id}.redo`;
    attempt.workflowId = subTaskWorkflowId(workflowInfo().workflowId, redoId);
    const given = input.workerInput(task);
    let reason: string | undefined;
    const redo = await input.runWorker({
      ...given,
      task: { ...given.task, id: redoId, prompt: given.task.prompt + redoNote(conflict.files, conflict.conflictsWith) },
      seed: { ref: seed.ref, sha: seed.sha },
    });
    if (redo.status !== 'done') reason = redo.reason ?? `the worker ended ${redo.status}`;
    else if (redo.headSha) {
      const merged = await mergeWorkers.executeWithOptions({ summary: `merge ${task.id} (redone)` }, [
        {
          runKey,
          baseSha,
          into: head,
          workers: [{ workerId: task.id, headSha: redo.headSha, title: `${title} (redone on the integrated tree)` }],
          at,
        },
      ]);
      if (merged.status === 'merged') head = merged.sha;
      else reason = `its redone commits conflict in ${merged.files.join(', ')}`;
    }
    end(reason ? 'failed' : 'succeeded', { reason, costUsd: redo.costUsd });
    if (!reason) return undefined;
    tried.push(`redoing ${task.id} on the integrated tree (${reason})`);
    result.conflict = conflict;
    return { ok: false, outcome: 'conflict', message: `${what}; tried ${tried.join(', then ')}` };
  };

  status.phase = 'integrating';
  try {
    const titleOf = (task: SubTask) => `Integrate ${task.id}: ${firstLine(task.prompt)}`;
    let pending = result.workers.filter((w) => w.ref && w.headSha);
    while (pending.length) {
      const merged = await mergeWorkers.executeWithOptions(
        { summary: `merge ${pending.map((w) => w.workerId).join(', ')}` },
        [
          {
            runKey,
            baseSha,
            into: head,
            workers: pending.map((w) => ({
              workerId: w.workerId,
              headSha: w.headSha!,
              title: titleOf(tasks.get(w.workerId)!),
            })),
            at,
          },
        ],
      );
      head = merged.sha;
      if (merged.status === 'merged') break;
      const index = pending.findIndex((w) => w.workerId === merged.workerId);
      const task = tasks.get(merged.workerId)!;
      const conflict = { workerId: merged.workerId, conflictsWith: merged.conflictsWith, files: merged.files };
      const failure = await overcomeConflict(conflict, task, pending[index].headSha!, titleOf(task));
      if (failure) return failure;
      pending = pending.slice(index + 1);
    }

    // ---- The test gate, and repair rounds while it fails ----
    status.phase = 'testing';
    if (!home.affinity) await prepare(testSandbox);
    /** `round` names the run in the Web UI: 0 is the first, n the one after repair round n. */
    const runGate = async (round: number): Promise<TestRun | Failure> => {
      const summary = round === 0 ? `tests: ${req.testCmd}` : `tests, repair round ${round}: ${req.testCmd}`;
      const run = await inSandbox(testSandbox, (a) =>
        a.runTests.executeWithOptions({ summary: summary.slice(0, 200) }, [
          {
            sandbox: testSandbox,
            runKey,
            baseSha,
            sha: head,
            setupCmd: req.setupCmd,
            testCmd: req.testCmd,
            timeoutMs: commandTimeoutMs,
            oracleSha,
          },
        ]),
      );
      if (run.discarded) (report.discarded ??= []).push(run.discarded);
      if (run.logRef) result.test = { exitCode: run.exitCode, tail: run.tail, logRef: run.logRef };
      if (run.problem) return { ok: false, outcome: 'failed', message: `${run.problem}; nothing is pushed` };
      return run;
    };

    const allowedPaths = [
      ...new Set([...req.subTasks.flatMap((t) => t.ownedPaths), ...req.sharedPaths].map(normalizeRepoPath)),
    ];
    let gate = await runGate(0);
    let rounds = 0;
    while (!('ok' in gate) && !gate.passed) {
      const message = `${gate.what} ${how(gate)} on the integrated tree`;
      const repair = req.repair;
      if (!repair) return { ok: false, outcome: 'tests-failed', message };
      if (rounds >= repair.maxRounds)
        return { ok: false, outcome: 'tests-failed', message: `${message}; ${rounds} repair round(s) did not fix it` };
      const budgetUsd = budgetLeft(repair, spent.repair);
      if (budgetUsd !== undefined && budgetUsd <= 0) {
        return {
          ok: false,
          outcome: 'tests-failed',
          message: `${message}; the repair budget of $${repair.budgetUsd!.toFixed(2)} is spent after ${rounds} round(s)`,
        };
      }
      rounds++;
      if (!home.affinity) await prepare(fixerSandbox);
      const { end } = track({ kind: 'repair', round: rounds, failed: lastLines(gate.tail, FAILED_TAIL_LINES) });
      const failing = gate;
      const repaired = await inSandbox(fixerSandbox, (a) =>
        a.repairTests.executeWithOptions({ summary: `repair round ${rounds} by ${repair.agent.kind}` }, [
          {
            ...fixer(),
            agent: repair.agent,
            round: rounds,
            maxRounds: repair.maxRounds,
            budgetUsd,
            fromSha: head,
            tasks: req.subTasks.map((t) => ({ workerId: t.id, prompt: firstLine(t.prompt) })),
            failedCmd: failing.command,
            exitCode: failing.exitCode,
            // With hidden tests the gate's output is theirs too: the agent gets a visible run instead.
            logRef: oracleSha ? undefined : failing.logRef,
            commandTimeoutMs,
            allowedPaths,
          },
        ]),
      );
      spent.repair += repaired.costUsd;
      const spentRound = { costUsd: repaired.costUsd, logRef: repaired.logRef, diffstat: repaired.diffstat };
      if (!repaired.ok) {
        end('failed', { ...spentRound, reason: repaired.reason });
        continue;
      }
      head = repaired.sha;
      gate = await runGate(rounds);
      if ('ok' in gate) end('failed', { ...spentRound, reason: gate.message });
      else
        end(gate.passed ? 'succeeded' : 'failed', {
          ...spentRound,
          reason: gate.passed ? undefined : `${gate.what} still ${how(gate)}`,
        });
    }
    if ('ok' in gate) return gate;

    const recorded = await recordIntegrated({ runKey, baseSha, sha: head, name: 'integrated', oracleSha });
    return { ok: true, sha: recorded.sha, diffstat: recorded.diffstat, testSummary: summarizeTests(gate.tail) };
  } finally {
    await CancellationScope.nonCancellable(async () => {
      if (!on) return; // no host was claimed: no sandbox was made
      const destroy = on.destroySandbox;
      // A lost host took its sandboxes with it (`flotilla gc` prunes them if it comes back).
      const gone = (err: unknown) => {
        if (!home.lost(err)) throw err;
      };
      await Promise.all([destroy(testSandbox).catch(gone), destroy(fixerSandbox).catch(gone)]);
    });
  }
}
