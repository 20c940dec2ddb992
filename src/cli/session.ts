/** The CLI's connection to Temporal, and the checks that turn a silent wait into exit 3. */
import type { Client } from '@temporalio/client';
import { ConfigError, dataDir } from '../config/settings';
import type { RunStatus } from '../contracts/messages';
import { UnreachableError, UsageError } from './exit';
import { load } from './lazy';
import { warn } from './output';

export interface Connected {
  client: Client;
  url(id: string): string | undefined;
}

/** Connects to the configured Temporal (never starts one); failures to do so exit 3. */
export async function withClient<T>(fn: (c: Connected) => Promise<T>): Promise<T> {
  const { connectClient } = load.connection();
  const { workflowUrl } = load.temporalServer();
  const session = await connectClient({ dataDir: dataDir(), warn: (line) => console.error(line) }).catch(
    (err: Error) => {
      if (err instanceof ConfigError) throw err;
      throw /^bad Temporal configuration/.test(err.message)
        ? new UsageError(err.message)
        : new UnreachableError(err.message);
    },
  );
  try {
    return await fn({ client: session.client, url: (id) => workflowUrl(session.uiUrl, session.namespace, id) });
  } finally {
    await session.close();
  }
}

/** Says so when nobody will run the workflow: a run on a queue without a worker waits silently. */
export async function warnIfNoWorker(client: Client, queue: string): Promise<void> {
  const { hasWorker, noWorkerMessage } = load.status();
  if (!(await hasWorker(client, queue))) warn(`${noWorkerMessage(queue)}; until then the run waits.`);
}

/** A run's status, or exit 3 saying which worker to start. */
export async function statusOf(client: Client, id: string): Promise<{ status: RunStatus; taskQueue: string }> {
  const { NoWorkerError, queryStatus } = load.status();
  return queryStatus(client, id).catch((err: unknown) => {
    throw err instanceof NoWorkerError ? new UnreachableError(err.message) : err;
  });
}

/** Exit 2 when run `id` has ended, saying how and `why` that matters ("takes no more messages"). */
export async function refuseIfEnded(client: Client, id: string, why: string): Promise<void> {
  const how = await load.messages().endedAs(client, id);
  if (how) throw new UsageError(`run ${id} has ended (${how}); it ${why}`, false);
}
