/** A run's status as `flotilla status` prints it, and as the facts `flotilla watch` logs when not on a terminal. */
import type { RunStatus } from '../../contracts/messages';
import { shellQuote as q } from '../../client/shell';
import { isoTime } from '../../contracts/text';
import { printableLines } from '../terminal';
import { formatAttempts, formatRefusals, placement } from './lines';
import { seconds, shortSha, usd } from './units';

export function formatStatus(s: RunStatus, runId: string, now = Date.now()): string {
  const lines = [
    `run:       ${runId}`,
    `phase:     ${s.phase}${s.outcome ? ` (${s.outcome})` : ''}`,
    `objective: ${s.objective}`,
    `repo:      ${s.repo} → ${s.targetRef} (base ${shortSha(s.baseSha)})`,
    ...isolationLines(s),
    ...planningLines(s),
  ];
  if (s.integratedSha) lines.push(`integrated: ${s.integratedSha}`);
  if (s.message) lines.push(`message:   ${s.message}`);
  lines.push(...formatGate(s, runId));
  lines.push(...formatAttempts(s.integration));
  lines.push(...subTaskLines(s, runId, now));
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
  if (s.planning?.source === 'planner')
    return [`plan:      proposed by the planner (${s.planning.attempts} attempt(s), ${usd(s.planning.costUsd)})`];
  if (s.planning?.source === 'fallback')
    return [
      `plan:      the planner gave no valid plan (${s.planning.problems.join('; ')}); fell back to one sub-task with the whole objective`,
    ];
  return [];
}

function formatGate(s: RunStatus, runId: string): string[] {
  const g = s.gate;
  if (!g) return [];
  const lines = [`gate:      ${g.gate} — waiting for approval (then ${g.onTimeout} at ${isoTime(g.expiresAt)})`];
  if (g.plan) {
    const idWidth = Math.max(2, ...g.plan.map((p) => p.id.length));
    lines.push('  plan:');
    for (const p of g.plan)
      lines.push(`    ${p.id.padEnd(idWidth)}  ${p.agent.padEnd(11)}  ${p.ownedPaths.join(', ')}  — ${p.prompt}`);
  }
  if (g.sha) {
    lines.push(`  commit:  ${g.sha}`);
    if (g.testSummary) lines.push('  tests:', ...g.testSummary.split('\n').map((l) => `    ${l}`));
    if (g.diffstat) lines.push('  changes:', ...g.diffstat.split('\n').map((l) => `    ${l}`));
  }
  for (const r of g.refused) lines.push(`  refused: ${r.by}: ${r.reason}`);
  const sha = g.sha ? ` --sha ${g.sha}` : '';
  lines.push(`  approve: flotilla approve ${q(runId)} --gate ${g.gate}${sha}`);
  lines.push(`  reject:  flotilla reject ${q(runId)} --gate ${g.gate} --reason '...'`);
  return lines;
}

/** One row per sub-task (state, time, cost, turns), and under it where it runs, its question, how to resume it. */
function subTaskLines(s: RunStatus, runId: string, now: number): string[] {
  const lines = ['sub-tasks:'];
  const width = Math.max(6, ...s.workers.map((w) => w.id.length));
  const under = (text: string) => `  ${' '.repeat(width)}  ${text}`;
  for (const w of s.workers) {
    const detail =
      w.state === 'failed' || w.state === 'suspended'
        ? (w.reason ?? '')
        : w.commits !== undefined
          ? `${w.commits} commit(s), ${w.filesChanged} file(s)`
          : '';
    const cost = `${usd(w.costUsd)} ${String(w.turns).padStart(3)} turns`;
    const duration = w.durationMs ?? (w.startedAt === undefined ? undefined : now - w.startedAt);
    lines.push(`  ${w.id.padEnd(width)}  ${w.state.padEnd(9)} ${seconds(duration).padStart(7)}  ${cost}  ${detail}`);
    const where = placement(w);
    if (where) lines.push(under(where));
    if (w.question) lines.push(under(`question: ${w.question}`));
    if (w.state === 'suspended')
      lines.push(under(`resume:   flotilla resume ${q(runId)} --subtask ${w.id} --message '...'`));
  }
  return lines;
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
  if (s.refusedCount)
    facts.push(['refusals', `refused messages: ${s.refusedCount} (latest: ${s.refusals.at(-1)?.reason ?? '?'})`]);
  for (const w of s.workers) {
    const detail = w.question ? ` — question: ${w.question}` : w.reason ? ` — ${w.reason}` : '';
    facts.push([`sub-task ${w.id}`, `sub-task ${w.id}: ${w.state}, ${usd(w.costUsd)}, ${w.turns} turns${detail}`]);
  }
  (s.integration?.attempts ?? []).forEach((a, i) =>
    facts.push([
      `attempt ${i}`,
      `integration: ${a.kind}${a.workerId ? ` ${a.workerId}` : ''} round ${a.round}: ${a.state}${a.reason ? ` — ${a.reason}` : ''}`,
    ]),
  );
  return facts;
}
