/**
 * Delivers one notification: a POST of JSON (Flotilla's own shape, or Slack's `{ text }`), signed
 * when the worker has a secret, within a short timeout. The URL is a secret-ish value: it is never
 * logged or put in an error, which names only its origin (or the variable that holds it).
 */
import { notifyUrlProblem } from '../contracts/request';
import { SIGNATURE_HEADER, signBody } from './signature';

/** What a notification says: the event, what waits, and the exact commands that answer it. */
export interface Notification {
  event: string;
  runId: string;
  title: string;
  /** The exact CLI commands that answer it (none for the run's end). */
  commands: string[];
  phase: string;
  at: number;
  /** The run in the Temporal Web UI, when the worker knows the UI's address. */
  webUi?: string;
}

export interface Target {
  url?: string;
  urlEnv?: string;
  format: 'json' | 'slack';
}

export const DELIVERY_TIMEOUT_MS = 5_000;

/** A delivery that cannot succeed however often it is tried (a missing variable, a refused URL). */
export class Undeliverable extends Error {}

/** Where a target points, resolved from the worker's environment when it names a variable. */
export function resolveUrl(target: Target, env: NodeJS.ProcessEnv = process.env): string {
  const url = target.url ?? env[target.urlEnv ?? ''];
  if (!url) throw new Undeliverable(`the worker's environment has no ${target.urlEnv}`);
  const problem = notifyUrlProblem(url);
  if (problem) throw new Undeliverable(`the webhook URL ${problem}`);
  return url;
}

/** How a target is named where people see it: its variable, or its URL's origin (never its path or query). */
export function shownTarget(target: { url?: string; urlEnv?: string }): string {
  if (target.urlEnv) return `$${target.urlEnv}`;
  const origin = /^[a-z]+:\/\/[^/?#]*/i.exec(target.url ?? '')?.[0];
  return origin ? `${origin}/…` : 'a webhook';
}

export function bodyOf(n: Notification, format: Target['format']): string {
  if (format === 'json') return JSON.stringify(n);
  const lines = [`*Flotilla* run \`${n.runId}\`: ${n.title}`, ...n.commands.map((c) => `\`${c}\``)];
  if (n.webUi) lines.push(`<${n.webUi}|Open in the Temporal Web UI>`);
  return JSON.stringify({ text: lines.join('\n') });
}

/** POSTs once; throws on a failure (the caller's retries decide whether to try again). */
export async function deliver(target: Target, n: Notification, secret: string | undefined): Promise<number> {
  const url = resolveUrl(target);
  const body = bodyOf(n, target.format);
  const headers: Record<string, string> = { 'content-type': 'application/json', 'user-agent': 'flotilla' };
  if (secret) headers[SIGNATURE_HEADER] = signBody(secret, body);
  let res: Response;
  try {
    res = await fetch(url, {
      method: 'POST',
      headers,
      body,
      redirect: 'error',
      signal: AbortSignal.timeout(DELIVERY_TIMEOUT_MS),
    });
  } catch (err) {
    // fetch's errors may carry the URL: only its origin is said.
    const why = err instanceof Error && err.name === 'TimeoutError' ? 'timed out' : 'could not connect';
    throw new Error(`${shownTarget(target)} ${why}`);
  }
  await res.body?.cancel();
  if (!res.ok) throw new Error(`${shownTarget(target)} answered HTTP ${res.status}`);
  return res.status;
}
