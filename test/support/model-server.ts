/**
 * A scripted model server for testing the real agent CLIs offline. It speaks the Anthropic
 * Messages API (POST /v1/messages, streaming and not) and the OpenAI Responses API
 * (POST /v1/responses, streaming), listens on 127.0.0.1 only, and records every request.
 *
 * A conversation is scripted as an ordered list of steps, and is recognised by a key that
 * appears in its users' messages (put it in the prompt); where several do, by the first (a
 * sub-task's brief lists the other sub-tasks' prompts after its own). Which step answers a request is
 * worked out from the request itself: the number of model replies already in its history.
 * That makes retries harmless and a resumed session carry on where it left off, whichever
 * process sends it.
 *
 * Requests that are not a scripted conversation's turn (token counting, title generation,
 * probes) are answered harmlessly and consume nothing. MODEL_SERVER_DEBUG=1 logs every request,
 * which is how to find out what a new CLI version sends.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { releaseAtEnd } from './cleanup';

/** A tool call: Write/Edit/Bash with their input for Claude Code; exec_command {cmd, workdir} for Codex. */
export interface ToolCall {
  name: string;
  input: Record<string, unknown>;
}

/** One model reply: text, tool calls, or both (text first); or the API refusing the request with `error`. */
export interface Step {
  text?: string;
  tools?: ToolCall[];
  /** The message of a 400 error the API answers with instead of a reply (agents do not retry it). */
  error?: string;
}

export interface RecordedRequest {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  /** The parsed JSON body, when there was one. */
  body?: any;
  /** The scripted conversation this request was a turn of, and the step that answered it. */
  conversation?: string;
  step?: number;
}

/** Usage the server reports for every reply, so agents' cost accounting has something to price. */
export const INPUT_TOKENS = 1000;
export const OUTPUT_TOKENS = 100;

type Message = { role: string; content: unknown };

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  // Text blocks only: tool results ride in user messages too, but the user did not write them.
  return content
    .filter((block: any) => (block?.type === 'text' || block?.type === 'input_text') && typeof block.text === 'string')
    .map((block: any) => block.text)
    .join('\n');
}

/** Every user-authored text in an Anthropic messages list or a Responses input list. */
export function userTexts(body: any): string[] {
  const items: any[] = Array.isArray(body?.messages) ? body.messages : Array.isArray(body?.input) ? body.input : [];
  return items
    .filter((m) => m?.role === 'user' && (m.type === undefined || m.type === 'message'))
    .map((m) => textOf(m.content));
}

/** Whether an item of a Responses input list was produced by the model. */
function isModelItem(item: any): boolean {
  if (item?.type === 'message' || item?.type === undefined) return item?.role === 'assistant';
  return ['function_call', 'custom_tool_call', 'local_shell_call', 'reasoning', 'web_search_call'].includes(item?.type);
}

/**
 * What Claude Code puts in a resumed session's history after a tool call its killed process never
 * finished: a filler reply no model wrote, which must not count as a step.
 */
const SYNTHETIC_REPLY = 'No response requested.';

/** How many model replies a request's history already holds: each is one run of model items. */
function repliesSoFar(body: any): number {
  const items: any[] = Array.isArray(body?.messages)
    ? (body.messages as Message[])
        .filter((m) => !(m.role === 'assistant' && textOf(m.content).trim() === SYNTHETIC_REPLY))
        .map((m) => ({ role: m.role, type: 'message' }))
    : Array.isArray(body?.input)
      ? body.input
      : [];
  let runs = 0;
  let inRun = false;
  for (const item of items) {
    const model = isModelItem(item);
    if (model && !inRun) runs++;
    inRun = model;
  }
  return runs;
}

export class ModelServer {
  readonly requests: RecordedRequest[] = [];
  private readonly scripts = new Map<string, Step[]>();
  private ids = 0;

  private constructor(
    private readonly server: http.Server,
    readonly url: string,
  ) {}

  /** A server on a free loopback port, closed when the test (or file) ends. */
  static async start(): Promise<ModelServer> {
    let self: ModelServer | undefined;
    const server = http.createServer((req, res) => self!.handle(req, res));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    const started = new ModelServer(server, `http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    self = started;
    releaseAtEnd(() => started.close());
    return started;
  }

  /** Scripts the conversation whose user messages contain `key`. */
  script(key: string, steps: Step[]): void {
    this.scripts.set(key, steps);
  }

  private close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private nextId(prefix: string): string {
    return `${prefix}_${String(++this.ids).padStart(6, '0')}`;
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      let body: any;
      try {
        body = raw ? JSON.parse(raw) : undefined;
      } catch {
        body = undefined;
      }
      const path = (req.url ?? '/').split('?')[0];
      const record: RecordedRequest = { method: req.method ?? 'GET', path, headers: req.headers, body };
      this.requests.push(record);
      if (process.env.MODEL_SERVER_DEBUG)
        console.error(`[model-server] ${record.method} ${req.url} ${raw.slice(0, 300)}`);
      try {
        // Codex tries a WebSocket transport first for OpenAI's own provider; refusing sends it to HTTP.
        if (req.headers.upgrade)
          return json(res, { error: { type: 'invalid_request_error', message: 'no WebSockets here' } }, 404);
        if (record.method === 'POST' && path.endsWith('/messages/count_tokens'))
          return json(res, { input_tokens: INPUT_TOKENS });
        if (record.method === 'POST' && path.endsWith('/messages')) return this.anthropic(record, res);
        if (record.method === 'POST' && path.endsWith('/responses')) return this.responses(record, res);
        if (path.endsWith('/models')) return json(res, { object: 'list', data: [], models: [] });
        json(res, {});
      } catch (err) {
        json(res, { error: { type: 'server_error', message: String(err) } }, 500);
      }
    });
  }

  /** The script step a request asks for, or undefined for a request that is not a scripted turn. */
  private stepFor(record: RecordedRequest, isTurn: boolean): Step | undefined {
    if (!isTurn) return undefined;
    const text = userTexts(record.body).join('\n');
    // The key that comes first: a sub-task's brief lists the other sub-tasks' prompts after its own.
    const at = (key: string) => text.indexOf(key);
    const found = [...this.scripts.keys()].filter((key) => at(key) >= 0);
    const key = found.sort((a, b) => at(a) - at(b) || b.length - a.length)[0];
    if (key === undefined) return undefined;
    record.conversation = key;
    record.step = repliesSoFar(record.body);
    return this.scripts.get(key)![record.step] ?? { text: 'The script has no more steps.' };
  }

  private anthropic(record: RecordedRequest, res: http.ServerResponse): void {
    const body = record.body ?? {};
    // The agent's own turns offer it tools; side requests (titles, summaries, probes) do not.
    const step = this.stepFor(record, Array.isArray(body.tools) && body.tools.length > 0) ?? { text: 'ok' };
    if (step.error !== undefined)
      return json(res, { type: 'error', error: { type: 'invalid_request_error', message: step.error } }, 400);
    const model = typeof body.model === 'string' ? body.model : 'claude-sonnet-4-5';
    const content: any[] = [];
    if (step.text) content.push({ type: 'text', text: step.text });
    for (const tool of step.tools ?? [])
      content.push({ type: 'tool_use', id: this.nextId('toolu'), name: tool.name, input: tool.input });
    const stopReason = step.tools?.length ? 'tool_use' : 'end_turn';
    const usage = {
      input_tokens: INPUT_TOKENS,
      output_tokens: OUTPUT_TOKENS,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
    };
    const id = this.nextId('msg');
    if (!body.stream) {
      return json(res, {
        id,
        type: 'message',
        role: 'assistant',
        model,
        content,
        stop_reason: stopReason,
        stop_sequence: null,
        usage,
      });
    }
    const sse = startSse(res);
    sse('message_start', {
      type: 'message_start',
      message: {
        id,
        type: 'message',
        role: 'assistant',
        model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { ...usage, output_tokens: 1 },
      },
    });
    content.forEach((block, index) => {
      if (block.type === 'text') {
        sse('content_block_start', { type: 'content_block_start', index, content_block: { type: 'text', text: '' } });
        sse('content_block_delta', {
          type: 'content_block_delta',
          index,
          delta: { type: 'text_delta', text: block.text },
        });
      } else {
        sse('content_block_start', {
          type: 'content_block_start',
          index,
          content_block: { type: 'tool_use', id: block.id, name: block.name, input: {} },
        });
        sse('content_block_delta', {
          type: 'content_block_delta',
          index,
          delta: { type: 'input_json_delta', partial_json: JSON.stringify(block.input) },
        });
      }
      sse('content_block_stop', { type: 'content_block_stop', index });
    });
    sse('message_delta', {
      type: 'message_delta',
      delta: { stop_reason: stopReason, stop_sequence: null },
      usage: { output_tokens: OUTPUT_TOKENS },
    });
    sse('message_stop', { type: 'message_stop' });
    res.end();
  }

  private responses(record: RecordedRequest, res: http.ServerResponse): void {
    const body = record.body ?? {};
    const step = this.stepFor(record, Array.isArray(body.tools) && body.tools.length > 0) ?? { text: 'ok' };
    if (step.error !== undefined)
      return json(res, { error: { message: step.error, type: 'invalid_request_error', param: null, code: null } }, 400);
    const model = typeof body.model === 'string' ? body.model : 'gpt-5';
    const output: any[] = [];
    if (step.text) {
      output.push({
        type: 'message',
        id: this.nextId('msg'),
        role: 'assistant',
        status: 'completed',
        content: [{ type: 'output_text', text: step.text, annotations: [] }],
      });
    }
    for (const tool of step.tools ?? []) {
      output.push({
        type: 'function_call',
        id: this.nextId('fc'),
        call_id: this.nextId('call'),
        name: tool.name,
        arguments: JSON.stringify(tool.input),
        status: 'completed',
      });
    }
    const id = this.nextId('resp');
    const usage = {
      input_tokens: INPUT_TOKENS,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: OUTPUT_TOKENS,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: INPUT_TOKENS + OUTPUT_TOKENS,
    };
    const response = {
      id,
      object: 'response',
      created_at: Math.floor(Date.now() / 1000),
      model,
      status: 'in_progress',
      output: [] as any[],
      usage: null as unknown,
    };
    if (!body.stream) return json(res, { ...response, status: 'completed', output, usage });
    const sse = startSse(res);
    let seq = 0;
    const send = (type: string, data: Record<string, unknown>) => sse(type, { type, sequence_number: seq++, ...data });
    send('response.created', { response });
    output.forEach((item, outputIndex) => {
      if (item.type === 'message') {
        send('response.output_item.added', {
          output_index: outputIndex,
          item: { ...item, status: 'in_progress', content: [] },
        });
        send('response.output_text.delta', {
          output_index: outputIndex,
          item_id: item.id,
          content_index: 0,
          delta: item.content[0].text,
        });
      } else {
        send('response.output_item.added', {
          output_index: outputIndex,
          item: { ...item, status: 'in_progress', arguments: '' },
        });
      }
      send('response.output_item.done', { output_index: outputIndex, item });
    });
    send('response.completed', { response: { ...response, status: 'completed', output, usage } });
    res.end();
  }
}

function json(res: http.ServerResponse, value: unknown, status = 200): void {
  const text = JSON.stringify(value);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function startSse(res: http.ServerResponse): (event: string, data: unknown) => void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  return (event, data) => res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
}
