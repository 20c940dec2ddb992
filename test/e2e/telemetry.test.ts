/**
 * Tracing: a real OTLP/HTTP receiver (JSON, the exporter's own encoding), real `flotilla worker`
 * processes and `flotilla start`. With an endpoint, one run is one trace from the CLI through
 * the leader and worker workflows to their activities, and spans carry identifiers, not
 * payloads; without one, nothing of OpenTelemetry is loaded and nothing is sent.
 */
import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import YAML from 'yaml';
import { awaitRun } from '../../src/client/index';
import { startTracing } from '../../src/temporal/telemetry';
import { releaseAtEnd } from '../support/cleanup';
import { CLI, flotilla, run, startWorkerProcess, waitFor } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { fixtureHistories, fixtureReleases, replay } from '../support/replay';
import { greet, shellRequest } from '../support/requests';
import { tempDir } from '../support/temp';

interface Span {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  service: string;
  attributes: { key: string; value: Record<string, unknown> }[];
}

/** An OTLP/HTTP collector that keeps every span it is sent, and counts the requests. */
async function receiver(port = 0): Promise<{ url: string; spans: Span[]; requests: () => number }> {
  const spans: Span[] = [];
  let requests = 0;
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      requests++;
      if (req.url !== '/v1/traces' || !String(req.headers['content-type']).includes('json')) {
        res.writeHead(415).end();
        return;
      }
      for (const rs of JSON.parse(body).resourceSpans ?? []) {
        const service = rs.resource?.attributes?.find((a: { key: string }) => a.key === 'service.name')?.value
          ?.stringValue;
        for (const ss of rs.scopeSpans ?? []) for (const s of ss.spans ?? []) spans.push({ ...s, service });
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(port, '127.0.0.1', () => resolve()));
  releaseAtEnd(() => new Promise((resolve) => server.close(resolve)));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, spans, requests: () => requests };
}

let client: Client;
beforeAll(async () => {
  client = new Client({ connection: await Connection.connect({ address: inject('temporalAddress') }) });
  releaseAtEnd(() => client.connection.close());
});

function requestFile(url: string, objective: string): string {
  const file = path.join(tempDir('telemetry-req'), 'flotilla.yaml');
  writeFileSync(file, YAML.stringify(shellRequest(url, [greet('one'), greet('two')], { objective })));
  return file;
}

const EXPECTED = [
  'StartWorkflow:leaderWorkflow',
  'RunWorkflow:leaderWorkflow',
  'StartChildWorkflow:workerWorkflow',
  'RunWorkflow:workerWorkflow',
  'StartActivity:runAgent',
  'RunActivity:runAgent',
  'StartActivity:runTests',
  'RunActivity:runTests',
];

describe('with an OTLP endpoint', () => {
  it('`flotilla start` opens one trace that follows the run through leader, workers and activities, without payloads', async () => {
    const otlp = await receiver();
    const taskQueue = `traced-${randomUUID()}`;
    // Short batches so spans arrive while the test waits; the worker also flushes when it stops.
    const otel = { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_BSP_SCHEDULE_DELAY: '200' };
    const worker = await startWorkerProcess(taskQueue, { ...otel, FLOTILLA_HOME: tempDir('traced') });
    const remote = await makeRemote({ 'README.md': 'traced\n' });
    expect(worker.output()).toContain(`Tracing to ${otlp.url}/v1/traces`);
    const objective = `objective-${randomUUID()}`;
    const workflowId = `traced-${randomUUID()}`;
    const started = await flotilla(
      taskQueue,
      ['start', requestFile(remote.url, objective), '--id', workflowId, '--json'],
      otel,
    );
    expect(started.err).toBe('');
    expect(started.code).toBe(0);
    expect((await awaitRun(client.workflow.getHandle(workflowId))).result?.outcome).toBe('pushed');

    const spans = await waitFor("the run's spans", async () => {
      const names = new Set(otlp.spans.map((s) => s.name));
      return EXPECTED.every((n) => names.has(n)) ? otlp.spans : undefined;
    }).catch((err: Error) => {
      throw new Error(`${err.message}; received ${[...new Set(otlp.spans.map((s) => s.name))].join(', ')}`);
    });
    const start = spans.find((s) => s.name === 'StartWorkflow:leaderWorkflow')!;
    expect(start.service).toBe('flotilla-cli');
    expect(new Set(spans.map((s) => s.traceId)), 'every span is in the trace flotilla start opened').toEqual(
      new Set([start.traceId]),
    );
    const byId = new Map(spans.map((s) => [s.spanId, s]));
    const parentOf = (name: string) => byId.get(spans.find((s) => s.name === name)!.parentSpanId ?? '')?.name;
    expect(parentOf('RunWorkflow:leaderWorkflow')).toBe('StartWorkflow:leaderWorkflow');
    expect(parentOf('RunWorkflow:workerWorkflow')).toBe('StartChildWorkflow:workerWorkflow');
    expect(parentOf('RunActivity:runAgent')).toBe('StartActivity:runAgent');
    expect(spans.filter((s) => s.name === 'RunActivity:runAgent')).toHaveLength(2);
    for (const s of spans.filter((x) => x.name !== start.name)) expect(s.service).toBe('flotilla-worker');

    // Identifiers only: no request text, no repository, whatever the workflow's info holds.
    const keys = new Set(spans.flatMap((s) => s.attributes.map((a) => a.key)));
    expect([...keys].sort()).toEqual(expect.arrayContaining(['temporalWorkflowId']));
    for (const key of keys)
      expect([
        'temporalWorkflowId',
        'run_id',
        'temporalActivityId',
        'temporalUpdateId',
        'workflowId',
        'runId',
        'workflowType',
        'taskQueue',
        'namespace',
        'attempt',
      ]).toContain(key);
    expect(JSON.stringify(spans)).not.toContain(objective);
    expect(JSON.stringify(spans)).not.toContain(remote.url);
  });

  it("a workflow's memo never reaches a span, though the workflow sink is handed the whole workflow info", async () => {
    const otlp = await receiver();
    const taskQueue = `traced-memo-${randomUUID()}`;
    const otel = { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_BSP_SCHEDULE_DELAY: '200' };
    await startWorkerProcess(taskQueue, { ...otel, FLOTILLA_HOME: tempDir('traced-memo') });
    const remote = await makeRemote({ 'README.md': 'memo\n' });
    // This process traces too (its client starts the run), so the trace starts here.
    const tracing = startTracing('flotilla-test', (line) => console.error(line), otel)!;
    const traced = new Client({
      connection: client.connection,
      interceptors: { workflow: tracing.clientInterceptors },
    });
    const marker = `memo-${randomUUID()}`;
    const handle = await traced.workflow.start('leaderWorkflow', {
      taskQueue,
      workflowId: `memo-${randomUUID()}`,
      args: [shellRequest(remote.url, [greet('one')], { objective: 'memo' })],
      memo: { note: marker },
    });
    expect((await awaitRun(handle)).result?.outcome).toBe('pushed');
    await tracing.flush();
    const spans = await waitFor("the leader's span", async () =>
      otlp.spans.some((s) => s.name === 'RunWorkflow:leaderWorkflow') ? otlp.spans : undefined,
    );
    expect(spans.find((s) => s.name === 'RunWorkflow:leaderWorkflow')!.attributes.map((a) => a.key)).toContain(
      'workflowType',
    );
    expect(JSON.stringify(spans)).not.toContain(marker);
  });
});

describe('without an OTLP endpoint', () => {
  it('loads none of OpenTelemetry', async () => {
    const probe = [
      "require('./src/worker'); require('./src/cli'); const { startTracing } = require('./src/temporal/telemetry');",
      "if (startTracing('x', console.error, {}) !== undefined) throw new Error('tracing started');",
      "console.log(JSON.stringify(Object.keys(require.cache).filter((k) => k.includes('opentelemetry'))));",
    ].join('\n');
    const r = await run(CLI[0], ['--require', CLI[2], '-e', probe], {}, path.join(__dirname, '../..'));
    expect(r.err).toBe('');
    expect(JSON.parse(r.out)).toEqual([]);
  });

  it('sends nothing, not even to the default OTLP port', async () => {
    // Bound where an exporter left to its defaults would send (localhost:4318).
    const otlp = await receiver(4318);
    const taskQueue = `untraced-${randomUUID()}`;
    const worker = await startWorkerProcess(taskQueue, { FLOTILLA_HOME: tempDir('untraced') });
    const remote = await makeRemote({ 'README.md': 'untraced\n' });
    expect(worker.output()).not.toContain('Tracing to');
    const workflowId = `untraced-${randomUUID()}`;
    const started = await flotilla(taskQueue, [
      'start',
      requestFile(remote.url, 'untraced'),
      '--id',
      workflowId,
      '--json',
    ]);
    expect(started.code).toBe(0);
    expect((await awaitRun(client.workflow.getHandle(workflowId))).result?.outcome).toBe('pushed');
    // A worker flushes its spans when it stops, and the CLI when it exits: after both, none came.
    await worker.stop();
    expect(otlp.requests()).toBe(0);
    expect(otlp.spans).toEqual([]);
  });
});

describe('configuration', () => {
  it('a worker refuses an endpoint that is not an http(s) URL, naming the variable', async () => {
    const r = await run(CLI[0], [...CLI.slice(1), 'worker'], {
      TEMPORAL_ADDRESS: '127.0.0.1:1',
      OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318',
    });
    expect(r.code).toBe(2);
    expect(r.err).toContain(
      'OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL (OTLP over HTTP), such as http://localhost:4318; not "collector:4318"',
    );
  });
});

describe('replay', () => {
  // Why a traced worker is another build (src/worker.ts): the interceptors wrap the promises workflow
  // code awaits, which can reorder its commands. If the SDK ever makes them transparent, this fails,
  // and traced and untraced workers could share runs.
  it('the committed histories, recorded untraced, do not all replay on traced workflow code', async () => {
    const histories = fixtureReleases().flatMap(fixtureHistories);
    expect(histories.length).toBeGreaterThan(5);
    const traced = await replay(histories, 'telemetry', true);
    expect(traced.replayed).toBe(histories.length);
    expect(traced.errors.length).toBeGreaterThan(0);
    for (const error of traced.errors)
      expect(error).toMatch(/^history-\S+: DeterminismViolationError: .*Nondeterminism error/);
  });
});
