/** The CLI's exit codes, the failures that choose them, and the one line that says what went wrong. */
import { CommanderError } from 'commander';
import { ConfigError } from '../config/error';
import { load } from './lazy';
import { paintErr } from './output';
import { inert } from './terminal';

export const EXIT = { ok: 0, notPushed: 1, badInput: 2, unreachable: 3 } as const;

/** Bad input: a wrong argument, option or request. Exit 2. */
export class UsageError extends Error {}
/** Temporal cannot be reached, or no worker serves the run. Exit 3. */
export class UnreachableError extends Error {}

const GRPC_UNAVAILABLE = 14;

/** Says in one line what went wrong, and returns the exit code of that class of failure. */
export function failed(err: unknown): number {
  // Commander has already printed its own errors, help and version.
  if (err instanceof CommanderError) return err.exitCode === 0 ? EXIT.ok : EXIT.badInput;
  const tell = (text: string, code: number) => {
    process.stderr.write(`${paintErr('red', 'flotilla:')} ${inert(text)}\n`);
    return code;
  };
  if (err instanceof UsageError)
    return tell(
      err.message.startsWith('refused') ? err.message : `${err.message}\n(add --help for usage)`,
      EXIT.badInput,
    );
  if (err instanceof load.request().RequestError) return tell(err.message, EXIT.badInput);
  // A setting: one line naming the variable, and no usage hint, since no argument was wrong.
  if (err instanceof ConfigError) return tell(err.message, EXIT.badInput);
  if (err instanceof load.temporalSdk().WorkflowNotFoundError)
    return tell(`no run with id ${err.workflowId}`, EXIT.badInput);
  if (err instanceof UnreachableError) return tell(err.message, EXIT.unreachable);
  if (load.status().grpcCode(err) === GRPC_UNAVAILABLE)
    return tell(`lost the connection to Temporal: ${(err as Error).message}`, EXIT.unreachable);
  // The SDK's ServiceError says what failed ("Failed to query Workflow"); its cause says why.
  const cause = (err as { cause?: unknown }).cause;
  const why = cause instanceof Error && cause.message ? `: ${cause.message}` : '';
  return tell(err instanceof Error ? `${err.message}${why}` : String(err), EXIT.notPushed);
}
