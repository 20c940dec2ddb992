/**
 * `flotilla status` reads a run over gRPC or over the server's HTTP API (faster: no SDK to load).
 * Both readers pass one contract against the suite's server, and the CLI falls back to gRPC when
 * the HTTP API it was given does not answer as Temporal's.
 */
import http from 'node:http';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { httpReader } from '../../src/client/http-reader';
import { grpcReader } from '../../src/client/status';
import { TestEnv } from '../support/env';
import { flotilla } from '../support/processes';
import { type ReaderFixture, readerFixture, runReaderContract } from '../support/run-reader-contract';
import { releaseAtEnd } from '../support/cleanup';

let env: TestEnv;
let fixture: ReaderFixture;
beforeAll(async () => {
  env = await TestEnv.start();
  fixture = await readerFixture(env);
});

const httpUrl = inject('temporalHttpUrl');

runReaderContract(
  'gRPC',
  () => fixture,
  () => grpcReader(env.client),
);

describe.runIf(httpUrl)('over the HTTP API', () => {
  runReaderContract(
    'HTTP API',
    () => fixture,
    () => httpReader({ baseUrl: httpUrl, namespace: 'default' }),
  );
});

describe('flotilla status', () => {
  it('falls back to gRPC when the HTTP API it is given is something else', async () => {
    const notTemporal = http.createServer((_req, res) =>
      res.writeHead(200, { 'content-type': 'text/html' }).end('<html>'),
    );
    await new Promise<void>((r) => notTemporal.listen(0, '127.0.0.1', r));
    releaseAtEnd(() => new Promise<void>((r) => notTemporal.close(() => r())));
    const port = (notTemporal.address() as { port: number }).port;
    for (const url of [`http://127.0.0.1:${port}`, 'http://127.0.0.1:1']) {
      const r = await flotilla(env.taskQueue, ['status', fixture.live, '--json'], { FLOTILLA_TEMPORAL_HTTP_URL: url });
      expect(r.code, r.err).toBe(0);
      expect(JSON.parse(r.out)).toMatchObject({ workflowId: fixture.live, objective: fixture.liveObjective });
    }
  });

  it.runIf(httpUrl)(
    'through the HTTP API, prints what it prints over gRPC, and refuses an unknown id alike',
    async () => {
      // Nothing listens on port 1: the CLI then reads over gRPC.
      const over = (url: string, id = fixture.live) =>
        flotilla(env.taskQueue, ['status', id, '--json'], { FLOTILLA_TEMPORAL_HTTP_URL: url });
      const viaHttp = JSON.parse((await over(httpUrl)).out) as Record<string, unknown>;
      const viaGrpc = JSON.parse((await over('http://127.0.0.1:1')).out) as Record<string, unknown>;
      // Elapsed times differ between two reads; everything else is the same.
      const stable = ({ workers: _w, totals: _t, ...rest }: Record<string, unknown>) => rest;
      expect(stable(viaHttp)).toEqual(stable(viaGrpc));
      for (const url of [httpUrl, 'http://127.0.0.1:1']) {
        const none = await over(url, 'no-such-run');
        expect(none.code, url).toBe(2);
        expect(none.out, url).toContain('no run with id no-such-run');
      }
    },
  );
});
