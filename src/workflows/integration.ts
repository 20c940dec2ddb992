/**
 * Integration: in a sandbox of its own at the base commit, merge every worker's commits in plan
 * order (3-way), then run the setup and test commands on the result. Nothing untested leaves.
 *
 * With a resolver, a conflicting merge gets resolver rounds and then, if they fail, one redo of
 * its sub-task by a fresh worker starting from the integrated tree. With a repair agent, failing
 * tests get repair rounds, each followed by the tests again. Oracle files take part in every
 * test run and in nothing else. Every attempt shows in the status and the result as it happens;
 * history carries only SHAs, refs and short tails. The sandbox is destroyed however it ends.
 */
import { CancellationScope, proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { Activities, CommandReport, SandboxRef } from '../activities';
import { redoNote } from '../prompts';
import {
  type ConflictReport,
  type FixerSpec,
  type IntegrationAttempt,
  type IntegrationReport,
  type PlannedRequest,
  type RunOutcome,
  type RunResult,
  type SubTask,
  type WorkerReport,
  normalizeRepoPath,
} from '../spec';
import type { RunStatus } from './messages';
import { activityOptions, commandOptions } from './options';
import { firstLine, lastLines } from './text';
import { summarizeTests } from './tests-summary';
import { type WorkerInput, workerWorkflowId } from './worker';

export interface IntegrationInput {
  req: PlannedRequest;
  runKey: string;
  baseSha: string;
  /** Updated as integration proceeds (phase, attempts). */
  status: RunStatus;
  /** Filled with the conflict, the test outcome and the attempts. */
  result: RunResult;
  commandTimeoutMs: number;
  heartbeatTimeoutMs: number;
  /** What the fan-out gives the worker of `task`; a conflicting sub-task is redone with it. */
  workerInput: (task: SubTask) => WorkerInput;
  /** Runs a worker child as the fan-out does, shown in the status beside the others. */
  runWorker: (input: WorkerInput) => Promise<WorkerReport>;
}

type Failure = { ok: false; outcome: RunOutcome; message: string };

export type IntegrationOutcome = { ok: true; sha: string; diffstat: string; testSummary: string } | Failure;

/** Lines of failing output each repair round keeps in the report. */
const FAILED_TAIL_LINES = 15;

/** One run of the setup and test commands: the first that failed, or the passing tests. */
interface GateRun {
  passed: boolean;
  /** "the setup command" or "the test command". */
  what: string;
  command: string;
  run: CommandReport;
}

function failed(run: CommandReport): boolean {
  return run.exitCode !== 0 || run.timedOut;
}

function how(run: CommandReport): string {
  return run.timedOut ? 'timed out' : `exited with code ${run.exitCode}`;
}

export async function integrate(input: IntegrationInput): Promise<IntegrationOutcome> {
  const { req, runKey, baseSha, status, result, commandTimeoutMs, heartbeatTimeoutMs } = input;
  const { provisionSandbox, seedWorkspace, mergeWorker, exportIntegrated, destroySandbox, storeOracles, placeOracles } =
    proxyActivities<Activities>(activityOptions(heartbeatTimeoutMs));
  const { runCommand } = proxyActivities<Activities>(commandOptions(commandTimeoutMs, heartbeatTimeoutMs));
  const agentTimeoutMs = req.limits.workerTimeoutMinutes * 60_000;
  const { resolveConflict, repairTests } = proxyActivities<Activities>(commandOptions(agentTimeoutMs, heartbeatTimeoutMs));

  const tasks = new Map(req.subTasks.map((t) => [t.id, t]));
  const oraclePaths = Object.keys(req.oracle?.files ?? {}).map(normalizeRepoPath);
  const verifyCmd = req.setupCmd ? `${req.setupCmd} && ${req.testCmd}` : req.testCmd;
  const sandbox: SandboxRef = { key: `${runKey}/integration`, ...req.sandbox };
  const fixer = { sandbox, runKey, objective: req.objective, verifyCmd, timeoutMs: agentTimeoutMs, oraclePaths };
  const report: IntegrationReport = { attempts: [], costUsd: 0 };
  status.integration = result.integration = report;
  const spent = { resolver: 0, repair: 0 };
  /** What a fixer's next round may spend; undefined when it has no budget. */
  const budgetLeft = (spec: FixerSpec, used: number) => (spec.budgetUsd === undefined ? undefined : spec.budgetUsd - used);
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
  /** The integration branch's head, as the last merge, resolution or repair left it. */
  let head = baseSha;

  /** Resolver rounds, then one redo of the sub-task on the integrated tree; the run's end when neither works. */
  const overcomeConflict = async (conflict: ConflictReport, task: SubTask, ref: string, headSha: string, title: string): Promise<Failure | undefined> => {
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
      const { end } = track({ kind: 'resolve', workerId: conflict.workerId, round: rounds, files: conflict.files });
      const resolved = await resolveConflict({
        ...fixer,
        agent: resolver.agent,
        round: rounds,
        maxRounds: resolver.maxRounds,
        budgetUsd,
        workerId: conflict.workerId,
        ref,
        headSha,
        intoSha: head,
        title,
        incoming: { workerId: task.id, prompt: task.prompt },
        integrated: conflict.conflictsWith.flatMap((id) => {
          const other = tasks.get(id);
          return other ? [{ workerId: id, prompt: other.prompt }] : [];
        }),
        previousFailure,
      });
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
    const { attempt, end } = track({ kind: 'redispatch', workerId: conflict.workerId, round: 1, files: conflict.files });
    const seed = await exportIntegrated({ sandbox, runKey, baseSha, name: `seeds/${task.id}`, oraclePaths });
    const redoId = `${task.id}.redo`;
    attempt.workflowId = workerWorkflowId(workflowInfo().workflowId, redoId);
    const given = input.workerInput(task);
    let reason: string | undefined;
    const redo = await input.runWorker({
      ...given,
      task: { ...given.task, id: redoId, prompt: given.task.prompt + redoNote(conflict.files, conflict.conflictsWith) },
      seed: { ref: seed.ref, sha: seed.sha },
    });
    if (redo.status !== 'done') reason = redo.reason ?? `the worker ended ${redo.status}`;
    else if (redo.ref && redo.headSha) {
      const merged = await mergeWorker({
        sandbox,
        runKey,
        workerId: task.id,
        ref: redo.ref,
        headSha: redo.headSha,
        startSha: seed.sha,
        baseSha,
        title: `${title} (redone on the integrated tree)`,
      });
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
    await provisionSandbox(sandbox);
    await seedWorkspace({ sandbox, runKey, baseSha, branch: `flotilla/${runKey}/integration`, author: 'Flotilla integration' });
    for (const w of result.workers) {
      if (!w.ref || !w.headSha) continue;
      const task = tasks.get(w.workerId)!;
      const title = `Integrate ${w.workerId}: ${firstLine(task.prompt)}`;
      const merged = await mergeWorker({ sandbox, runKey, workerId: w.workerId, ref: w.ref, headSha: w.headSha, startSha: baseSha, baseSha, title });
      if (merged.status === 'merged') {
        head = merged.sha;
        continue;
      }
      const conflict = { workerId: w.workerId, conflictsWith: merged.conflictsWith, files: merged.files };
      const failure = await overcomeConflict(conflict, task, w.ref, w.headSha, title);
      if (failure) return failure;
    }

    // ---- The test gate, and repair rounds while it fails ----
    status.phase = 'testing';
    const oracles = req.oracle
      ? await storeOracles({ files: Object.fromEntries(Object.entries(req.oracle.files).map(([p, content]) => [normalizeRepoPath(p), content])) })
      : [];
    const runGate = async (): Promise<GateRun | Failure> => {
      if (oracles.length) {
        const placed = await placeOracles({ sandbox, baseSha, oracles });
        if (placed.problem) return { ok: false, outcome: 'failed', message: `the oracle tests cannot run: ${placed.problem}` };
      }
      let gate: GateRun | undefined;
      if (req.setupCmd) {
        const setup = await runCommand({ sandbox, command: req.setupCmd, timeoutMs: commandTimeoutMs, label: 'setup' });
        if (failed(setup)) gate = { passed: false, what: 'the setup command', command: req.setupCmd, run: setup };
      }
      if (!gate) {
        const test = await runCommand({ sandbox, command: req.testCmd, timeoutMs: commandTimeoutMs, label: 'tests' });
        gate = { passed: !failed(test), what: 'the test command', command: req.testCmd, run: test };
      }
      result.test = { exitCode: gate.run.exitCode, tail: gate.run.tail, logRef: gate.run.logRef };
      return gate;
    };

    const allowedPaths = [...new Set([...req.subTasks.flatMap((t) => t.ownedPaths), ...req.sharedPaths].map(normalizeRepoPath))];
    let gate = await runGate();
    let rounds = 0;
    while (!('ok' in gate) && !gate.passed) {
      const message = `${gate.what} ${how(gate.run)} on the integrated tree`;
      const repair = req.repair;
      if (!repair) return { ok: false, outcome: 'tests-failed', message };
      if (rounds >= repair.maxRounds) return { ok: false, outcome: 'tests-failed', message: `${message}; ${rounds} repair round(s) did not fix it` };
      const budgetUsd = budgetLeft(repair, spent.repair);
      if (budgetUsd !== undefined && budgetUsd <= 0) {
        return {
          ok: false,
          outcome: 'tests-failed',
          message: `${message}; the repair budget of $${repair.budgetUsd!.toFixed(2)} is spent after ${rounds} round(s)`,
        };
      }
      rounds++;
      const { end } = track({ kind: 'repair', round: rounds, failed: lastLines(gate.run.tail, FAILED_TAIL_LINES) });
      const repaired = await repairTests({
        ...fixer,
        agent: repair.agent,
        round: rounds,
        maxRounds: repair.maxRounds,
        budgetUsd,
        fromSha: head,
        tasks: req.subTasks.map((t) => ({ workerId: t.id, prompt: firstLine(t.prompt) })),
        failedCmd: gate.command,
        exitCode: gate.run.exitCode,
        logRef: gate.run.logRef,
        allowedPaths,
      });
      spent.repair += repaired.costUsd;
      const spentRound = { costUsd: repaired.costUsd, logRef: repaired.logRef, diffstat: repaired.diffstat };
      if (!repaired.ok) {
        end('failed', { ...spentRound, reason: repaired.reason });
        continue;
      }
      head = repaired.sha;
      gate = await runGate();
      if ('ok' in gate) end('failed', { ...spentRound, reason: gate.message });
      else end(gate.passed ? 'succeeded' : 'failed', { ...spentRound, reason: gate.passed ? undefined : `${gate.what} still ${how(gate.run)}` });
    }
    if ('ok' in gate) return gate;

    const exported = await exportIntegrated({ sandbox, runKey, baseSha, name: 'integrated', oraclePaths });
    return { ok: true, sha: exported.sha, diffstat: exported.diffstat, testSummary: summarizeTests(gate.run.tail) };
  } finally {
    await CancellationScope.nonCancellable(() => destroySandbox(sandbox));
  }
}
