/**
 * Adopting a failed run's work into the run that continues it (`flotilla continue`). What was
 * integrated and which sub-tasks finished is read from Temporal's own record of the failed run
 * (its result), never from the caller; each commit is checked on the host to be what the failed
 * run's staging refs hold, and a finished sub-task's commits are verified again against this
 * run's plan (lineage, paths, policy) before they are named under this run's refs.
 */
import { Context } from '@temporalio/activity';
import { type WorkflowHandle, WorkflowFailedError, WorkflowNotFoundError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { startedWith } from '../client/continue';
import { withEveryReport } from '../client/result';
import { permanent } from '../contracts/failures';
import {
  STATUS_PAGE_MAX,
  type SubTaskStatus,
  handOverQuery,
  pageOfLines,
  reportsQuery,
  statusQuery,
} from '../contracts/messages';
import { PART_BYTES } from '../contracts/plan-parts';
import type { HandOver } from '../contracts/rollover';
import { runKeyOf, subTaskOf } from '../contracts/names';
import { clip, pieces } from '../contracts/text';
import type { RunResult, SubTaskReport } from '../contracts/reports';
import { CommitPolicy } from '../contracts/request';
import { isAncestor } from '../git/merge';
import { type StagingRepo, runRef } from '../git/staging';
import { verifyWork } from '../git/verify';
import { pageOfReports } from '../workflows/leader/reports';
import type { ActivityDeps } from './deps';

interface AdoptInput {
  runKey: string;
  baseSha: string;
  /** The failed run's workflow id. */
  runId: string;
  /** This run's repository: only a run of the same one can be continued (absent in runs from before the check). */
  repoUrl?: string;
  /** This run's plan: work is reused by sub-task id, within these paths. */
  subTasks: { id: string; ownedPaths: string[] }[];
  sharedPaths: string[];
  policy?: Partial<CommitPolicy>;
  /**
   * The page of `subTasks` to adopt, ADOPT_PAGE of them in plan order, so that no result is
   * larger than a page of reports. Absent (a run from before pages): every one.
   */
  page?: number;
  /** From page 1 on: the head page 0 adopted, under this run's integration ref. */
  head?: { ref: string; sha: string };
}

interface Adoption {
  head?: { ref: string; sha: string };
  integrated: SubTaskReport[];
  finished: SubTaskReport[];
  failed: { id: string; reason: string }[];
  refused: { id: string; reason: string }[];
  /** The page to ask for next, while there is one. */
  nextPage?: number;
}

/**
 * Sub-tasks adopted per call. A hundred reports fit one 64 KiB payload: the failed run's reports
 * are as brief as its result's (briefReport), which fits a hundred.
 */
export const ADOPT_PAGE = 100;

export function continueActivities(deps: ActivityDeps) {
  return {
    async adoptWork(input: AdoptInput): Promise<Adoption> {
      const { result, runKey: from } = await failedRun(input.runId, input.repoUrl);
      const staging = await deps.staging(from);
      await deps.staging(input.runKey);
      const page = input.page ?? 0;
      const end = input.page === undefined ? input.subTasks.length : (page + 1) * ADOPT_PAGE;
      const tasks = new Set(input.subTasks.slice(page * ADOPT_PAGE, end).map((t) => t.id));
      const latest = new Map<string, SubTaskReport>();
      for (const w of result.workers) if (tasks.has(subTaskOf(w.workerId))) latest.set(subTaskOf(w.workerId), w);
      const adoption: Adoption = { integrated: [], finished: [], failed: [], refused: [] };
      if (input.subTasks.length > end) adoption.nextPage = page + 1;
      const onHead = page === 0 ? await adoptHead(staging, from, input, result) : await stillOnHead(staging, input);
      if (onHead && page === 0) adoption.head = onHead;
      for (const [id, w] of latest) {
        if (w.status !== 'done') {
          adoption.failed.push({ id, reason: clip(w.reason ?? `it ended ${w.status}`, 500) });
          continue;
        }
        const checked = await checkFinished(staging, from, input, result.baseSha, id, w);
        if (typeof checked === 'string') adoption.refused.push({ id, reason: checked });
        else if (onHead && result.head?.integrated.includes(id)) adoption.integrated.push(checked);
        else adoption.finished.push(checked);
      }
      return adoption;
    },

    /**
     * A page of what the run this one rolled over from did (contracts/rollover.ts): its status
     * lines, its reports, what it carried (a page of its JSON) or a part of its plan
     * (request.planParts; `page` is the part's index plus one). With `handedOver`, read from that
     * run's handOver query, once per worker and run (each query of a closed run replays its
     * history); a run that rolled over before it answers its status and reports queries, a
     * query per page. Only a run of this leader's own workflow id is read.
     */
    async rolledOverPage(input: RolledOverInput): Promise<RolledOverPage> {
      const { client, info } = Context.current();
      const leader = info.workflowExecution;
      if (!leader) throw permanent('InvalidRequest', 'rolledOverPage runs for a leader workflow only');
      const handle = client.workflow.getHandle(leader.workflowId, input.runId);
      if (input.handedOver) return pageHandedOver(await handedOver(handle, input.runId), input);
      if (input.kind === 'reports') {
        const { reports, pages } = await handle.query(reportsQuery, { page: input.page });
        return { reports, pages };
      }
      if (input.kind !== 'lines')
        throw permanent('InvalidRequest', `rolledOverPage: ${input.kind} is read handed over only`);
      const status = await handle.query(statusQuery, { page: input.page, pageSize: STATUS_PAGE_MAX });
      return { lines: status.workers, pages: status.workersPage?.pages ?? 1 };
    },
  };
}

interface RolledOverInput {
  runId: string;
  kind: 'lines' | 'reports' | 'carry' | 'planPart';
  page: number;
  handedOver?: boolean;
}

/** A page of a rolled-over run's status lines, reports, carry or plan part, and how many pages there are. */
export interface RolledOverPage {
  lines?: SubTaskStatus[];
  reports?: SubTaskReport[];
  text?: string;
  pages: number;
}

/** The page asked of what a run handed on, cut as the run's own queries would cut it. */
function pageHandedOver(handOver: HandOver, input: RolledOverInput): RolledOverPage {
  const { kind, page } = input;
  if (kind === 'lines') {
    const { workers, workersPage } = pageOfLines(handOver.lines, { page, pageSize: STATUS_PAGE_MAX });
    return { lines: workers, pages: workersPage?.pages ?? 1 };
  }
  if (kind === 'reports') {
    const { reports, pages } = pageOfReports(handOver.reports, { page });
    return { reports, pages };
  }
  const texts = kind === 'carry' ? pieces(JSON.stringify(handOver.carry), PART_BYTES) : handOver.parts;
  return { ...(texts[page - 1] !== undefined && { text: texts[page - 1] }), pages: texts.length };
}

/** What runs handed on, by run, as this worker read them: the few read back at once. */
const handOvers = new Map<string, Promise<HandOver>>();
const HAND_OVERS_KEPT = 4;

function handedOver(handle: WorkflowHandle, runId: string): Promise<HandOver> {
  const key = `${handle.workflowId}/${runId}`;
  let read = handOvers.get(key);
  if (!read) {
    read = readHandOver(handle);
    handOvers.set(key, read);
    read.catch(() => handOvers.delete(key));
    for (const oldest of handOvers.keys()) if (handOvers.size > HAND_OVERS_KEPT) handOvers.delete(oldest);
  }
  return read;
}

async function readHandOver(handle: WorkflowHandle): Promise<HandOver> {
  let json = '';
  for (let page = 1, pages = 1; page <= pages; page++) {
    const got = await handle.query(handOverQuery, { page });
    json += got.text;
    pages = got.pages;
  }
  return JSON.parse(json) as HandOver;
}

/** The failed run's result, as Temporal holds it, and its run key; refused unless it ended without pushing. */
async function failedRun(runId: string, repoUrl?: string): Promise<{ result: RunResult; runKey: string }> {
  const { client } = Context.current();
  const handle = client.workflow.getHandle(runId);
  const refuse = (why: string) => permanent('InvalidRequest', `continues.runId: ${why}`);
  const described = await handle.describe().catch((err: unknown) => {
    throw err instanceof WorkflowNotFoundError ? refuse(`no run with id ${runId}`) : err;
  });
  if (described.type !== 'leaderWorkflow') throw refuse(`${runId} is a ${described.type}, not a run`);
  if (described.status.name === 'RUNNING') throw refuse(`run ${runId} is still running; continue it once it has ended`);
  // Its work goes where this run pushes: never from another repository's run, whatever the request says.
  const theirs = repoUrl && (await startedWith(client, runId, described.runId))?.repo?.url;
  if (repoUrl && theirs !== repoUrl)
    throw refuse(
      `run ${runId} worked on ${theirs ?? 'no repository'}, not ${repoUrl}; a run continues only a run of its own repository`,
    );
  const result = await handle.result().then(
    (r: RunResult) => r,
    (err: unknown) => resultOfFailure(err),
  );
  if (!result) throw refuse(`run ${runId} ended (${described.status.name}) without a result to continue from`);
  if (result.outcome === 'pushed' || result.outcome === 'unchanged' || result.outcome === 'pr-opened')
    throw refuse(`run ${runId} ended ${result.outcome}; there is nothing to continue`);
  // A result of more than a hundred reports carries the rest by reference: its reports query. Not
  // finding them is retried: a worker that can replay the failed run may be starting.
  const whole = result.workersOmitted ? await withEveryReport(handle, result) : result;
  if (whole.workersOmitted) throw new Error(`the reports of run ${runId} could not be read (its reports query)`);
  // A run that rolled over keeps the run key of its chain's first run (its workflowInfo's firstExecutionRunId).
  const firstRunId = described.raw.workflowExecutionInfo?.firstRunId || described.runId;
  return { result: whole, runKey: runKeyOf(runId, firstRunId) };
}

/** A failed run's result travels in its failure's details (see Run.fail in the leader). */
function resultOfFailure(err: unknown): RunResult | undefined {
  if (!(err instanceof WorkflowFailedError)) throw err;
  const details = err.cause instanceof ApplicationFailure ? err.cause.details?.[0] : undefined;
  const r = details as Partial<RunResult> | undefined;
  return r && Array.isArray(r.workers) && typeof r.outcome === 'string' ? (r as RunResult) : undefined;
}

/**
 * The failed run's integration head, named for this run, when it is still what the failed run's
 * ref holds, descends from this run's base and holds only sub-tasks of this plan.
 */
async function adoptHead(staging: StagingRepo, from: string, input: AdoptInput, result: RunResult) {
  const head = result.head;
  if (!head?.integrated.length) return undefined;
  if (head.ref !== runRef(from, 'integration') || (await staging.revParse(head.ref)) !== head.sha) return undefined;
  if (!head.integrated.every((id) => input.subTasks.some((t) => t.id === id))) return undefined;
  if (!(await isAncestor(staging.dir, input.baseSha, head.sha))) return undefined;
  const ref = runRef(input.runKey, 'integration');
  await staging.setRef(ref, head.sha);
  return { ref, sha: head.sha };
}

/** The head page 0 adopted, while this run's integration ref still holds it (it is this run's own ref). */
async function stillOnHead(staging: StagingRepo, input: AdoptInput) {
  const head = input.head;
  if (!head || head.ref !== runRef(input.runKey, 'integration')) return undefined;
  return (await staging.revParse(head.ref)) === head.sha ? head : undefined;
}

/**
 * A finished sub-task's report, its commits named under this run's refs after they are checked:
 * what the failed run's ref holds, verified again within this plan's paths. Or why not.
 */
async function checkFinished(
  staging: StagingRepo,
  from: string,
  input: AdoptInput,
  oldBase: string,
  id: string,
  w: SubTaskReport,
): Promise<SubTaskReport | string> {
  const spent = { costUsd: 0, turns: 0, runs: 0, durationMs: 0 };
  if (!w.headSha || w.commits === 0) return { ...w, ...spent, workerId: id, ref: undefined };
  const theirs = runRef(from, `workers/${w.workerId}`);
  if (w.ref !== theirs || (await staging.revParse(theirs)) !== w.headSha)
    return `its commits are no longer at ${theirs} in the staging repository`;
  const ref = runRef(input.runKey, `workers/${id}`);
  await staging.setRef(ref, w.headSha);
  const task = input.subTasks.find((t) => t.id === id)!;
  try {
    const work = await verifyWork(staging, {
      ref,
      baseSha: w.seedSha ?? oldBase,
      allowedPaths: [...task.ownedPaths, ...input.sharedPaths],
      policy: CommitPolicy.parse(input.policy ?? {}),
    });
    if (work.outOfScopeCount === 0) return { ...w, ...spent, workerId: id, ref };
    await staging.deleteRef(ref);
    return `its commits change ${work.outOfScopeCount} path(s) outside this plan's ownedPaths of ${id}`;
  } catch (err) {
    await staging.deleteRef(ref);
    return `its commits no longer pass verification: ${(err as Error).message.split('\n')[0]}`;
  }
}
