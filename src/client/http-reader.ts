/**
 * A RunReader over the Temporal server's HTTP API (the frontend's `httpPort`, 7243 by default;
 * the embedded dev server's is its port + 10). It needs nothing beyond Node's own http modules,
 * so a command that only reads a status starts in a fraction of the time the SDK takes to load.
 * Flotilla's payloads are plain JSON, as the SDK's default converter writes them, so the status is
 * read from the payload itself (base64 of the JSON) with no converter.
 */
import http from 'node:http';
import https from 'node:https';
import type { RunStatus } from '../contracts/messages';
import { STATUS_QUERY } from '../contracts/query-names';
import { continuedByQuery } from '../contracts/visibility-query';
import { type RunReader, RunNotFoundError } from './status';

export interface HttpTarget {
  /** The API's base URL, e.g. http://127.0.0.1:7243. */
  baseUrl: string;
  namespace: string;
  /** Sent as a bearer token, as the SDK sends it over gRPC. Never logged. */
  apiKey?: string;
}

/** The server did not answer as Temporal's HTTP API does (nothing listens, or something else does). */
export class HttpApiUnavailable extends Error {
  name = 'HttpApiUnavailable';
}

/** A refusal by the server, with its gRPC status code (as grpcCode reads it). */
class HttpApiError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

const GRPC_NOT_FOUND = 5;
const GRPC_INVALID_ARGUMENT = 3;
const GRPC_DEADLINE_EXCEEDED = 4;
/** Without a deadline of the caller's, how long one request may take. */
const REQUEST_TIMEOUT_MS = 15_000;

export function httpReader(target: HttpTarget): RunReader {
  const ns = encodeURIComponent(target.namespace);
  const call = (
    method: 'GET' | 'POST',
    route: string,
    timeoutMs = REQUEST_TIMEOUT_MS,
    signal?: AbortSignal,
    body?: unknown,
  ) => request(target, method, `/api/v1/namespaces/${ns}/${route}`, timeoutMs, signal, body);
  const workflow = (runId: string) => `workflows/${encodeURIComponent(runId)}`;
  return {
    taskQueueOf: async (runId) => {
      const r = (await notFoundAs(runId, call('GET', workflow(runId)))) as Described;
      return r.executionConfig?.taskQueue?.name ?? r.workflowExecutionInfo?.taskQueue ?? '';
    },
    hasWorker: async (taskQueue) => {
      const route = `task-queues/${encodeURIComponent(taskQueue)}?taskQueueType=TASK_QUEUE_TYPE_WORKFLOW`;
      return (((await call('GET', route)) as { pollers?: unknown[] }).pollers?.length ?? 0) > 0;
    },
    status: async (runId, deadlineMs, abandon, page) => {
      // The payload as the worker wrote it: the API's JSON shorthand turns empty lists into nulls.
      const route = `${workflow(runId)}/query/${STATUS_QUERY}?noPayloadShorthand=true`;
      const body = page && { query: { queryArgs: { payloads: [jsonPayload(page)] } } };
      const r = (await notFoundAs(runId, call('POST', route, deadlineMs, abandon, body))) as {
        queryResult?: { payloads?: Payload[] };
      };
      return jsonOf(r.queryResult?.payloads?.[0], runId) as RunStatus;
    },
    continuedBy: async (runId) => {
      const route = `workflows?pageSize=10&query=${encodeURIComponent(continuedByQuery(runId))}`;
      try {
        const r = (await call('GET', route)) as { executions?: { execution?: { workflowId?: string } }[] };
        return (r.executions ?? []).flatMap((e) => e.execution?.workflowId ?? []);
      } catch (err) {
        // A namespace without FlotillaContinues (not yet upgraded) has none to show.
        if (err instanceof HttpApiError && err.code === GRPC_INVALID_ARGUMENT) return [];
        throw err;
      }
    },
  };
}

/** A payload as the API writes it without shorthand: metadata values and data in base64. */
interface Payload {
  metadata?: { encoding?: string };
  data?: string;
}

/** A value as the SDK's default converter writes it, in the API's form without shorthand. */
function jsonPayload(value: unknown): Payload {
  const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');
  return { metadata: { encoding: b64('json/plain') }, data: b64(JSON.stringify(value)) };
}

/** The value of a payload the SDK's default converter wrote as JSON. */
function jsonOf(payload: Payload | undefined, runId: string): unknown {
  const encoding = Buffer.from(payload?.metadata?.encoding ?? '', 'base64').toString('utf8');
  if (encoding !== 'json/plain')
    throw new Error(`run ${runId} answered its status query with a ${encoding || 'missing'} payload, not JSON`);
  return JSON.parse(Buffer.from(payload?.data ?? '', 'base64').toString('utf8'));
}

interface Described {
  executionConfig?: { taskQueue?: { name?: string } };
  workflowExecutionInfo?: { taskQueue?: string };
}

async function notFoundAs(runId: string, answer: Promise<unknown>): Promise<unknown> {
  try {
    return await answer;
  } catch (err) {
    if (err instanceof HttpApiError && err.code === GRPC_NOT_FOUND) throw new RunNotFoundError(runId, err.message);
    throw err;
  }
}

/** One JSON request; Temporal's refusals ({code, message}) become HttpApiErrors. */
function request(
  target: HttpTarget,
  method: string,
  route: string,
  timeoutMs: number,
  signal?: AbortSignal,
  body?: unknown,
): Promise<unknown> {
  const url = new URL(route, target.baseUrl);
  const headers: Record<string, string> = { accept: 'application/json' };
  if (method === 'POST') headers['content-type'] = 'application/json';
  if (target.apiKey) headers.authorization = `Bearer ${target.apiKey}`;
  const transport = url.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const req = transport.request(url, { method, headers, timeout: timeoutMs, signal }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => {
        try {
          resolve(answerOf(res.statusCode ?? 0, Buffer.concat(chunks).toString('utf8'), url));
        } catch (err) {
          reject(err as Error);
        }
      });
    });
    req.on('timeout', () =>
      req.destroy(new HttpApiError(GRPC_DEADLINE_EXCEEDED, `no answer within ${timeoutMs} ms from ${url.origin}`)),
    );
    req.on('error', (err) =>
      reject(err instanceof HttpApiError ? err : new HttpApiUnavailable(`${url.origin}: ${err.message}`)),
    );
    req.end(method === 'POST' ? JSON.stringify(body ?? {}) : undefined);
  });
}

function answerOf(statusCode: number, text: string, url: URL): unknown {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new HttpApiUnavailable(`${url.origin} is not Temporal's HTTP API (HTTP ${statusCode}, not JSON)`);
  }
  if (statusCode >= 200 && statusCode < 300) return body;
  const { code, message } = (body ?? {}) as { code?: unknown; message?: unknown };
  if (typeof code !== 'number')
    throw new HttpApiUnavailable(`${url.origin} is not Temporal's HTTP API (HTTP ${statusCode})`);
  throw new HttpApiError(code, typeof message === 'string' ? message : `HTTP ${statusCode}`);
}
