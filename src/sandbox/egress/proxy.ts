/**
 * The allowlisting HTTP/CONNECT forward proxy of one command, on a unix socket the sandbox's
 * bridge reaches (see sandbox-net.ts). Each connection goes where the policy says, or is refused
 * with a 403 that says why; refused attempts are collected for the command's output.
 */
import http from 'node:http';
import net from 'node:net';
import type { EgressPolicy } from './policy';

/** Refusals listed in a command's output; more are counted. */
const MAX_LISTED_REFUSALS = 10;
/**
 * Connections a sandbox's command may have open through the proxy at once (a package manager
 * opens a few dozen); past it each is refused saying so, so one sandbox cannot take the worker's
 * file descriptors. Connections that have not asked for anything yet are held to twice as many.
 */
export const MAX_OPEN_CONNECTIONS = 256;

/** host and port of a CONNECT target ("name:443", "[::1]:443"). */
export function parseAuthority(target: string): { host: string; port: number } | undefined {
  const m = /^(\[[0-9a-fA-F:.]+\]|[^:[\]/@\s]+):(\d{1,5})$/.exec(target);
  const port = m ? Number(m[2]) : 0;
  return m && port > 0 && port < 65536 ? { host: m[1], port } : undefined;
}

/** Hop-by-hop headers a forwarding proxy drops. */
const HOP_HEADERS = new Set([
  'proxy-connection',
  'proxy-authorization',
  'connection',
  'keep-alive',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/** The allowlisting forward proxy of one command, on a unix socket. */
export class EgressProxy {
  private readonly sockets = new Set<net.Socket>();
  readonly refusals: string[] = [];
  private refusedCount = 0;
  /** Tunnels and forwarded requests open now. */
  private open = 0;
  // No deadline on a request's body: a long upload through the proxy is the command's business.
  private readonly server = http.createServer({ requestTimeout: 0 }, (req, res) => void this.forward(req, res));

  constructor(private readonly policy: EgressPolicy) {
    this.server.on(
      'connect',
      (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => void this.tunnel(req, socket, head),
    );
    this.server.on('connection', (socket: net.Socket) => {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
    });
    this.server.on('clientError', (_err, socket) => socket.destroy());
    this.server.maxConnections = 2 * MAX_OPEN_CONNECTIONS;
  }

  /** Why one more connection is refused now, if it is; otherwise counts it as open until `closed` fires. */
  private full(closed: { once(event: 'close', listener: () => void): unknown }): string | undefined {
    if (this.open >= MAX_OPEN_CONNECTIONS)
      return `the sandbox already has ${this.open} connections open through the proxy, the most it may`;
    this.open++;
    closed.once('close', () => this.open--);
    return undefined;
  }

  listen(socketPath: string): Promise<void> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(socketPath, () => resolve());
    });
  }

  private refuse(what: string, reason: string): string {
    this.refusedCount++;
    if (this.refusals.length < MAX_LISTED_REFUSALS) this.refusals.push(`${what}: ${reason}`);
    return `flotilla egress refused ${what}: ${reason}\n`;
  }

  /** HTTPS and any other TCP: CONNECT host:port. */
  private async tunnel(req: http.IncomingMessage, client: net.Socket, head: Buffer): Promise<void> {
    client.on('error', () => client.destroy());
    const target = parseAuthority(req.url ?? '');
    const busy = this.full(client);
    const decision = busy
      ? { refused: busy }
      : target
        ? await this.policy.decide(target.host, target.port)
        : { refused: 'not a host:port' };
    if ('refused' in decision) {
      const body = this.refuse(`CONNECT ${truncateTarget(req.url)}`, decision.refused);
      client.end(
        `HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
      return;
    }
    const upstream = net.connect({ host: decision.address, port: target!.port });
    this.track(upstream);
    upstream.on('error', () => {
      if (client.writable && !upstream.bytesRead) client.end('HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n');
      client.destroy();
    });
    upstream.on('connect', () => {
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length) upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    client.on('close', () => upstream.destroy());
  }

  /** Plain HTTP: an absolute-URI request, sent on to the checked address. */
  private async forward(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    req.on('error', () => res.destroy());
    res.on('error', () => req.destroy());
    let url: URL | undefined;
    try {
      url = new URL(req.url ?? '');
    } catch {
      url = undefined;
    }
    const port = url ? Number(url.port || 80) : 0;
    const busy = this.full(res);
    const decision = busy
      ? { refused: busy }
      : url?.protocol === 'http:'
        ? await this.policy.decide(url.hostname, port)
        : { refused: 'only absolute http:// URLs are proxied (use CONNECT for https)' };
    if ('refused' in decision) {
      res
        .writeHead(403, { 'Content-Type': 'text/plain', Connection: 'close' })
        .end(this.refuse(`${req.method} ${truncateTarget(req.url)}`, decision.refused));
      return;
    }
    const headers = Object.fromEntries(Object.entries(req.headers).filter(([name]) => !HOP_HEADERS.has(name)));
    const upstream = http.request({
      host: decision.address,
      port,
      method: req.method,
      path: `${url!.pathname}${url!.search}`,
      headers,
      setHost: false,
    });
    upstream.on('socket', (s) => this.track(s));
    upstream.on('response', (r) => {
      r.on('error', () => res.destroy());
      const back = Object.fromEntries(Object.entries(r.headers).filter(([name]) => !HOP_HEADERS.has(name)));
      res.writeHead(r.statusCode ?? 502, back);
      r.pipe(res);
    });
    upstream.on('error', () => (res.headersSent ? res.destroy() : res.writeHead(502, { Connection: 'close' }).end()));
    req.pipe(upstream);
  }

  private track(socket: net.Socket): void {
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
  }

  /** What the command's output should say about refused connections, if any were. */
  report(): string {
    if (this.refusedCount === 0) return '';
    const more =
      this.refusedCount > this.refusals.length ? `\n  ... and ${this.refusedCount - this.refusals.length} more` : '';
    return `\n[flotilla] the sandbox's network refused ${this.refusedCount} connection(s):\n  ${this.refusals.join('\n  ')}${more}\n`;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

const truncateTarget = (target: string | undefined) => (target ?? '').slice(0, 200);
