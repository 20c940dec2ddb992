/** A run's status as `flotilla status` prints it, and as the facts `flotilla watch` logs when not on a terminal. */
import { formatChecks } from './checks';
import type { RunStatus, SubTaskStatus } from '../../contracts/messages';
import { shellQuote as q } from '../../client/shell';
import { evidenceLines } from '../../contracts/evidence';
import { isoTime } from '../../contracts/text';
import { printableLines } from '../terminal';
import {
  candidateLine,
  formatAmendments,
  formatCandidates,
  formatDropped,
  formatHead,
  formatRefusals,
  formatAttempts,
  placement,
} from './lines';
import { formatNotifications, formatReview, reviewFacts } from './review';
import { seconds, shortSha, usd } from './units';

/** What the status alone does not say: where to fetch the integration head from, which runs continue this one. */
export interface StatusContext {
  /** The repository `git fetch` reads the run's staging refs from, as a shell word. */
  fetchFrom?: string;
  continuedBy?: string[];
}

export function formatStatus(s: RunStatus, runId: string, now = Date.now(), context: StatusContext = {}): string {
  const lines = [
    `run:       ${runId}`,
    `phase:     ${s.phase}${s.outcome ? ` (${s.outcome})` : ''}`,
    // An issue's objective holds its whole text: the issue's title and link say it in a line.
    `objective: ${s.issue ? `issue #${s.issue.number}: ${s.issue.title} (${s.issue.url})` : s.objective}`,
    `repo:      ${s.repo} → ${s.targetRef} (base ${shortSha(s.baseSha)})`,
    ...(s.pullRequest
      ? [
          `pull request: #${s.pullRequest.number} ${s.pullRequest.url} (${s.pullRequest.branch} into ${s.pullRequest.base})`,
        ]
      : []),
    ...formatChecks(s.checks),
    ...isolationLines(s),
    ...(s.deadlineAt !== undefined && s.endedAt === undefined
      ? [`deadline:  ${isoTime(s.deadlineAt)} (limits.runTimeoutMinutes)`]
      : []),
    ...planningLines(s),
    ...continuationLines(s, context),
  ];
  if (s.integratedSha) lines.push(`integrated: ${s.integratedSha}`);
  lines.push(...formatHead(s.head, s.workers.filter((w) => w.integrated).length, context.fetchFrom));
  if (s.message) lines.push(`message:   ${s.message}`);
  // At the push gate the evidence is shown with the commit it is about.
  if (s.evidence && !s.gate?.evidence) lines.push(...evidenceLines(s.evidence));
  lines.push(...formatGate(s, runId));
  lines.push(...formatReview(s.review));
  lines.push(...formatNotifications(s.notifications));
  lines.push(...formatAttempts(s.integration));
  lines.push(...subTaskLines(s, runId, now));
  lines.push(...formatCandidates(s.candidates));
  lines.push(...formatDropped(s.dropped));
  lines.push(...formatAmendments(s.amendments, s.amendedCount));
  lines.push(...formatRefusals(s.refusals, s.refusedCount));
  const t = s.totals;
  const elapsed = (s.endedAt ?? now) - s.startedAt;
  lines.push(
    `totals:    ${usd(t.costUsd)}, ${t.turns} turns, ${t.workersDone} done, ${t.workersFailed} failed, ${seconds(elapsed)} elapsed`,
  );
  return printableLines(lines);
}

function isolationLines(s: RunStatus): string[] {
  if (s.isolation === 'none') return ['isolation: NONE: agents run unisolated on the worker (FLOTILLA_ISOLATION=none)'];
  return s.isolation ? [`isolation: ${s.isolation}`] : [];
}

function planningLines(s: RunStatus): string[] {
  const replans = s.planning?.replans ? [`replans:   ${s.planning.replans} round(s) after a sub-task failed`] : [];
  if (s.planning?.source === 'planner')
    return [
      `plan:      proposed by the planner (${s.planning.attempts} attempt(s), ${usd(s.planning.costUsd)})`,
      ...replans,
    ];
  if (s.planning?.source === 'fallback')
    return [
      `plan:      the planner gave no valid plan (${s.planning.problems.join('; ')}); fell back to one sub-task with the whole objective`,
      ...replans,
    ];
  return replans;
}

function continuationLines(s: RunStatus, context: StatusContext): string[] {
  const lines = s.continues ? [`continues: ${s.continues} (its integrated and finished work is reused)`] : [];
  if (context.continuedBy?.length) lines.push(`continued by: ${context.continuedBy.join(', ')}`);
  if (s.rollovers)
    lines.push(`history:   rolled over ${s.rollovers} time(s) into a fresh history (limits.historyEvents)`);
  return lines;
}

function formatGate(s: RunStatus, runId: string): string[] {
  const g = s.gate;
  if (!g) return [];
  const lines = [`gate:      ${g.gate} — waiting for approval (then ${g.onTimeout} at ${isoTime(g.expiresAt)})`];
  if (g.held) lines.push(`  held:    ${g.held} (the gate opened although its mode is auto)`);
  if (g.plan) {
    const idWidth = Math.max(2, ...g.plan.map((p) => p.id.length));
    const shown = g.planPage;
    lines.push(
      shown
        ? `  plan (rows ${(shown.page - 1) * shown.pageSize + 1}-${(shown.page - 1) * shown.pageSize + g.plan.length} of ${shown.total}; page ${shown.page} of ${shown.pages}, --page N for another):`
        : '  plan:',
    );
    for (const p of g.plan) {
      const order = [
        ...(p.dependsOn?.length ? [`needs ${p.dependsOn.join(', ')}`] : []),
        ...(p.after?.length ? [`after ${p.after.join(', ')} (overlapping paths)`] : []),
        ...(p.limits ? [`limits: ${p.limits}`] : []),
      ];
      const graph = order.length ? `  [${order.join('; ')}]` : '';
      lines.push(
        `    ${p.id.padEnd(idWidth)}  ${p.agent.padEnd(11)}  ${p.ownedPaths.join(', ')}${graph}  — ${p.prompt}`,
      );
    }
  }
  if (g.sha) {
    lines.push(`  commit:  ${g.sha}`);
    if (g.testSummary) lines.push('  tests:', ...g.testSummary.split('\n').map((l) => `    ${l}`));
    if (g.evidence) lines.push(...evidenceLines(g.evidence).map((l) => `  ${l}`));
    if (g.diffstat) lines.push('  changes:', ...g.diffstat.split('\n').map((l) => `    ${l}`));
    for (const d of g.dropped ?? []) lines.push(`  left out: ${d.id}: ${d.reason}`);
    lines.push(...formatCandidates(g.candidates).map((l) => `  ${l}`));
  }
  for (const r of g.refused) lines.push(`  refused: ${r.by}: ${r.reason}`);
  const sha = g.sha ? ` --sha ${g.sha}` : '';
  lines.push(`  approve: flotilla approve ${q(runId)} --gate ${g.gate}${sha}`);
  lines.push(`  reject:  flotilla reject ${q(runId)} --gate ${g.gate} --reason '...'`);
  return lines;
}

/** A large run's status shows one page of its sub-tasks: which page, the counts by state, and how to see the next. */
function pageLines(s: RunStatus, runId: string): string[] {
  const p = s.workersPage;
  if (!p) return [];
  const counts = Object.entries(s.workersByState ?? {}).map(([state, n]) => `${n} ${state}`);
  const which = p.state ? `${p.matching} ${p.state} of ${p.total}` : `${p.total}`;
  const lines = [`  page ${p.page} of ${p.pages} (${p.pageSize} a page) of ${which} sub-tasks: ${counts.join(', ')}`];
  if (p.page < p.pages) {
    const state = p.state ? ` --state ${p.state}` : '';
    lines.push(`  next: flotilla status ${q(runId)}${state} --page ${p.page + 1} --page-size ${p.pageSize}`);
  }
  return lines;
}

/** One row per sub-task (state, time, cost, turns), and under it where it runs, its question, how to resume it. */
function subTaskLines(s: RunStatus, runId: string, now: number): string[] {
  const lines = ['sub-tasks:', ...pageLines(s, runId)];
  const width = Math.max(6, ...s.workers.map((w) => w.id.length));
  const under = (text: string) => `  ${' '.repeat(width)}  ${text}`;
  for (const w of s.workers) {
    const detail = lineDetail(w);
    const cost = `${usd(w.costUsd)} ${String(w.turns).padStart(3)} turns`;
    const duration = w.durationMs ?? (w.startedAt === undefined ? undefined : now - w.startedAt);
    lines.push(`  ${w.id.padEnd(width)}  ${w.state.padEnd(9)} ${seconds(duration).padStart(7)}  ${cost}  ${detail}`);
    const where = placement(w);
    if (where) lines.push(under(where));
    if (w.question) lines.push(under(`question: ${w.question}`));
    if (w.autoResume) lines.push(under(w.autoResume));
    if (w.state === 'suspended')
      lines.push(under(`resume:   flotilla resume ${q(runId)} --subtask ${w.id} --message '...'`));
  }
  return lines;
}

/** What a sub-task's line says after its numbers: why it failed or waits, what it changed, whether it is integrated. */
function lineDetail(w: SubTaskStatus): string {
  if (['failed', 'suspended', 'cancelled', 'dropped'].includes(w.state)) return w.reason ?? '';
  if (w.state === 'queued') return w.waits ?? '';
  if (w.commits === undefined) return '';
  // Only the living plan says whether a sub-task is integrated; a run on the fixed plan says nothing.
  const integrated = w.integrated ? ', integrated' : w.integrated === false ? ', not yet integrated' : '';
  const reused = w.reusedFrom ? ` (reused from ${w.reusedFrom})` : '';
  return `${w.commits} commit(s), ${w.filesChanged} file(s)${integrated}${reused}`;
}

/**
 * The run as [key, line] facts, for output that is not a terminal: a line is printed when its
 * fact changes, so a log shows each step once.
 */
export function statusFacts(s: RunStatus, runId: string): [string, string][] {
  const facts: [string, string][] = [
    ['phase', `phase: ${s.phase}${s.outcome ? ` (${s.outcome})` : ''}${s.message ? ` — ${s.message}` : ''}`],
  ];
  const g = s.gate;
  if (g) {
    const sha = g.sha ? ` --sha ${g.sha}` : '';
    facts.push([
      `gate ${g.gate}`,
      `gate: ${g.gate} waiting for approval; approve: flotilla approve ${q(runId)} --gate ${g.gate}${sha} | reject: flotilla reject ${q(runId)} --gate ${g.gate} --reason '...'`,
    ]);
    g.refused.forEach((r, i) => facts.push([`refused ${g.gate} ${i}`, `refused: ${r.by}: ${r.reason}`]));
  }
  facts.push(...reviewFacts(s.review, s.notifications));
  if (s.refusedCount)
    facts.push(['refusals', `refused messages: ${s.refusedCount} (latest: ${s.refusals.at(-1)?.reason ?? '?'})`]);
  if (g?.held) facts.push([`held ${g.gate}`, `held: ${g.held}`]);
  const evidence = s.evidence ?? g?.evidence;
  if (evidence) evidenceLines(evidence).forEach((line, i) => facts.push([`evidence ${i}`, line]));
  if (s.head) facts.push(['head', `integration head: ${s.head.ref} at ${s.head.sha}`]);
  for (const w of s.workers) {
    const why = w.question ? `question: ${w.question}` : (w.reason ?? (w.state === 'queued' ? w.waits : undefined));
    const integrated = w.integrated ? ', integrated' : '';
    facts.push([
      `sub-task ${w.id}`,
      `sub-task ${w.id}: ${w.state}${integrated}, ${usd(w.costUsd)}, ${w.turns} turns${why ? ` — ${why}` : ''}`,
    ]);
    if (w.autoResume) facts.push([`auto-resume ${w.id}`, `sub-task ${w.id}: ${w.autoResume}`]);
  }
  for (const d of s.dropped ?? []) facts.push([`dropped ${d.id}`, `left out: ${d.id}: ${d.reason}`]);
  for (const c of s.candidates ?? []) facts.push([`candidate ${c.id}`, `candidate ${candidateLine(c)}`]);
  for (const a of s.amendments ?? [])
    facts.push([`amendment ${a.at} ${a.subTaskId}`, `amendment: ${a.kind} ${a.subTaskId} by ${a.by}`]);
  (s.integration?.attempts ?? []).forEach((a, i) =>
    facts.push([
      `attempt ${i}`,
      `integration: ${a.kind}${a.workerId ? ` ${a.workerId}` : ''} round ${a.round}: ${a.state}${a.reason ? ` — ${a.reason}` : ''}`,
    ]),
  );
  return facts;
}
