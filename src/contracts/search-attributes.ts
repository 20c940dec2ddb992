/**
 * Flotilla's custom search attributes: what the Web UI and `flotilla list` filter runs by. One
 * definition, used by the leader workflow (which keeps them current), the CLI (which queries
 * them), the worker (which checks at start that its namespace has them) and `flotilla
 * setup-cluster` (which registers them). No Node APIs here: workflow code imports this module.
 *
 * Registration is required, not optional: upserting an attribute the namespace lacks fails the
 * workflow task, over and over, so a run would hang rather than fail. A worker refuses to start
 * in a namespace without them, naming the command that registers them; runs then wait for a
 * worker instead of breaking.
 */
import { SearchAttributeType, defineSearchAttributeKey } from '@temporalio/common';
import type { RunStatus } from './messages';
import { CONTINUES_ATTRIBUTE, quote } from './visibility-query';

export { continuedByQuery, quote } from './visibility-query';

export const FlotillaRepo = defineSearchAttributeKey('FlotillaRepo', SearchAttributeType.KEYWORD);
export const FlotillaTargetRef = defineSearchAttributeKey('FlotillaTargetRef', SearchAttributeType.KEYWORD);
/** The status's phase: resolving, planning, awaiting-plan-approval, running, integrating, testing, ... */
export const FlotillaPhase = defineSearchAttributeKey('FlotillaPhase', SearchAttributeType.KEYWORD);
/** Set when the run ends: a RunOutcome, or cancelled. */
export const FlotillaOutcome = defineSearchAttributeKey('FlotillaOutcome', SearchAttributeType.KEYWORD);
export const FlotillaCostUsd = defineSearchAttributeKey('FlotillaCostUsd', SearchAttributeType.DOUBLE);
/** Who the run waits for: a person at the plan or push gate, a person to resume a sub-task ("answer"), or none. */
export const FlotillaAwaiting = defineSearchAttributeKey('FlotillaAwaiting', SearchAttributeType.KEYWORD);

/** The workflow id of the failed run this run continues (`flotilla continue`): how a run finds the run that continued it. */
export const FlotillaContinues = defineSearchAttributeKey(CONTINUES_ATTRIBUTE, SearchAttributeType.KEYWORD);

export const SEARCH_ATTRIBUTES = [
  FlotillaRepo,
  FlotillaTargetRef,
  FlotillaPhase,
  FlotillaOutcome,
  FlotillaCostUsd,
  FlotillaAwaiting,
  FlotillaContinues,
] as const;

export const PHASES = [
  'resolving',
  'planning',
  'awaiting-plan-approval',
  'running',
  'integrating',
  'testing',
  'awaiting-push-approval',
  'pushing',
  'done',
  'failed',
  'cancelled',
] as const;
export const OUTCOMES = [
  'pushed',
  'unchanged',
  'pr-opened',
  'failed',
  'conflict',
  'tests-failed',
  'tests-removed',
  'raced',
  'rejected',
  'cancelled',
  'run-timeout',
] as const;
export const AWAITING = ['plan', 'push', 'answer', 'none'] as const;
export type Awaiting = (typeof AWAITING)[number];

// ---- Visibility queries --------------------------------------------------------------------

export interface RunFilters {
  /** `any`: waiting for a person for any reason. */
  awaiting?: Exclude<Awaiting, 'none'> | 'any';
  repo?: string;
  phase?: string;
  outcome?: string;
}

/** Leader runs matching every filter given (AND). */
export function runsQuery(filters: RunFilters): string {
  // A run that rolled over is listed once: by its latest history, not each that continued as new.
  const clauses = ["WorkflowType = 'leaderWorkflow'", "ExecutionStatus != 'ContinuedAsNew'"];
  if (filters.awaiting === 'any')
    clauses.push(
      `${FlotillaAwaiting.name} IN (${AWAITING.filter((a) => a !== 'none')
        .map(quote)
        .join(', ')})`,
    );
  else if (filters.awaiting) clauses.push(`${FlotillaAwaiting.name} = ${quote(filters.awaiting)}`);
  if (filters.repo !== undefined) clauses.push(`${FlotillaRepo.name} = ${quote(filters.repo)}`);
  if (filters.phase !== undefined) clauses.push(`${FlotillaPhase.name} = ${quote(filters.phase)}`);
  if (filters.outcome !== undefined) clauses.push(`${FlotillaOutcome.name} = ${quote(filters.outcome)}`);
  return clauses.join(' AND ');
}

/**
 * Who a run waits for, from its status alone: the leader publishes it and `flotilla list` reads it
 * from a status, so the two can never disagree. A gate waits for its approver; a suspended sub-task
 * for someone to resume it (answer its question, raise its budget).
 */
export function awaitingOf(status: RunStatus): Awaiting {
  if (status.endedAt !== undefined) return 'none';
  if (status.gate) return status.gate.gate;
  return status.workers.some((w) => w.state === 'suspended') ? 'answer' : 'none';
}
