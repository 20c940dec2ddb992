/** The CLI's connection to Temporal, and the checks that turn a silent wait into exit 3. */
import type { Client } from '@temporalio/client';
import { ConfigError, dataDir } from '../config/settings';
import type { RunReader } from '../client/status';
import type { ConnectionSettings } from '../temporal/server';
import type { RunStatus, StatusPageInput } from '../contracts/messages';
import { UnreachableError, UsageError } from './exit';
import { load } from './lazy';
import { warn } from './output';

export interface Connected {
  client: Client;
  url(id: string): string | undefined;
}

/** A configuration error as a usage error (exit 2), anything else as Temporal out of reach (exit 3). */
function unreachable(err: Error): never {
  if (err instanceof ConfigError) throw err;
  throw /^bad Temporal configuration/.test(err.message)
    ? new UsageError(err.message)
    : new UnreachableError(err.message);
}

/** Connects to the configured Temporal (never starts one); failures to do so exit 3. */
export async function withClient<T>(fn: (c: Connected) => Promise<T>): Promise<T> {
  const { connectClient } = load.connection();
  const { workflowUrl } = load.temporalServer();
  const session = await connectClient({ dataDir: dataDir(), warn: (line) => console.error(line) }).catch(unreachable);
  try {
    return await fn({ client: session.client, url: (id) => workflowUrl(session.uiUrl, session.namespace, id) });
  } finally {
    await session.close();
  }
}

export interface Reading {
  reader: RunReader;
  url(id: string): string | undefined;
}

/**
 * True when an HTTPS request with the system's CAs carries the connection's settings: no client
 * certificate, CA or server name of its own, and no gRPC metadata (an API key is a bearer token).
 */
function httpCarries({ tls, metadata }: ConnectionSettings): boolean {
  if (metadata && Object.keys(metadata).length) return false;
  if (typeof tls !== 'object' || tls === null) return true;
  return !tls.clientCertPair && !tls.serverRootCACertificate && !tls.serverNameOverride;
}

/**
 * Reads runs through the server's HTTP API when it is known and needs no more than an API key
 * (no SDK to load: the command starts several times faster), else through the gRPC client.
 * `fn` must read before it prints: when the HTTP API does not answer as Temporal's, it runs again
 * over gRPC.
 */
export async function withReader<T>(fn: (r: Reading) => Promise<T>): Promise<T> {
  const server = load.temporalServer();
  const target = await server.ensureTemporal({ dataDir: dataDir(), connectOnly: true }).catch(unreachable);
  const { apiKey } = target.connection;
  const url = (id: string) => server.workflowUrl(target.uiUrl, target.namespace, id);
  if (target.httpUrl && httpCarries(target.connection) && (apiKey === undefined || typeof apiKey === 'string')) {
    const { httpReader, HttpApiUnavailable } = load.httpReader();
    const reader = httpReader({ baseUrl: target.httpUrl, namespace: target.namespace, apiKey });
    try {
      return await fn({ reader, url });
    } catch (err) {
      if (!(err instanceof HttpApiUnavailable)) throw err;
    }
  }
  return withClient(({ client, url }) => fn({ reader: load.status().grpcReader(client), url }));
}

/** Says so when nobody will run the workflow: a run on a queue without a worker waits silently. */
export async function warnIfNoWorker(client: Client, queue: string): Promise<void> {
  const { hasWorker, noWorkerMessage } = load.status();
  if (!(await hasWorker(client, queue))) warn(`${noWorkerMessage(queue)}; until then the run waits.`);
}

/** A run's status, or exit 3 saying which worker to start. */
export async function statusOf(
  from: Client | RunReader,
  id: string,
  page?: StatusPageInput,
): Promise<{ status: RunStatus; taskQueue: string }> {
  const { NoWorkerError, grpcReader, readStatus } = load.status();
  const reader = 'taskQueueOf' in from ? from : grpcReader(from);
  return readStatus(reader, id, undefined, page).catch((err: unknown) => {
    throw err instanceof NoWorkerError ? new UnreachableError(err.message) : err;
  });
}

/** Exit 2 when run `id` has ended, saying how and `why` that matters ("takes no more messages"). */
export async function refuseIfEnded(client: Client, id: string, why: string): Promise<void> {
  const how = await load.messages().endedAs(client, id);
  if (how) throw new UsageError(`run ${id} has ended (${how}); it ${why}`, false);
}
