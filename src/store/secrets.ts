/**
 * Secrets the worker holds (the git token, agents' API keys) and their redaction from anything
 * that leaves an activity: output tails, heartbeats, artifacts, error messages, results.
 */
import { harnessFor } from '../agents';
import type { AgentSpec } from '../contracts/request';

/** Shorter values are not treated as secrets: redacting "1" or "true" would garble every log. */
const MIN_SECRET_LENGTH = 8;
/** Variables whose values are credentials, among those an agent harness passes from the host. */
const SECRET_NAME = /KEY|TOKEN|SECRET|PASSWORD/i;
export const REDACTED = '[redacted]';
/** One spec of each agent kind, to learn which variables each harness passes from the host. */
const EVERY_KIND = [{ kind: 'shell', command: 'true' }, { kind: 'claude-code' }, { kind: 'codex' }] as AgentSpec[];

/** A credential the worker holds: the variable it comes from, and its value. */
export interface HeldSecret {
  name: string;
  value: string;
}

/**
 * The credentials present in this process's environment, longest value first: the git token and
 * every harness's key and token variables. Redaction and the scan of imported commits use this
 * one list.
 */
export function heldSecrets(env: NodeJS.ProcessEnv = process.env): HeldSecret[] {
  const names = new Set([
    'FLOTILLA_GIT_TOKEN',
    'FLOTILLA_FORGE_TOKEN',
    'FLOTILLA_NOTIFY_SECRET',
    'FLOTILLA_WEBHOOK_SECRET',
  ]);
  for (const spec of EVERY_KIND)
    for (const name of harnessFor(spec).passEnv) if (SECRET_NAME.test(name)) names.add(name);
  const seen = new Set<string>();
  const held: HeldSecret[] = [];
  for (const name of names) {
    const value = env[name];
    if (value === undefined || value.length < MIN_SECRET_LENGTH || seen.has(value)) continue;
    seen.add(value);
    held.push({ name, value });
  }
  return held.sort((a, b) => b.value.length - a.value.length);
}

/** The credential values present in this process's environment, longest first. */
export function secretValues(env: NodeJS.ProcessEnv = process.env): string[] {
  return heldSecrets(env).map((s) => s.value);
}

export function redact(text: string, secrets: readonly string[] = secretValues()): string {
  let out = text;
  for (const s of secrets) if (out.includes(s)) out = out.split(s).join(REDACTED);
  return out;
}

/**
 * Redacts a stream whose chunks may split a secret: it holds back the last (longest secret - 1)
 * characters until the next chunk shows whether they start one.
 */
export class StreamRedactor {
  private pending = '';
  private readonly hold: number;

  constructor(private readonly secrets: readonly string[] = secretValues()) {
    this.hold = Math.max(0, ...secrets.map((s) => s.length - 1));
  }

  push(chunk: string): string {
    if (this.secrets.length === 0) return chunk;
    const text = redact(this.pending + chunk, this.secrets);
    const cut = Math.max(0, text.length - this.hold);
    this.pending = text.slice(cut);
    return text.slice(0, cut);
  }

  end(): string {
    const rest = redact(this.pending, this.secrets);
    this.pending = '';
    return rest;
  }
}
