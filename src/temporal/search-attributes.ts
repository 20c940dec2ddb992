/** Registering Flotilla's search attributes (src/contracts/search-attributes.ts) in a namespace, and checking them. */
import { type SearchAttributeType } from '@temporalio/common';
import { encodeSearchAttributeIndexedValueType as indexedValueType } from '@temporalio/common/lib/search-attributes';
import type { temporal } from '@temporalio/proto';
import { SEARCH_ATTRIBUTES } from '../contracts/search-attributes';

type OperatorService = Pick<
  temporal.api.operatorservice.v1.OperatorService,
  'listSearchAttributes' | 'addSearchAttributes'
>;

/** The command that registers them, for messages. */
export const SETUP_COMMAND = 'flotilla setup-cluster';

/** `Name=Type` as `temporal server start-dev --search-attribute` takes it. */
export function devServerFlags(): string[] {
  return SEARCH_ATTRIBUTES.flatMap((k) => ['--search-attribute', `${k.name}=${typeName(k.type)}`]);
}

/** The type as the Temporal CLI spells it: Keyword, Double. */
export function typeName(type: SearchAttributeType): string {
  return (
    type.charAt(0) +
    type
      .slice(1)
      .toLowerCase()
      .replace(/_(\w)/g, (_m, c: string) => c.toUpperCase())
  );
}
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
  const searchAttributes = Object.fromEntries(
    SEARCH_ATTRIBUTES.filter((k) => missing.includes(k.name)).map((k) => [k.name, indexedValueType(k.type)!]),
  );
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
