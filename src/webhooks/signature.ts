/**
 * Webhook signatures, as GitHub makes them: `X-Flotilla-Signature-256: sha256=<hex HMAC-SHA256 of
 * the body>`, keyed by a secret from the worker's environment (FLOTILLA_NOTIFY_SECRET). A
 * receiver recomputes it over the exact bytes it got and compares in constant time.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

export const SIGNATURE_HEADER = 'X-Flotilla-Signature-256';

/** The header value for `body`. */
export function signBody(secret: string, body: string | Buffer): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

/**
 * Whether `header` is the signature of `body` under `secret`. Never throws: a missing, malformed
 * or wrong header is false, and the comparison takes the same time wherever the first difference is.
 */
export function verifySignature(secret: string, body: string | Buffer, header: string | undefined): boolean {
  if (!secret || typeof header !== 'string') return false;
  const expected = Buffer.from(signBody(secret, body));
  const given = Buffer.from(header);
  return given.length === expected.length && timingSafeEqual(given, expected);
}
