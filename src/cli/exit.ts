/** The CLI's exit codes, the failures that choose them, and the one line that says what went wrong. */
import { CommanderError } from 'commander';
import { ConfigError } from '../config/error';
import { load } from './lazy';
import { paintErr } from './output';
import { inert } from './terminal';

export const EXIT = { ok: 0, notPushed: 1, badInput: 2, unreachable: 3 } as const;

/** Bad input: a wrong argument, option or request, or a message the run refused. Exit 2. */
export class UsageError extends Error {
  /** `showUsage`: the message is about the command line, so the line after it points to --help. */
  constructor(
    message: string,
    readonly showUsage = true,
  ) {
    super(message);
  }
}
/** Temporal cannot be reached, or no worker serves the run. Exit 3. */
export class UnreachableError extends Error {}

const GRPC_UNAVAILABLE = 14;

/**
 * Says in one line what went wrong, and returns the exit code of that class of failure. With
 * `asJson` (the command was given --json) the error is a JSON object on stdout instead, for the
 * script that reads it: `{"error": {"message": ..., "exitCode": ...}}`.
 */
export function failed(err: unknown, asJson = false): number {
  const tell = (text: string, code: number) => {
    if (asJson) process.stdout.write(`${JSON.stringify({ error: { message: text, exitCode: code } }, null, 2)}\n`);
    else process.stderr.write(`${paintErr('red', 'flotilla:')} ${inert(text)}\n`);
    return code;
  };
  if (err instanceof CommanderError) {
    if (err.exitCode === 0) return EXIT.ok;
    // Commander has printed its own errors, unless they are to be JSON (rootProgram).
    return asJson ? tell(err.message.replace(/^error: /, ''), EXIT.badInput) : EXIT.badInput;
  }
  if (err instanceof UsageError)
    return tell(err.showUsage ? `${err.message}\n(add --help for usage)` : err.message, EXIT.badInput);
  // Ours first: the checks below load the request's schemas and the SDK (a status command's error need not).
  if (err instanceof UnreachableError) return tell(err.message, EXIT.unreachable);
  if (err instanceof load.status().RunNotFoundError) return tell(`no run with id ${err.workflowId}`, EXIT.badInput);
  // A setting: one line naming the variable, and no usage hint, since no argument was wrong.
  if (err instanceof ConfigError) return tell(err.message, EXIT.badInput);
  if (err instanceof load.request().RequestError) return tell(err.message, EXIT.badInput);
  if (err instanceof load.temporalSdk().WorkflowNotFoundError)
    return tell(`no run with id ${err.workflowId}`, EXIT.badInput);
  if (load.status().grpcCode(err) === GRPC_UNAVAILABLE)
    return tell(`lost the connection to Temporal: ${(err as Error).message}`, EXIT.unreachable);
  // The SDK's ServiceError says what failed ("Failed to query Workflow"); its cause says why.
  const cause = (err as { cause?: unknown }).cause;
  const why = cause instanceof Error && cause.message ? `: ${cause.message}` : '';
  return tell(err instanceof Error ? `${err.message}${why}` : String(err), EXIT.notPushed);
}
