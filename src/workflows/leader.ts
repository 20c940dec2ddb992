/**
 * The leader: resolves the base, fans out one worker per sub-task, integrates their commits,
 * runs the tests and pushes with a lease. Anything short of a push ends the workflow as failed,
 * with the full RunResult attached to the failure, so the Web UI shows red and clients still
 * get the report.
 */
import {
  ApplicationFailure,
  CancellationScope,
  ChildWorkflowFailure,
  executeChild,
  proxyActivities,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { Activities, SandboxRef } from '../activities';
import {
  type LeaderRequest,
  type LeaderRequestInput,
  type RunOutcome,
  type RunResult,
  type WorkerReport,
  RequestError,
  parseLeaderRequest,
} from '../spec';
import { type RunStatus, statusQuery } from './messages';
import { activityOptions, commandOptions } from './options';
import { workerWorkflow, workerWorkflowId } from './worker';

export async function leaderWorkflow(input: LeaderRequestInput): Promise<RunResult> {
  const req = validate(input);
  const info = workflowInfo();
  const runKey = runKeyOf(info.workflowId, info.runId);
  const targetRef = req.repo.targetRef ?? req.repo.baseRef;
  const { resolveBase, pushResult, provisionSandbox, seedWorkspace, mergeWorker, exportIntegrated, destroySandbox } =
    proxyActivities<Activities>(activityOptions);
  const commandTimeoutMs = minutes(req.limits.commandTimeoutMinutes);
  const { runCommand } = proxyActivities<Activities>(commandOptions(commandTimeoutMs));

  const status: RunStatus = {
    phase: 'resolving',
    objective: req.objective,
    repo: req.repo.url,
    targetRef,
    workers: req.subTasks.map((t) => ({ id: t.id, state: 'queued' })),
  };
  setHandler(statusQuery, () => status);

  const { baseSha, targetSha } = await resolveBase({ runKey, url: req.repo.url, baseRef: req.repo.baseRef, targetRef });
  status.baseSha = baseSha;
  const result: RunResult = { outcome: 'failed', message: '', baseSha, targetRef, workers: [] };
  const finish = (outcome: RunOutcome, message: string): RunResult => {
    Object.assign(result, { outcome, message });
    Object.assign(status, { outcome, message, phase: outcome === 'pushed' || outcome === 'unchanged' ? 'done' : 'failed' });
    if (status.phase === 'done') return result;
    throw ApplicationFailure.create({ type: outcome, message, nonRetryable: true, details: [result] });
  };

  // ---- Fan out ----
  status.phase = 'running';
  result.workers = await pool(req.subTasks, req.limits.maxParallel, async (task, i) => {
    const ws = status.workers[i];
    Object.assign(ws, { state: 'running', startedAt: Date.now() });
    let report: WorkerReport;
    try {
      report = await executeChild(workerWorkflow, {
        workflowId: workerWorkflowId(info.workflowId, task.id),
        args: [
          {
            runKey,
            objective: req.objective,
            task: { id: task.id, prompt: task.prompt, ownedPaths: task.ownedPaths, sharedPaths: req.sharedPaths },
            // validate() guarantees every sub-task has an agent of its own or the default.
            agent: (task.agent ?? req.agent)!,
            baseSha,
            sandbox: req.sandbox,
            setupCmd: req.setupCmd,
            workerTimeoutMs: minutes(req.limits.workerTimeoutMinutes),
            commandTimeoutMs,
          },
        ],
      });
    } catch (err) {
      if (!(err instanceof ChildWorkflowFailure)) throw err;
      report = {
        workerId: task.id,
        status: 'failed',
        reason: err.cause?.message ?? err.message,
        commits: 0,
        filesChanged: 0,
        isolation: 'none',
        durationMs: Date.now() - (ws.startedAt ?? Date.now()),
      };
    }
    Object.assign(ws, {
      state: report.status,
      reason: report.reason,
      commits: report.commits,
      filesChanged: report.filesChanged,
      durationMs: report.durationMs,
    });
    return report;
  });
  const failed = result.workers.filter((w) => w.status === 'failed');
  if (failed.length > 0) {
    return finish('failed', `${failed.length} of ${req.subTasks.length} workers failed: ${failed.map((w) => `${w.workerId}: ${w.reason}`).join('; ')}`);
  }

  // ---- Integrate and test ----
  status.phase = 'integrating';
  const sandbox: SandboxRef = { key: `${runKey}/integration`, ...req.sandbox };
  let integrated: { sha: string; ref: string };
  try {
    await provisionSandbox(sandbox);
    await seedWorkspace({ sandbox, runKey, baseSha, branch: `flotilla/${runKey}/integration`, author: 'Flotilla integration' });
    for (const w of result.workers) {
      if (!w.ref || !w.headSha) continue;
      const task = req.subTasks.find((t) => t.id === w.workerId)!;
      const merged = await mergeWorker({
        sandbox,
        runKey,
        workerId: w.workerId,
        ref: w.ref,
        headSha: w.headSha,
        baseSha,
        title: `Integrate ${w.workerId}: ${firstLine(task.prompt)}`,
      });
      if (merged.status === 'conflict') {
        result.conflict = { workerId: w.workerId, conflictsWith: merged.conflictsWith, files: merged.files };
        const others = merged.conflictsWith.length ? merged.conflictsWith.join(', ') : 'earlier workers';
        return finish('conflict', `worker ${w.workerId} conflicts with ${others} in ${merged.files.join(', ')}`);
      }
    }
    status.phase = 'testing';
    if (req.setupCmd) {
      const setup = await runCommand({ sandbox, command: req.setupCmd, timeoutMs: commandTimeoutMs, label: 'setup' });
      if (setup.exitCode !== 0 || setup.timedOut) {
        result.test = { exitCode: setup.exitCode, tail: setup.tail, logRef: setup.logRef };
        return finish('tests-failed', `the setup command failed on the integrated tree (exit ${setup.exitCode})`);
      }
    }
    const test = await runCommand({ sandbox, command: req.testCmd, timeoutMs: commandTimeoutMs, label: 'tests' });
    result.test = { exitCode: test.exitCode, tail: test.tail, logRef: test.logRef };
    if (test.exitCode !== 0 || test.timedOut) {
      return finish('tests-failed', `the test command ${test.timedOut ? 'timed out' : `exited with code ${test.exitCode}`} on the integrated tree`);
    }
    integrated = await exportIntegrated({ sandbox, runKey, baseSha });
  } finally {
    await CancellationScope.nonCancellable(() => destroySandbox(sandbox));
  }
  result.integratedSha = status.integratedSha = integrated.sha;
  if (integrated.sha === baseSha) return finish('unchanged', 'no worker changed anything; nothing to push');

  // ---- Push ----
  status.phase = 'pushing';
  const pushed = await pushResult({ url: req.repo.url, targetRef, sha: integrated.sha, expectedSha: targetSha });
  if (pushed.outcome === 'raced') return finish('raced', `not pushed: ${pushed.message}`);
  result.pushedSha = pushed.remoteSha;
  return finish('pushed', `${result.workers.length} worker(s) integrated, tests passed, pushed to ${targetRef}`);
}

function validate(input: LeaderRequestInput): LeaderRequest {
  try {
    return parseLeaderRequest(input);
  } catch (err) {
    if (err instanceof RequestError) throw ApplicationFailure.nonRetryable(err.message, 'InvalidRequest', err.problems);
    throw err;
  }
}

/**
 * A name for refs, branches and sandbox keys: readable, valid in a git ref, and distinct for
 * every run even when a workflow id is reused.
 */
function runKeyOf(workflowId: string, runId: string): string {
  const readable = workflowId.replace(/[^A-Za-z0-9_-]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 60) || 'run';
  return `${readable}-${runId.slice(0, 8)}`;
}

function minutes(n: number): number {
  return Math.round(n * 60_000);
}

function firstLine(text: string): string {
  const line = text.trim().split('\n')[0];
  return line.length > 72 ? `${line.slice(0, 69)}...` : line;
}

/** Runs fn over items with at most `limit` in flight; results keep the items' order. */
async function pool<T, R>(items: T[], limit: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  const lane = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i], i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  return results;
}
