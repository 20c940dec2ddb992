/**
 * The leader: resolves the base, passes the plan gate, fans out one worker per sub-task,
 * integrates their commits, runs the tests, passes the push gate and pushes with a lease.
 * Anything short of a push ends the workflow as failed, with the full RunResult attached to the
 * failure, so the Web UI shows red and clients still get the report.
 */
import {
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  ChildWorkflowFailure,
  ParentClosePolicy,
  TemporalFailure,
  allHandlersFinished,
  condition,
  isCancellation,
  patched,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  startChild,
  uuid4,
  workflowInfo,
} from '@temporalio/workflow';
import type { Activities } from '../../activities';
import { isFailure, permanent, rootMessage } from '../../contracts/failures';
import {
  type GateName,
  type LeaderRequest,
  type LeaderRequestInput,
  type SubTask,
  RequestError,
  currentLimits,
  parseLeaderRequest,
} from '../../contracts/request';
import { type Isolation, type RunOutcome, type RunResult, type SubTaskReport } from '../../contracts/reports';
import { runKeyOf } from '../../contracts/names';
import { type Crew, openInbox } from './inbox';
import { type GateReview, type RunStatus, type SubTaskStatus, statusQuery } from '../../contracts/messages';
import { integrate } from '../integration/integration';
import { settlePlan } from './planning';
import { msOfMinutes, msOfSeconds } from '../durations';
import { activityOptions } from '../options';
import { PATCHES } from '../patches';
import { clip, excerpt, firstLine } from '../../contracts/text';
import { keepSearchAttributesCurrent } from './visibility';
import { type SubTaskInput, workerWorkflow, subTaskWorkflowId } from '../subtask/subtask';

export async function leaderWorkflow(input: LeaderRequestInput): Promise<RunResult> {
  const info = workflowInfo();
  const runKey = runKeyOf(info.workflowId, info.runId);

  // The status exists, and every handler is registered, before the first await.
  const status: RunStatus = {
    phase: 'resolving',
    objective: '',
    repo: '',
    targetRef: '',
    workers: [],
    decisions: [],
    refusals: [],
    refusedCount: 0,
    startedAt: Date.now(),
    totals: { costUsd: 0, turns: 0, workersDone: 0, workersFailed: 0 },
  };
  /** Dollars spent by every agent of the run: planner, workers, resolvers and repairers. */
  const spent = () =>
    (status.planning?.costUsd ?? 0) +
    status.workers.reduce((sum, w) => sum + w.costUsd, 0) +
    (status.integration?.costUsd ?? 0);
  // Runs started before search attributes existed do not upsert them (their namespace may lack them).
  const publishSearchAttributes = patched(PATCHES.searchAttributes.id)
    ? keepSearchAttributesCurrent(status, spent)
    : () => undefined;
  // Pure: a query must not change the state it reports. Durations are the client's to compute.
  setHandler(statusQuery, () => ({
    ...status,
    totals: {
      costUsd: spent(),
      turns: status.workers.reduce((sum, w) => sum + w.turns, 0),
      workersDone: status.workers.filter((w) => w.state === 'done').length,
      workersFailed: status.workers.filter((w) => w.state === 'failed').length,
    },
  }));

  // ---- People and workers: every message goes through the inbox ----
  const crew: Crew = { status, children: new Map(), tokens: new Map(), over: false };
  openInbox(crew);

  const req = await parseRequest(input);
  const targetRef = req.repo.targetRef ?? req.repo.baseRef;
  Object.assign(status, {
    objective: req.objective,
    repo: req.repo.url,
    targetRef,
    workers: (req.subTasks ?? []).map((t) => ({ id: t.id, state: 'queued', costUsd: 0, turns: 0 })),
  });
  const heartbeatTimeoutMs = msOfSeconds(req.limits.heartbeatTimeoutSeconds);
  const commandTimeoutMs = msOfMinutes(req.limits.commandTimeoutMinutes);
  const { checkIsolation, resolveBase, fetchOracle, pushResult } = proxyActivities<Activities>(
    activityOptions(heartbeatTimeoutMs),
  );

  /** Waits at a gate; returns normally when it is passed, ends the run when it is not. */
  const passGate = async (
    name: GateName,
    review: Omit<GateReview, 'gate' | 'openedAt' | 'expiresAt' | 'onTimeout' | 'refused'>,
  ) => {
    const gate = req.gates[name];
    if (gate.mode === 'auto') return;
    const timeoutMs = msOfMinutes(gate.timeoutMinutes);
    status.phase = name === 'plan' ? 'awaiting-plan-approval' : 'awaiting-push-approval';
    status.gate = {
      gate: name,
      openedAt: Date.now(),
      expiresAt: Date.now() + timeoutMs,
      onTimeout: gate.onTimeout,
      refused: [],
      ...review,
    };
    crew.decision = undefined;
    setCurrentDetails(gateDetails(info.workflowId, status.gate));
    const decided = await condition(() => crew.decision !== undefined, timeoutMs, {
      summary: `${name} gate: waiting for a person`,
    });
    setCurrentDetails('');
    const taken = decided
      ? crew.decision!
      : { gate: name, approved: gate.onTimeout === 'approve', by: 'timeout', expired: true, sha: status.gate.sha };
    status.decisions.push(taken);
    result.decisions = status.decisions;
    status.gate = undefined;
    crew.decision = undefined;
    if (taken.approved) return;
    if (taken.expired)
      finish('failed', `the ${name} gate expired after ${gate.timeoutMinutes} minute(s) without a decision`);
    finish('rejected', `${taken.by} rejected the ${name} gate: ${taken.comment ?? 'no reason given'}`);
  };

  /**
   * Runs one worker child and keeps its status line current; a failed child becomes a failed
   * report. No worker starts, first or redone, once the run's budget is spent.
   */
  const runWorker = async (given: SubTaskInput, ws: SubTaskStatus): Promise<SubTaskReport> => {
    const runBudget = req.limits.runBudgetUsd;
    if (runBudget !== undefined && spent() >= runBudget) {
      const reason = `not started: the run's budget of $${runBudget.toFixed(2)} is spent ($${spent().toFixed(2)})`;
      Object.assign(ws, { state: 'failed', reason });
      return {
        workerId: given.task.id,
        status: 'failed',
        reason,
        commits: 0,
        filesChanged: 0,
        isolation: 'none',
        durationMs: 0,
        costUsd: 0,
        turns: 0,
        runs: 0,
      };
    }
    Object.assign(ws, { state: 'running', startedAt: Date.now() });
    crew.tokens.set(given.progressToken, ws);
    let report: SubTaskReport;
    try {
      // REQUEST_CANCEL: a leader that is terminated still lets its workers destroy their sandboxes.
      const child = await startChild(workerWorkflow, {
        workflowId: subTaskWorkflowId(info.workflowId, given.task.id),
        args: [given],
        parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
        staticSummary: `worker ${given.task.id}: ${firstLine(given.task.prompt)}`,
        staticDetails: `**Sub-task** ${given.task.id} of run ${info.workflowId}\n**Agent**: ${given.agent.kind}\n**Owns**: ${given.task.ownedPaths.join(', ')}\n\n${given.task.prompt}`,
      });
      crew.children.set(given.task.id, child);
      report = await child.result();
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
      ...(report.host !== undefined && {
        host: report.host,
        checkpoint: report.checkpoint,
        reprovisions: report.reprovisions?.length ?? 0,
      }),
    });
    return brief(report);
  };

  /**
   * A worker's report as the result carries it: its text shrinks with the number of workers, so
   * a hundred reports still fit one 64 KiB payload; the full output stays in its logRef.
   */
  const brief = (r: SubTaskReport): SubTaskReport => {
    const share = (total: number, lo: number, hi: number) =>
      Math.min(hi, Math.max(lo, Math.floor(total / Math.max(1, status.workers.length))));
    const tail = share(12 * 1024, 64, 4096);
    const reason = share(6 * 1024, 64, 1024);
    return {
      ...r,
      ...(r.reason !== undefined && { reason: excerpt(r.reason, Math.ceil(reason / 2), Math.floor(reason / 2)) }),
      ...(r.tail !== undefined && { tail: excerpt(r.tail, Math.ceil(tail / 4), Math.floor((3 * tail) / 4)) }),
      ...(r.outOfScope && { outOfScope: r.outOfScope.slice(0, 3).map((p) => excerpt(p, 40, 40)) }),
    };
  };

  const result: RunResult = {
    outcome: 'failed',
    message: '',
    baseSha: '',
    targetRef,
    workers: [],
    costUsd: 0,
    decisions: [],
    refusals: [],
    refusedCount: 0,
  };
  /** Ends the run: returns the result when it pushed (or had nothing to), throws otherwise. */
  const finish = (outcome: RunOutcome, message: string): RunResult => {
    // Sandboxes that ran unisolated (the worker's FLOTILLA_ISOLATION=none) are said in the result itself.
    if (result.isolation === 'none') message += ' (WARNING: the sandboxes were not isolated: isolation none)';
    Object.assign(result, {
      outcome,
      message,
      costUsd: spent(),
      refusals: status.refusals,
      refusedCount: status.refusedCount,
    });
    Object.assign(status, {
      outcome,
      message,
      endedAt: Date.now(),
      phase: outcome === 'pushed' || outcome === 'unchanged' ? 'done' : 'failed',
    });
    if (status.phase === 'done') return result;
    throw ApplicationFailure.create({ type: outcome, message, nonRetryable: true, details: [result] });
  };

  try {
    // Refuse before anything starts when this worker would run the sandboxes unisolated without being told to.
    const checked: { isolation: Isolation } | { refused: string } = await checkIsolation({
      key: `${runKey}/preflight`,
      ...req.sandbox,
    }).catch((err: unknown) => {
      if (isFailure(err, 'IsolationUnavailable')) return { refused: rootMessage(err) };
      throw err;
    });
    if ('refused' in checked) return finish('failed', checked.refused);
    status.isolation = result.isolation = checked.isolation;
    const { baseSha, targetSha } = await resolveBase({
      runKey,
      url: req.repo.url,
      baseRef: req.repo.baseRef,
      targetRef,
    });
    status.baseSha = result.baseSha = baseSha;
    // Before any agent spends anything: hidden tests that cannot be fetched or used end the run here.
    const oracle =
      req.oracle &&
      (await fetchOracle({ runKey, url: req.oracle.repo, ref: req.oracle.ref }).catch((err) => err as Error));
    if (oracle instanceof ActivityFailure && oracle.cause instanceof ApplicationFailure)
      return finish('failed', oracle.cause.message);
    if (oracle instanceof Error) throw oracle;
    const oracleSha = oracle?.sha;
    const settled = await settlePlan(req, {
      runKey,
      baseSha,
      status,
      heartbeatTimeoutMs,
      timeoutMs: msOfMinutes(req.limits.agentTimeoutMinutes),
    });
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
    const workerBudget =
      plan.limits.subTaskBudgetUsd ?? (runBudget === undefined ? undefined : runBudget / plan.subTasks.length);
    const workerInput = (task: SubTask): SubTaskInput => ({
      runKey,
      objective: req.objective,
      task: { id: task.id, prompt: task.prompt, ownedPaths: task.ownedPaths, sharedPaths: plan.sharedPaths },
      // A planned sub-task runs the default agent, or the planner's when there is none.
      agent: (task.agent ?? plan.agent ?? plan.planner)!,
      baseSha,
      sandbox: req.sandbox,
      setupCmd: req.setupCmd,
      workerTimeoutMs: msOfMinutes(req.limits.agentTimeoutMinutes),
      commandTimeoutMs,
      heartbeatTimeoutMs,
      budgetUsd: workerBudget,
      maxTurns: req.limits.maxTurns,
      suspendTimeoutMs: msOfMinutes(req.limits.suspendTimeoutMinutes),
      policy: req.policy,
      progressToken: uuid4(),
      // Absent from requests parsed before these limits existed: the worker then takes the defaults.
      hostTimeoutMs: msOfSeconds(req.limits.hostTimeoutSeconds),
      checkpointIntervalMs: msOfSeconds(req.limits.checkpointIntervalSeconds),
    });
    result.workers = await pool(plan.subTasks, plan.limits.maxParallel, (task, i) =>
      runWorker(workerInput(task), status.workers[i]),
    );
    const failed = result.workers.filter((w) => w.status !== 'done');
    if (failed.length > 0) {
      const named = failed.slice(0, 3).map((w) => `${w.workerId}: ${w.reason}`);
      if (failed.length > named.length) named.push(`${failed.length - named.length} more in the result`);
      return finish('failed', `${failed.length} of ${plan.subTasks.length} workers failed: ${named.join('; ')}`);
    }

    // ---- Integrate and test ----
    // A redone sub-task is a worker like the others: in the status, pausable, counted in the budget.
    // Its report joins the result's workers once integration is over (integration walks that list).
    const redone: SubTaskReport[] = [];
    const redoWorker = async (given: SubTaskInput) => {
      const ws: SubTaskStatus = { id: given.task.id, state: 'queued', costUsd: 0, turns: 0 };
      status.workers.push(ws);
      const report = await runWorker(given, ws);
      redone.push(report);
      return report;
    };
    let integrated: Awaited<ReturnType<typeof integrate>>;
    try {
      integrated = await integrate({
        req: plan,
        runKey,
        baseSha,
        oracleSha,
        status,
        result,
        commandTimeoutMs,
        heartbeatTimeoutMs,
        subTaskInput: workerInput,
        runSubTask: redoWorker,
      });
    } finally {
      result.workers.push(...redone);
    }
    if (!integrated.ok) return finish(integrated.outcome, integrated.message);
    result.integratedSha = status.integratedSha = integrated.sha;
    if (integrated.sha === baseSha) return finish('unchanged', 'no worker changed anything; nothing to push');

    // ---- Approve and push ----
    await passGate('push', { sha: integrated.sha, diffstat: integrated.diffstat, testSummary: integrated.testSummary });
    // Not cancellable: once started, the push runs to its end, so the result can say whether it landed.
    status.phase = 'pushing';
    const pushed = await CancellationScope.nonCancellable(() =>
      pushResult({ url: req.repo.url, targetRef, sha: integrated.sha, expectedSha: targetSha }),
    );
    if (pushed.outcome === 'raced') return finish('raced', `not pushed: ${pushed.message}`);
    result.pushedSha = pushed.remoteSha;
    return finish('pushed', `${result.workers.length} worker(s) integrated, tests passed, pushed to ${targetRef}`);
  } catch (err) {
    if (status.endedAt !== undefined) throw err; // finish() already ended the run
    if (isCancellation(err)) {
      Object.assign(status, {
        phase: 'cancelled',
        gate: undefined,
        endedAt: Date.now(),
        message: 'cancelled; nothing was pushed',
      });
      for (const w of status.workers) if (w.state !== 'done' && w.state !== 'failed') w.state = 'cancelled';
      throw err;
    }
    // An activity that failed for good (a permanent failure, or retries spent): the run ends, saying
    // why in one line. Anything else is a bug in this code: it fails the task, to be fixed and replayed.
    if (!(err instanceof TemporalFailure)) throw err;
    return finish('failed', `${phaseName(status.phase)} failed: ${failureLine(err)}`);
  } finally {
    publishSearchAttributes(); // the run's end, before it closes
    // Handlers waiting on a worker stop waiting; every handler finishes before the run returns.
    crew.over = true;
    await CancellationScope.nonCancellable(() => condition(allHandlersFinished));
  }
}

function phaseName(phase: RunStatus['phase']): string {
  return phase === 'resolving' ? 'resolving the base' : phase;
}

/** The innermost cause of a failure, with its type: "RemoteRefused: branch nope does not exist". */
function failureLine(err: unknown): string {
  let e: unknown = err;
  while ((e instanceof ActivityFailure || e instanceof ChildWorkflowFailure) && e.cause) e = e.cause;
  const line = (text: string) => clip(text.trim().split('\n')[0], 500);
  if (e instanceof ApplicationFailure) return `${e.type ? `${e.type}: ` : ''}${line(e.message)}`;
  return line(e instanceof Error ? e.message : String(e));
}

/**
 * The request, validated and defaulted by an activity whose result is in history, so that a later
 * release's schema cannot change a run in flight. Runs started before that parse it here, as
 * they did then. A refused request ends the run with the refusal itself.
 */
async function parseRequest(input: LeaderRequestInput): Promise<LeaderRequest> {
  if (!patched(PATCHES.requestParsedByActivity.id)) {
    try {
      return parseLeaderRequest(input);
    } catch (err) {
      if (err instanceof RequestError) throw permanent('InvalidRequest', err.message, { problems: err.problems });
      throw err;
    }
  }
  const { parseRequest: parse } = proxyActivities<Activities>({
    startToCloseTimeout: '1 minute',
    scheduleToCloseTimeout: '10 minutes',
  });
  try {
    // A request parsed by an older release, in this run's history, has the limits' old names.
    const req = await parse(input);
    return { ...req, limits: currentLimits(req.limits) };
  } catch (err) {
    if (
      err instanceof ActivityFailure &&
      err.cause instanceof ApplicationFailure &&
      err.cause.type === 'InvalidRequest'
    )
      throw err.cause;
    throw err;
  }
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

/** The Web UI's current details at an open gate: what waits, and the exact command that passes it. */
function gateDetails(runId: string, gate: GateReview): string {
  const approve = `flotilla approve ${runId} --gate ${gate.gate}${gate.sha ? ` --sha ${gate.sha}` : ''}`;
  return [
    `**Waiting for a person at the ${gate.gate} gate** (on timeout: ${gate.onTimeout}, at ${new Date(gate.expiresAt).toISOString()})`,
    ...(gate.testSummary ? [`Tests: ${gate.testSummary}`] : []),
    `Approve: \`${approve}\``,
    `Reject: \`flotilla reject ${runId} --gate ${gate.gate} --reason "why"\``,
  ].join('\n');
}
