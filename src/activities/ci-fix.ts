/**
 * The host's side of a CI-fix round: reading the mapping the agent wrote to $FLOTILLA_CI_FIX_FILE
 * and validating it against the checks it was given. The agent is an adversary: the file may be
 * a symlink (to a host file), a FIFO, a directory, huge, or hold anything at all. Each is refused
 * with a reason, never followed, waited on or read whole.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Attribution, CiFixMapping, CiFixVerdict } from '../contracts/checks';
import { clip } from '../contracts/text';
import type { Sandbox } from '../sandbox/types';

/** A mapping file larger than this is refused unread. */
export const MAX_MAPPING_BYTES = 16 * 1024;
/** Characters of a fix's or an external reason's text that are kept. */
const REASON_CHARS = 500;

/** The mapping in `text`, if it maps exactly the `given` checks each to one non-empty fix or external reason. */
export function validateMapping(text: string, given: string[]): CiFixVerdict {
  if (!text.trim()) return { problem: 'the agent wrote no mapping ($FLOTILLA_CI_FIX_FILE is empty)' };
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return { problem: `the mapping is not JSON: ${clip((err as Error).message, 200)}` };
  }
  if (!raw || typeof raw !== 'object' || Array.isArray(raw))
    return { problem: 'the mapping is not a JSON object of check names' };
  const entries = Object.entries(raw as Record<string, unknown>);
  const unknown = entries.map(([name]) => name).filter((name) => !given.includes(name));
  if (unknown.length) return { problem: `the mapping names check(s) it was not given: ${names(unknown)}` };
  const missing = given.filter((name) => !Object.hasOwn(raw as object, name));
  if (missing.length) return { problem: `the mapping leaves check(s) unmapped: ${names(missing)}` };
  const mapping: CiFixMapping = {};
  for (const [name, value] of entries) {
    const attribution = attributionOf(value);
    if (!attribution)
      return {
        problem: `check ${JSON.stringify(clip(name, 100))}: must be {"fix": "what changed"} or {"external": "why"}, with a non-empty text`,
      };
    mapping[name] = attribution;
  }
  return { mapping };
}

function attributionOf(value: unknown): Attribution | undefined {
  if (!value || typeof value !== 'object' || Array.isArray(value)) return undefined;
  const keys = Object.keys(value);
  const text = (value as Record<string, unknown>)[keys[0]];
  if (keys.length !== 1 || typeof text !== 'string' || !text.trim()) return undefined;
  if (keys[0] === 'fix') return { fix: clip(text.trim(), REASON_CHARS) };
  if (keys[0] === 'external') return { external: clip(text.trim(), REASON_CHARS) };
  return undefined;
}

function names(list: string[]): string {
  const shown = list.slice(0, 5).map((n) => JSON.stringify(clip(n, 100)));
  return `${shown.join(', ')}${list.length > 5 ? ` and ${list.length - 5} more` : ''}`;
}

/**
 * The mapping file at `file` (inside the sandbox), validated. What it is (a regular file, and its
 * size) is asked inside the sandbox, where a symlink can only point at the sandbox's own files;
 * no process of the sandbox outlives its command, so nothing changes it between that look and
 * the copy, which itself refuses anything but a regular file and never waits on a FIFO.
 */
export async function readMapping(
  sb: Sandbox,
  file: string,
  given: string[],
  timeoutMs: number,
): Promise<CiFixVerdict> {
  const looked = await sb.exec(`stat -c '%F|%s' -- "$CI_FIX_FILE" 2>/dev/null || echo 'missing|0'`, {
    env: { CI_FIX_FILE: file, PATH: '/usr/bin:/bin' },
    timeoutMs,
  });
  const [kind, size] = looked.output.trim().split('\n').at(-1)!.split('|');
  if (kind === 'missing') return { problem: 'the agent wrote no mapping ($FLOTILLA_CI_FIX_FILE is missing)' };
  if (kind !== 'regular file' && kind !== 'regular empty file')
    return { problem: `the mapping file is not a regular file (it is a ${clip(kind, 40)}); refused unread` };
  if (!(Number(size) <= MAX_MAPPING_BYTES))
    return {
      problem: `the mapping file is larger than ${MAX_MAPPING_BYTES / 1024} KiB (${clip(size, 20)} bytes); refused unread`,
    };
  const dir = await mkdtemp(path.join(os.tmpdir(), 'flotilla-ci-fix-'));
  try {
    const copy = path.join(dir, 'mapping.json');
    const copied = await sb.copyOut(file, copy).then(
      () => undefined,
      (err: unknown) => `the mapping file could not be read: ${clip((err as Error).message, 200)}`,
    );
    if (copied) return { problem: copied };
    const bytes = await readFile(copy);
    if (bytes.length > MAX_MAPPING_BYTES)
      return { problem: `the mapping file is larger than ${MAX_MAPPING_BYTES / 1024} KiB; refused` };
    return validateMapping(bytes.toString('utf8'), given);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
