/**
 * A plan in parts (issue 19): a request whose sub-tasks take more than one payload should (a
 * thousand of them are some 200 KiB) starts without them, naming each part by its SHA-256 in
 * `planParts`; the parts follow as `planPart` signals. The leader takes a part only when its
 * digest is one the request named, so nobody but the run's starter decides what its plan is,
 * and every event of its history stays under 64 KiB. Pure: the workflow, the activities and the
 * client import it.
 */
import { sha256 } from '@noble/hashes/sha2';
import { bytesToHex, utf8ToBytes } from '@noble/hashes/utils';
import { z } from 'zod';
import { MAX_CHARS } from './request';

/** The most bytes a part's JSON takes: a payload under 64 KiB with its envelope. */
export const PART_BYTES = 48 * 1024;
/** The most parts a plan is sent in: MAX_CHARS.request in parts of PART_BYTES, with room. */
export const PLAN_PARTS_MAX = 64;
/** How long a run waits for the parts its request names before it fails, saying which are missing. */
export const PLAN_PARTS_WAIT = '10 minutes';

const digest = z.string().regex(/^[0-9a-f]{64}$/, 'is not a SHA-256 digest (64 lowercase hex digits)');

/** The request's `planParts`: a digest per part, in the plan's order. */
export const PlanParts = z
  .array(digest)
  .min(1, 'must name at least one part')
  .max(PLAN_PARTS_MAX, `at most ${PLAN_PARTS_MAX} parts`);

/** What is wrong with a request's `planParts`, naming the field; undefined when it has none or they name parts. */
export function planPartsProblem(request: { subTasks?: unknown; planParts?: unknown }): string | undefined {
  if (request.planParts === undefined) return undefined;
  if (request.subTasks !== undefined)
    return 'planParts: a request lists its sub-tasks in subTasks or names them in planParts, not both';
  const parsed = PlanParts.safeParse(request.planParts);
  if (parsed.success) return undefined;
  const [issue] = parsed.error.issues;
  return `planParts${issue.path.map((p) => `[${String(p)}]`).join('')}: ${issue.message}`;
}

/** A `planPart` signal: the part's index in `planParts` and its text, a JSON array of sub-tasks. */
export const PlanPartInput = z
  .object({
    part: z
      .number()
      .int()
      .min(0)
      .max(PLAN_PARTS_MAX - 1),
    text: z.string().max(MAX_CHARS.request),
    by: z.string().max(MAX_CHARS.name).optional(),
  })
  .strict();
export type PlanPartInput = z.output<typeof PlanPartInput>;

/** The SHA-256 of a part's text (its UTF-8 bytes), as `planParts` names it. */
export function digestOf(text: string): string {
  return bytesToHex(sha256(utf8ToBytes(text)));
}

/**
 * The sub-tasks as JSON arrays of at most `max` bytes each, whole sub-tasks only (one larger than
 * that is a part of its own), in order: `JSON.parse` of each, concatenated, is the plan.
 */
export function partsOf(subTasks: unknown[], max = PART_BYTES): string[] {
  const parts: string[] = [];
  let open: string[] = [];
  let bytes = 2;
  for (const task of subTasks) {
    const json = JSON.stringify(task);
    const size = utf8ToBytes(json).length + 1;
    if (open.length && bytes + size > max) {
      parts.push(`[${open.join(',')}]`);
      [open, bytes] = [[], 2];
    }
    open.push(json);
    bytes += size;
  }
  if (open.length) parts.push(`[${open.join(',')}]`);
  return parts;
}

/** The plan the parts hold, in order; throws naming the part that is not a JSON array. */
export function planOf(texts: string[]): unknown[] {
  return texts.flatMap((text, i) => {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      throw new Error(`planParts[${i}]: its text is not JSON (${err instanceof Error ? err.message : String(err)})`);
    }
    if (!Array.isArray(value)) throw new Error(`planParts[${i}]: its text is not a JSON array of sub-tasks`);
    return value;
  });
}
