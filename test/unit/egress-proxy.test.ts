/** The egress proxy's cap on open connections, on a real unix socket and a real upstream server. */
import { mkdtempSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { EgressPolicy } from '../../src/sandbox/egress/policy';
import { EgressProxy, MAX_OPEN_CONNECTIONS } from '../../src/sandbox/egress/proxy';

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const done of cleanup.splice(0).reverse()) await done();
});

/** A CONNECT through the proxy at `socketPath`; resolves with the socket and the proxy's first answer. */
function connect(socketPath: string, target: string): Promise<{ socket: net.Socket; answer: string }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(socketPath, () => socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`));
    socket.once('data', (data) => resolve({ socket, answer: data.toString() }));
    socket.once('error', reject);
    cleanup.push(() => socket.destroy());
  });
}

describe('the egress proxy', () => {
  it(`refuses a connection past ${MAX_OPEN_CONNECTIONS} open at once, saying why, and takes one again once one closes`, async () => {
    const upstream = net.createServer((s) => s.on('error', () => undefined));
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    cleanup.push(() => new Promise((resolve) => upstream.close(resolve)));
    const target = `127.0.0.1:${(upstream.address() as net.AddressInfo).port}`;
    const proxy = new EgressProxy(new EgressPolicy({ hostnames: [], trusted: [target] }));
    const socketPath = path.join(mkdtempSync(path.join(os.tmpdir(), 'flotilla-proxy-')), 'p.sock');
    await proxy.listen(socketPath);
    cleanup.push(() => proxy.close());

    const open = await Promise.all(Array.from({ length: MAX_OPEN_CONNECTIONS }, () => connect(socketPath, target)));
    expect(open.every((c) => c.answer.startsWith('HTTP/1.1 200'))).toBe(true);
    const refused = await connect(socketPath, target);
    expect(refused.answer).toContain('HTTP/1.1 403 Forbidden');
    expect(refused.answer).toContain(
      `flotilla egress refused CONNECT ${target}: the sandbox already has ${MAX_OPEN_CONNECTIONS} connections open through the proxy, the most it may`,
    );
    expect(proxy.report()).toContain('the most it may');

    open[0].socket.destroy();
    const again = async (): Promise<string> => {
      const c = await connect(socketPath, target);
      if (c.answer.startsWith('HTTP/1.1 200')) return c.answer;
      c.socket.destroy();
      await new Promise((resolve) => setImmediate(resolve));
      return again();
    };
    expect(await again()).toMatch(/^HTTP\/1\.1 200/);
  });
});
