/**
 * The plan and push gates: where a run waits for a person's decision, and what it shows them.
 */
import { condition, setCurrentDetails } from '@temporalio/workflow';
import type { GateReview } from '../../contracts/messages';
import type { GateDecision } from '../../contracts/reports';
import { type Gate, type GateName, type PlannedRequest, agentOf, subTaskLimitsLine } from '../../contracts/request';
import { earlierOverlaps, planOrder } from '../../contracts/plan';
import { evidenceLines } from '../../contracts/evidence';
import { firstLine, isoTime } from '../../contracts/text';
import { msOfMinutes, timerMs } from '../durations';
import type { Run } from './run';

/** What the gate shows beside its own fields: the plan's rows, or the commit to push. */
export type Review = Omit<GateReview, 'gate' | 'openedAt' | 'expiresAt' | 'onTimeout' | 'refused'>;

/** Waits at a gate; returns normally when it is passed, ends the run when it is not. */
export async function passGate(run: Run, name: GateName, gate: Gate, review: Review): Promise<void> {
  if (gate.mode === 'auto') return;
  const { status, crew } = run;
  const timeoutMs = timerMs(msOfMinutes(gate.timeoutMinutes));
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
  setCurrentDetails(gateDetails(run.id, status.gate));
  const what = status.gate.sha ? `: push ${status.gate.sha} to ${status.targetRef}` : '';
  run.notify('gate', `the ${name} gate waits for a person${what}`, gateCommands(run.id, status.gate));
  const decided = await condition(() => crew.decision !== undefined, timeoutMs, {
    summary: `${name} gate: waiting for a person`,
  });
  setCurrentDetails('');
  const taken: GateDecision = decided
    ? crew.decision!
    : { gate: name, approved: gate.onTimeout === 'approve', by: 'timeout', expired: true, sha: status.gate.sha };
  status.decisions.push(taken);
  run.result.decisions = status.decisions;
  status.gate = undefined;
  crew.decision = undefined;
  if (taken.approved) return;
  if (taken.expired)
    run.fail('failed', `the ${name} gate expired after ${gate.timeoutMinutes} minute(s) without a decision`);
  run.fail('rejected', `${taken.by} rejected the ${name} gate: ${taken.comment ?? 'no reason given'}`);
}

/** The Web UI's current details at an open gate: what waits, and the exact command that passes it. */
export function gateDetails(runId: string, gate: GateReview): string {
  const [approve, reject] = gateCommands(runId, gate);
  return [
    `**Waiting for a person at the ${gate.gate} gate** (on timeout: ${gate.onTimeout}, at ${isoTime(gate.expiresAt)})`,
    ...(gate.held ? [`**Held for a person:** ${gate.held}`] : []),
    ...(gate.testSummary ? [`Tests: ${gate.testSummary}`] : []),
    ...(gate.evidence ? evidenceLines(gate.evidence).map((l) => `- ${l}`) : []),
    `Approve: \`${approve}\``,
    `Reject: \`${reject}\``,
  ].join('\n');
}

/** The exact commands that pass an open gate: approve, then reject. */
export function gateCommands(runId: string, gate: Pick<GateReview, 'gate' | 'sha'>): [string, string] {
  return [
    `flotilla approve ${runId} --gate ${gate.gate}${gate.sha ? ` --sha ${gate.sha}` : ''}`,
    `flotilla reject ${runId} --gate ${gate.gate} --reason "why"`,
  ];
}

/**
 * The plan gate's rows: one per sub-task, with the agent it runs, its prompt's first line, what
 * it depends on, and the sub-tasks it runs after because their owned paths overlap its own.
 */
export function planRows(plan: PlannedRequest): NonNullable<GateReview['plan']> {
  const overlaps = earlierOverlaps(plan.subTasks, planOrder(plan.subTasks));
  const index = new Map(plan.subTasks.map((t, i) => [t.id, i]));
  return plan.subTasks.map((t) => {
    // In the plan's own order, as the rows have always listed them.
    const after = [...overlaps.get(t.id)!].sort((a, b) => index.get(a)! - index.get(b)!);
    const own = subTaskLimitsLine(t.limits);
    return {
      id: t.id,
      ownedPaths: t.ownedPaths,
      agent: agentOf(plan, t).kind,
      prompt: firstLine(t.prompt),
      ...(t.dependsOn?.length && { dependsOn: t.dependsOn }),
      ...(after.length && { after }),
      ...(own && { limits: own }),
    };
  });
}
