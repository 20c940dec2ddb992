/**
 * The worker's receiver of GitHub's webhooks (FLOTILLA_WEBHOOK_LISTEN): review activity on a
 * pull request a run waits on makes that run read the PR at once, instead of at its next poll.
 *
 * A delivery is trusted for nothing but "look now": its signature (`X-Hub-Signature-256`, HMAC of
 * the body under FLOTILLA_WEBHOOK_SECRET) must hold, and even then the run reads the PR from the
 * forge itself, with the worker's token. So a forged, replayed or altered delivery can at most
 * make a run read its PR once more. The run is found by its PR's URL among the runs in the review
 * phase (few at a time), through the Temporal client the worker already has.
 */
import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Client } from '@temporalio/client';
import { ConfigError } from '../config/error';
import { setting } from '../config/variables';
import { pullRequestActivitySignal, statusQuery } from '../contracts/messages';
import { FlotillaPhase, quote } from '../contracts/search-attributes';
import { verifySignature } from './signature';

/** GitHub's deliveries are at most 25 MB; review activity is a few KiB, and nothing bigger is read. */
const MAX_BODY_BYTES = 1 << 20;
/** The events that are review activity on a pull request, or its end. */
const EVENTS = new Set([
  'pull_request',
  'pull_request_review',
  'pull_request_review_comment',
  'pull_request_review_thread',
  'issue_comment',
]);

export interface WebhookReceiver {
  /** Where it listens, e.g. `http://127.0.0.1:8787/`. */
  url: string;
  close(): Promise<void>;
}

export interface ReceiverOptions {
  client: Client;
  secret: string;
  /** `host:port`; port 0 takes a free one. */
  listen: string;
  warn: (line: string) => void;
}

/** FLOTILLA_WEBHOOK_LISTEN and its secret, checked when the worker starts; undefined when it receives no webhooks. */
export function receiverSettings(env: NodeJS.ProcessEnv = process.env): { listen: string; secret: string } | undefined {
  const listen = setting('FLOTILLA_WEBHOOK_LISTEN', env);
  if (!listen) return undefined;
  const secret = setting('FLOTILLA_WEBHOOK_SECRET', env);
  // An unsigned receiver would let anyone who can reach the port make runs read their PRs: refused.
  if (!secret)
    throw new ConfigError('FLOTILLA_WEBHOOK_LISTEN needs FLOTILLA_WEBHOOK_SECRET, the secret of the webhook on GitHub');
  return { listen, secret };
}

export async function startWebhookReceiver(opts: ReceiverOptions): Promise<WebhookReceiver> {
  const server = createServer((req, res) => {
    handle(opts, req)
      .then(([code, text]) => answer(res, code, text))
      .catch((err: unknown) => {
        opts.warn(`webhook receiver: ${err instanceof Error ? err.message : String(err)}`);
        answer(res, 500, 'the delivery could not be handled');
      });
  });
  const { host, port } = hostPort(opts.listen);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const at = server.address() as AddressInfo;
  return { url: `http://${host.includes(':') ? `[${host}]` : host}:${at.port}/`, close: () => closeServer(server) };
}

/** The answer to one delivery: its status code and a line saying why. */
async function handle(opts: ReceiverOptions, req: IncomingMessage): Promise<[number, string]> {
  if (req.method !== 'POST') return [405, 'POST only'];
  const body = await readBody(req);
  if (body === undefined) return [413, `a delivery is at most ${MAX_BODY_BYTES} bytes`];
  if (!verifySignature(opts.secret, body, header(req, 'x-hub-signature-256')))
    return [401, 'the X-Hub-Signature-256 header is not the signature of this body under the webhook secret'];
  const event = header(req, 'x-github-event') ?? '';
  if (event === 'ping') return [200, 'pong'];
  if (!EVENTS.has(event)) return [202, `ignored: the ${event || 'unnamed'} event is not review activity`];
  const url = pullRequestUrl(body);
  if (!url) return [202, 'ignored: the delivery names no pull request'];
  const runs = await nudgeRunsOn(opts.client, url);
  return [202, `${runs} run(s) reading ${url}`];
}

/** The PR's page a delivery is about: a review's or a review comment's PR, or the PR an issue comment is on. */
export function pullRequestUrl(body: Buffer): string | undefined {
  let payload: unknown;
  try {
    payload = JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
  const p = payload as { pull_request?: { html_url?: unknown }; issue?: { pull_request?: { html_url?: unknown } } };
  const url = p?.pull_request?.html_url ?? p?.issue?.pull_request?.html_url;
  return typeof url === 'string' && /^https?:\/\/\S+$/.test(url) ? url : undefined;
}

/** Signals every run in the review phase whose PR is at `url`; how many there were. */
async function nudgeRunsOn(client: Client, url: string): Promise<number> {
  const query = `ExecutionStatus = "Running" AND ${FlotillaPhase.name} = ${quote('review')}`;
  let nudged = 0;
  for await (const run of client.workflow.list({ query })) {
    const handle = client.workflow.getHandle(run.workflowId, run.runId);
    const status = await handle.query(statusQuery).catch(() => undefined);
    if (status?.pullRequest?.url !== url) continue;
    await handle.signal(pullRequestActivitySignal);
    nudged++;
  }
  return nudged;
}

function readBody(req: IncomingMessage): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_BODY_BYTES) chunks.push(chunk);
    });
    req.on('end', () => resolve(size <= MAX_BODY_BYTES ? Buffer.concat(chunks) : undefined));
    req.on('error', reject);
  });
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function answer(res: ServerResponse, code: number, text: string): void {
  res.writeHead(code, { 'content-type': 'text/plain; charset=utf-8' }).end(`${text}\n`);
}

/** `host:port` or `[v6]:port`. */
function hostPort(listen: string): { host: string; port: number } {
  const m = /^\[?([^\]]*?)\]?:(\d+)$/.exec(listen)!;
  return { host: m[1], port: Number(m[2]) };
}

function closeServer(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}
