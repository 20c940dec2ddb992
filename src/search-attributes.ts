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
import { encodeSearchAttributeIndexedValueType as indexedValueType } from '@temporalio/common/lib/search-attributes';
import type { temporal } from '@temporalio/proto';

export const FlotillaRepo = defineSearchAttributeKey('FlotillaRepo', SearchAttributeType.KEYWORD);
export const FlotillaTargetRef = defineSearchAttributeKey('FlotillaTargetRef', SearchAttributeType.KEYWORD);
/** The status's phase: resolving, planning, awaiting-plan-approval, running, integrating, testing, ... */
export const FlotillaPhase = defineSearchAttributeKey('FlotillaPhase', SearchAttributeType.KEYWORD);
/** Set when the run ends: a RunOutcome, or cancelled. */
export const FlotillaOutcome = defineSearchAttributeKey('FlotillaOutcome', SearchAttributeType.KEYWORD);
export const FlotillaCostUsd = defineSearchAttributeKey('FlotillaCostUsd', SearchAttributeType.DOUBLE);
/** Who the run waits for: a person at the plan or push gate, a person to resume a worker ("answer"), or none. */
export const FlotillaAwaiting = defineSearchAttributeKey('FlotillaAwaiting', SearchAttributeType.KEYWORD);

export const SEARCH_ATTRIBUTES = [FlotillaRepo, FlotillaTargetRef, FlotillaPhase, FlotillaOutcome, FlotillaCostUsd, FlotillaAwaiting] as const;

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
export const OUTCOMES = ['pushed', 'unchanged', 'failed', 'conflict', 'tests-failed', 'raced', 'rejected', 'cancelled'] as const;
export const AWAITING = ['plan', 'push', 'answer', 'none'] as const;
export type Awaiting = (typeof AWAITING)[number];

/** The command that registers them, for messages. */
export const SETUP_COMMAND = 'flotilla setup-cluster';

/** `Name=Type` as `temporal server start-dev --search-attribute` takes it. */
export function devServerFlags(): string[] {
  return SEARCH_ATTRIBUTES.flatMap((k) => ['--search-attribute', `${k.name}=${typeName(k.type)}`]);
}

/** The type as the Temporal CLI spells it: Keyword, Double. */
export function typeName(type: SearchAttributeType): string {
  return type.charAt(0) + type.slice(1).toLowerCase().replace(/_(\w)/g, (_m, c: string) => c.toUpperCase());
}

// ---- Visibility queries --------------------------------------------------------------------

/**
 * A string literal of the visibility query language. Its parser (a MySQL dialect) reads a
 * backslash as an escape, so both it and the quote are escaped: a value can neither end the
 * literal nor swallow the quote that does. (The dev server's SQLite store then matches no value
 * holding a backslash at all: such a filter finds nothing, never too much.)
 */
export function quote(value: string): string {
  return `'${value.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
}

export interface RunFilters {
  /** `any`: waiting for a person for any reason. */
  awaiting?: Exclude<Awaiting, 'none'> | 'any';
  repo?: string;
  phase?: string;
  outcome?: string;
}

/** Leader runs matching every filter given (AND). */
export function runsQuery(filters: RunFilters): string {
  const clauses = ["WorkflowType = 'leaderWorkflow'"];
  if (filters.awaiting === 'any') clauses.push(`${FlotillaAwaiting.name} IN (${AWAITING.filter((a) => a !== 'none').map(quote).join(', ')})`);
  else if (filters.awaiting) clauses.push(`${FlotillaAwaiting.name} = ${quote(filters.awaiting)}`);
  if (filters.repo !== undefined) clauses.push(`${FlotillaRepo.name} = ${quote(filters.repo)}`);
  if (filters.phase !== undefined) clauses.push(`${FlotillaPhase.name} = ${quote(filters.phase)}`);
  if (filters.outcome !== undefined) clauses.push(`${FlotillaOutcome.name} = ${quote(filters.outcome)}`);
  return clauses.join(' AND ');
}

// ---- Registration (operator service) -------------------------------------------------------

type OperatorService = Pick<temporal.api.operatorservice.v1.OperatorService, 'listSearchAttributes' | 'addSearchAttributes'>;

export interface AttributeCheck {
  missing: string[];
  /** Registered under another type: registration cannot fix these, a person must. */
  mistyped: { name: string; want: string }[];
}

/** Which of Flotilla's attributes the namespace lacks or has with another type. */
export async function checkSearchAttributes(operator: OperatorService, namespace: string): Promise<AttributeCheck> {
  const { customAttributes } = await operator.listSearchAttributes({ namespace });
  const have = customAttributes ?? {};
  const check: AttributeCheck = { missing: [], mistyped: [] };
  for (const key of SEARCH_ATTRIBUTES) {
    const type = have[key.name];
    if (type === undefined) check.missing.push(key.name);
    else if (type !== indexedValueType(key.type)) check.mistyped.push({ name: key.name, want: typeName(key.type) });
  }
  return check;
}

/** Registers the missing attributes; returns those it added (none when all exist). */
export async function registerSearchAttributes(operator: OperatorService, namespace: string): Promise<string[]> {
  const { missing, mistyped } = await checkSearchAttributes(operator, namespace);
  if (mistyped.length) throw new Error(mistypedMessage(namespace, mistyped));
  if (!missing.length) return [];
  const searchAttributes = Object.fromEntries(SEARCH_ATTRIBUTES.filter((k) => missing.includes(k.name)).map((k) => [k.name, indexedValueType(k.type)!]));
  try {
    await operator.addSearchAttributes({ namespace, searchAttributes });
  } catch (err) {
    // Several workers starting at once each try: whoever lost the race finds them there.
    const after = await checkSearchAttributes(operator, namespace).catch(() => undefined);
    if (after && !after.missing.length && !after.mistyped.length) return [];
    throw err;
  }
  return missing;
}

function mistypedMessage(namespace: string, mistyped: AttributeCheck['mistyped']): string {
  const list = mistyped.map((m) => `${m.name} (should be ${m.want})`).join(', ');
  return `namespace "${namespace}" has search attribute(s) of the wrong type: ${list}; remove them (temporal operator search-attribute remove) and run \`${SETUP_COMMAND}\``;
}

/** One line saying what the namespace lacks and how to fix it; undefined when nothing is wrong. */
export function checkMessage(namespace: string, check: AttributeCheck): string | undefined {
  if (check.mistyped.length) return mistypedMessage(namespace, check.mistyped);
  if (check.missing.length) {
    return `namespace "${namespace}" lacks Flotilla's search attributes (${check.missing.join(', ')}); register them with \`${SETUP_COMMAND}\``;
  }
  return undefined;
}
