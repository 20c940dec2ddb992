/**
 * The request's JSON Schema, generated from the zod schema that validates it, so editors (the
 * YAML language server) check and complete flotilla.yaml. Cross-field rules (duplicate ids,
 * overlapping paths) are zod refinements and only `flotilla validate` checks them.
 */
import path from 'node:path';
import { z } from 'zod';
import { LeaderRequest } from '../contracts/request';

/** The committed copy, shipped in the package; the README and `flotilla init` point at it. */
export const SCHEMA_FILE = path.join(__dirname, '..', '..', 'schema', 'request.schema.json');

export function requestJsonSchema(): Record<string, unknown> {
  // io "input": what a person writes, where fields with defaults are optional.
  const schema = z.toJSONSchema(LeaderRequest, { io: 'input', target: 'draft-7', unrepresentable: 'any' });
  return {
    ...schema,
    title: 'Flotilla request',
    description: 'A Flotilla run: objective, repository, sub-tasks, agents, gates and limits.',
  };
}

export function requestJsonSchemaText(): string {
  return `${JSON.stringify(requestJsonSchema(), null, 2)}\n`;
}
