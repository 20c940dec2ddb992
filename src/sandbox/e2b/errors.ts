/**
 * What an E2B failure means for Temporal: worth a retry, or not. Every SDK call the provider
 * makes goes through `call`, so a failure names what was being done and fails the activity for
 * good when retrying cannot help.
 */
import { ApplicationFailure } from '@temporalio/common';
import {
  AuthenticationError,
  InvalidArgumentError,
  NotEnoughSpaceError,
  NotFoundError,
  RateLimitError,
  SandboxError,
  ServiceBusyError,
  TemplateError,
  TimeoutError,
} from 'e2b';

/**
 * Whether retrying can help. Fatal: credentials, templates, arguments, a sandbox or file that
 * is not there, a full disk, and any other 4xx. Everything else (rate limits, a busy service,
 * timeouts, 5xx, 409 conflicts such as a sandbox still pausing, network failures) is worth a retry.
 */
export function classifyE2BError(err: unknown): 'retryable' | 'fatal' {
  if (err instanceof RateLimitError || err instanceof ServiceBusyError || err instanceof TimeoutError)
    return 'retryable';
  if (
    err instanceof AuthenticationError ||
    err instanceof TemplateError ||
    err instanceof InvalidArgumentError ||
    err instanceof NotFoundError ||
    err instanceof NotEnoughSpaceError
  ) {
    return 'fatal';
  }
  if (err instanceof SandboxError && err.statusCode !== undefined) {
    return err.statusCode >= 400 && err.statusCode < 500 && err.statusCode !== 408 && err.statusCode !== 409
      ? 'fatal'
      : 'retryable';
  }
  return 'retryable';
}

/** A Temporal-ready error: non-retryable when retrying cannot help, a plain Error otherwise. */
export function failure(what: string, err: unknown): Error {
  const message = `${what}: ${err instanceof Error ? err.message : String(err)}`;
  if (classifyE2BError(err) === 'retryable') return new Error(message, { cause: err });
  return ApplicationFailure.nonRetryable(message, err instanceof Error && err.name !== 'Error' ? err.name : 'E2BError');
}

export async function call<T>(what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw failure(what, err);
  }
}
