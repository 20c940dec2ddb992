/**
 * The leader: resolves the base, passes the plan gate, fans out one worker per sub-task,
 * integrates their commits, runs the tests, passes the push gate and pushes with a lease.
 * Anything short of a push ends the workflow as failed, with the full RunResult attached to the
 * failure, so the Web UI shows red and clients still get the report.
 */
import {
  ApplicationFailure,
  ChildWorkflowFailure,
  condition,
  executeChild,
  getExternalWorkflowHandle,
  isCancellation,
  proxyActivities,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { Activities } from '../activities';
import { isFailure, rootMessage } from '../failures';
import {
  type GateDecision,
  type GateName,
  type Isolation,
  type LeaderRequest,
  type LeaderRequestInput,
  type RunOutcome,
  type RunResult,
  type SubTask,
  type WorkerReport,
  RequestError,
  parseLeaderRequest,
} from '../spec';
import {
  type GateReview,
  type RunStatus,
  type WorkerStatus,
  approveSignal,
  pauseSignal,
  rejectSignal,
  resumeSignal,
  statusQuery,
  workerProgressSignal,
} from './messages';
import { integrate } from './integration';
import { settlePlan } from './planning';
import { activityOptions } from './options';
import { firstLine } from './text';
import { type WorkerInput, workerWorkflow, workerWorkflowId } from './worker';

export async function leaderWorkflow(input: LeaderRequestInput): Promise<RunResult> {
  const req = validate(input);
  const info = workflowInfo();
  const runKey = runKeyOf(info.workflowId, info.runId);
  const targetRef = req.repo.targetRef ?? req.repo.baseRef;
  const heartbeatTimeoutMs = req.limits.heartbeatTimeoutSeconds * 1000;
  const commandTimeoutMs = minutes(req.limits.commandTimeoutMinutes);
  const { resolveBase, pushResult, checkIsolation } = proxyActivities<Activities>(activityOptions(heartbeatTimeoutMs));
  const started = Date.now();

  const status: RunStatus = {
    phase: 'resolving',
    objective: req.objective,
    repo: req.repo.url,
    targetRef,
    workers: (req.subTasks ?? []).map((t) => ({ id: t.id, state: 'queued', costUsd: 0, turns: 0 })),
    decisions: [],
    totals: { costUsd: 0, turns: 0, workersDone: 0, workersFailed: 0, elapsedMs: 0 },
  };
  const workerStatus = (id: string) => status.workers.find((w) => w.id === id);
  /** Dollars spent by every agent of the run: planner, workers, resolvers and repairers. */
  const spent = () =>
    (status.planning?.costUsd ?? 0) + status.workers.reduce((sum, w) => sum + w.costUsd, 0) + (status.integration?.costUsd ?? 0);
  setHandler(statusQuery, () => {
    const now = Date.now();
    for (const w of status.workers) if (w.state === 'running' || w.state === 'suspended') w.durationMs = now - (w.startedAt ?? now);
    status.totals = {
      costUsd: spent(),
      turns: status.workers.reduce((sum, w) => sum + w.turns, 0),
      workersDone: status.workers.filter((w) => w.state === 'done').length,
      workersFailed: status.workers.filter((w) => w.state === 'failed').length,
      elapsedMs: now - started,
    };
    return status;
  });

  // ---- People: gates, pause and resume ----
  let decision: GateDecision | undefined;
  setHandler(approveSignal, (a) => {
    const gate = status.gate;
    const by = a.by ?? 'unknown';
    if (!gate || gate.gate !== a.gate) {
      gate?.refused.push({ by, reason: `the ${a.gate} gate is not open` });
      return;
    }
    if (gate.gate === 'push' && a.sha !== gate.sha) {
      gate.refused.push({ by, reason: `approval names ${a.sha ?? 'no commit'}, but the commit to push is ${gate.sha}` });
      return;
    }
    decision = { gate: a.gate, approved: true, by, comment: a.comment, sha: gate.sha };
  });
  setHandler(rejectSignal, (r) => {
    if (status.gate?.gate === r.gate) decision = { gate: r.gate, approved: false, by: r.by ?? 'unknown', comment: r.reason };
    else status.gate?.refused.push({ by: r.by ?? 'unknown', reason: `the ${r.gate} gate is not open` });
  });
  const forward = async (workerId: string, send: (childId: string) => Promise<void>) => {
    const state = workerStatus(workerId)?.state;
    if (state === 'running' || state === 'suspended') await send(workerWorkflowId(info.workflowId, workerId));
  };
  setHandler(pauseSignal, (p) => forward(p.workerId, (id) => getExternalWorkflowHandle(id).signal(pauseSignal, p)));
  setHandler(resumeSignal, (r) => forward(r.workerId, (id) => getExternalWorkflowHandle(id).signal(resumeSignal, r)));
  setHandler(workerProgressSignal, (p) => {
    const ws = workerStatus(p.id);
    if (ws && (ws.state === 'running' || ws.state === 'suspended')) {
      Object.assign(ws, { state: p.state, reason: p.reason, question: p.question, costUsd: p.costUsd, turns: p.turns });
    }
  });

  /** Waits at a gate; returns normally when it is passed, ends the run when it is not. */
  const passGate = async (name: GateName, review: Omit<GateReview, 'gate' | 'openedAt' | 'expiresAt' | 'onTimeout' | 'refused'>) => {
    const gate = req.gates[name];
    if (gate.mode === 'auto') return;
    const timeoutMs = minutes(gate.timeoutMinutes);
    status.phase = name === 'plan' ? 'awaiting-plan-approval' : 'awaiting-push-approval';
    status.gate = { gate: name, openedAt: Date.now(), expiresAt: Date.now() + timeoutMs, onTimeout: gate.onTimeout, refused: [], ...review };
    decision = undefined;
    const decided = await condition(() => decision !== undefined, timeoutMs);
    const taken: GateDecision = decided
      ? decision!
      : { gate: name, approved: gate.onTimeout === 'approve', by: 'timeout', expired: true, sha: status.gate.sha };
    status.decisions.push(taken);
    result.decisions = status.decisions;
    status.gate = undefined;
    if (taken.approved) return;
    if (taken.expired) finish('failed', `the ${name} gate expired after ${gate.timeoutMinutes} minute(s) without a decision`);
    finish('rejected', `${taken.by} rejected the ${name} gate: ${taken.comment ?? 'no reason given'}`);
  };

  /**
   * Runs one worker child and keeps its status line current; a failed child becomes a failed
   * report. No worker starts, first or redone, once the run's budget is spent.
   */
  const runWorker = async (given: WorkerInput, ws: WorkerStatus): Promise<WorkerReport> => {
    const runBudget = req.limits.runBudgetUsd;
    if (runBudget !== undefined && spent() >= runBudget) {
      const reason = `not started: the run's budget of $${runBudget.toFixed(2)} is spent ($${spent().toFixed(2)})`;
      Object.assign(ws, { state: 'failed', reason });
      return { workerId: given.task.id, status: 'failed', reason, commits: 0, filesChanged: 0, isolation: 'none', durationMs: 0, costUsd: 0, turns: 0, runs: 0 };
    }
    Object.assign(ws, { state: 'running', startedAt: Date.now() });
    let report: WorkerReport;
    try {
      report = await executeChild(workerWorkflow, { workflowId: workerWorkflowId(info.workflowId, given.task.id), args: [given] });
    } catch (err) {
      if (isCancellation(err) || !(err instanceof ChildWorkflowFailure)) throw err;
      report = {
        workerId: given.task.id,
        status: 'failed',
        reason: rootMessage(err),
        commits: 0,
        filesChanged: 0,
        isolation: 'none',
        durationMs: Date.now() - (ws.startedAt ?? Date.now()),
        costUsd: ws.costUsd,
        turns: ws.turns,
        runs: 0,
      };
    }
    Object.assign(ws, {
      state: report.status,
      reason: report.reason,
      question: undefined,
      commits: report.commits,
      filesChanged: report.filesChanged,
      durationMs: report.durationMs,
      costUsd: report.costUsd,
      turns: report.turns,
    });
    return report;
  };

  const result: RunResult = { outcome: 'failed', message: '', baseSha: '', targetRef, workers: [], costUsd: 0, decisions: [] };
  /** Ends the run: returns the result when it pushed (or had nothing to), throws otherwise. */
  const finish = (outcome: RunOutcome, message: string): RunResult => {
    result.costUsd = spent();
    // Sandboxes that ran unisolated (the worker's FLOTILLA_ISOLATION=none) are said in the result itself.
    if (result.isolation === 'none') message += ' (WARNING: the sandboxes were not isolated: isolation none)';
    Object.assign(result, { outcome, message });
    Object.assign(status, { outcome, message, phase: outcome === 'pushed' || outcome === 'unchanged' ? 'done' : 'failed' });
    if (status.phase === 'done') return result;
    throw ApplicationFailure.create({ type: outcome, message, nonRetryable: true, details: [result] });
  };

  try {
    // Refuse before anything starts when this worker would run the sandboxes unisolated without being told to.
    const checked: { isolation: Isolation } | { refused: string } = await checkIsolation({ key: `${runKey}/preflight`, ...req.sandbox }).catch(
      (err: unknown) => {
        if (isFailure(err, 'IsolationUnavailable')) return { refused: rootMessage(err) };
        throw err;
      },
    );
    if ('refused' in checked) return finish('failed', checked.refused);
    status.isolation = result.isolation = checked.isolation;
    const { baseSha, targetSha } = await resolveBase({ runKey, url: req.repo.url, baseRef: req.repo.baseRef, targetRef });
    status.baseSha = result.baseSha = baseSha;
    const settled = await settlePlan(req, { runKey, baseSha, status, heartbeatTimeoutMs, timeoutMs: minutes(req.limits.workerTimeoutMinutes) });
    const plan = settled.request;
    result.planning = status.planning = settled.planning;
    status.workers = plan.subTasks.map((t) => ({ id: t.id, state: 'queued', costUsd: 0, turns: 0 }));
    await passGate('plan', {
      plan: plan.subTasks.map((t) => ({
        id: t.id,
        ownedPaths: t.ownedPaths,
        agent: (t.agent ?? plan.agent ?? plan.planner)!.kind,
        prompt: firstLine(t.prompt),
      })),
    });

    // ---- Fan out ----
    status.phase = 'running';
    const runBudget = plan.limits.runBudgetUsd;
    const workerBudget = plan.limits.workerBudgetUsd ?? (runBudget === undefined ? undefined : runBudget / plan.subTasks.length);
    const workerInput = (task: SubTask): WorkerInput => ({
      runKey,
      objective: req.objective,
      task: { id: task.id, prompt: task.prompt, ownedPaths: task.ownedPaths, sharedPaths: plan.sharedPaths },
      // A planned sub-task runs the default agent, or the planner's when there is none.
      agent: (task.agent ?? plan.agent ?? plan.planner)!,
      baseSha,
      sandbox: req.sandbox,
      setupCmd: req.setupCmd,
      workerTimeoutMs: minutes(req.limits.workerTimeoutMinutes),
      commandTimeoutMs,
      heartbeatTimeoutMs,
      budgetUsd: workerBudget,
      maxTurns: req.limits.maxTurns,
      suspendTimeoutMs: minutes(req.limits.suspendTimeoutMinutes),
    });
    result.workers = await pool(plan.subTasks, plan.limits.maxParallel, (task, i) => runWorker(workerInput(task), status.workers[i]));
    const failed = result.workers.filter((w) => w.status !== 'done');
    if (failed.length > 0) {
      return finish('failed', `${failed.length} of ${plan.subTasks.length} workers failed: ${failed.map((w) => `${w.workerId}: ${w.reason}`).join('; ')}`);
    }

    // ---- Integrate and test ----
    // A redone sub-task is a worker like the others: in the status, pausable, counted in the budget.
    const redoWorker = (given: WorkerInput) => {
      const ws: WorkerStatus = { id: given.task.id, state: 'queued', costUsd: 0, turns: 0 };
      status.workers.push(ws);
      return runWorker(given, ws);
    };
    const integrated = await integrate({ req: plan, runKey, baseSha, status, result, commandTimeoutMs, heartbeatTimeoutMs, workerInput, runWorker: redoWorker });
    if (!integrated.ok) return finish(integrated.outcome, integrated.message);
    result.integratedSha = status.integratedSha = integrated.sha;
    if (integrated.sha === baseSha) return finish('unchanged', 'no worker changed anything; nothing to push');

    // ---- Approve and push ----
    await passGate('push', { sha: integrated.sha, diffstat: integrated.diffstat, testSummary: integrated.testSummary });
    status.phase = 'pushing';
    const pushed = await pushResult({ url: req.repo.url, targetRef, sha: integrated.sha, expectedSha: targetSha });
    if (pushed.outcome === 'raced') return finish('raced', `not pushed: ${pushed.message}`);
    result.pushedSha = pushed.remoteSha;
    return finish('pushed', `${result.workers.length} worker(s) integrated, tests passed, pushed to ${targetRef}`);
  } catch (err) {
    if (isCancellation(err)) {
      Object.assign(status, { phase: 'cancelled', gate: undefined, message: 'cancelled; nothing was pushed' });
      for (const w of status.workers) if (w.state !== 'done' && w.state !== 'failed') w.state = 'cancelled';
    }
    throw err;
  }
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
