/**
 * A sandbox's network. Every sandbox has a network namespace of its own (bwrap --unshare-net),
 * with only a loopback interface. With `network: true`, its one way out is an HTTP/HTTPS proxy
 * run here, on the worker's host: the sandbox reaches it through a unix socket bind-mounted in,
 * bridged to 127.0.0.1:3128 inside by a small node process, and HTTP(S)_PROXY point there.
 *
 * The proxy lets a request through only to a host on the allowlist, and only when every address
 * the name resolves to is public — the check is on the resolved address, and the connection goes
 * to that very address, so a name that resolves to loopback or a private range (DNS rebinding)
 * gets nowhere. The one exception is an exact host:port the worker's own configuration names (a
 * model server on loopback via ANTHROPIC_BASE_URL, an operator's FLOTILLA_EGRESS_ALLOW entry);
 * a request can add hosts, never such an exception. Refused attempts are reported in the
 * command's output.
 */
import { randomBytes } from 'node:crypto';
import dns from 'node:dns/promises';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setting } from '../../config/variables';
import type { ExecResult } from '../types';

/** Who may be reached. Host entries: "name" (ports 80 and 443), "name:port", "*.domain" (subdomains). */
export interface EgressRules {
  /** Reachable on public addresses only. */
  hosts: string[];
  /** Exact host:port entries named by the worker's configuration: reachable whatever they resolve to. */
  trusted: string[];
}

/** Package registries a setupCmd installs from. */
export const REGISTRY_HOSTS = [
  'registry.npmjs.org',
  'registry.yarnpkg.com',
  'pypi.org',
  'files.pythonhosted.org',
  'deb.debian.org',
  'security.debian.org',
  'archive.ubuntu.com',
  'security.ubuntu.com',
  'crates.io',
  'index.crates.io',
  'static.crates.io',
  'proxy.golang.org',
  'sum.golang.org',
  'rubygems.org',
];

/** Where commands inside find the proxy. */
const BRIDGE_PORT = 3128;
const SOCKET_INSIDE = '/run/flotilla-egress.sock';
/** Refusals listed in a command's output; more are counted. */
const MAX_LISTED_REFUSALS = 10;

/** host:port of a URL (the port filled in from its scheme), or undefined for anything else. */
export function urlEndpoint(url: string | undefined): string | undefined {
  if (!url) return undefined;
  try {
    const u = new URL(url);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') return undefined;
    return `${u.hostname}:${u.port || (u.protocol === 'https:' ? '443' : '80')}`;
  } catch {
    return undefined;
  }
}

/**
 * The operator's additions, from the worker's environment: FLOTILLA_EGRESS_ALLOW, entries
 * separated by commas or spaces. An entry with a port is exact and trusted (it may be on a
 * private network, it is the operator's own); one without is a public host on ports 80 and 443.
 */
export function operatorRules(env: NodeJS.ProcessEnv = process.env): EgressRules {
  const entries = setting('FLOTILLA_EGRESS_ALLOW', env);
  return { hosts: entries.filter((e) => !hasPort(e)), trusted: entries.filter(hasPort).map(normalizeEntry) };
}

/** An agent's model API: its default hosts, and the exact endpoint the worker's environment points it at. */
export function modelApiRules(
  api: { hosts: readonly string[]; baseUrlEnv: string } | undefined,
  env: NodeJS.ProcessEnv = process.env,
): EgressRules {
  const endpoint = api && urlEndpoint(env[api.baseUrlEnv]);
  return { hosts: [...(api?.hosts ?? [])], trusted: endpoint ? [endpoint] : [] };
}

/** What a sandbox may reach: registries, the request's hosts, the operator's, and a command's own grant. */
export function sandboxRules(
  requestHosts: readonly string[] = [],
  grant?: EgressRules,
  env: NodeJS.ProcessEnv = process.env,
): EgressRules {
  const operator = operatorRules(env);
  return {
    hosts: [...REGISTRY_HOSTS, ...requestHosts, ...operator.hosts, ...(grant?.hosts ?? [])].map(normalizeEntry),
    trusted: [...operator.trusted, ...(grant?.trusted ?? [])].map(normalizeEntry),
  };
}

/**
 * The allowlist as names for a cloud provider's firewall (E2B's allowOut), which filters by name
 * on ports 80 and 443 and cannot reach this host's loopback or private network anyway: ports
 * dropped, and local addresses left out.
 */
export function cloudAllowList(rules: EgressRules): string[] {
  const blocked = blockedAddresses();
  const names = [...rules.hosts, ...rules.trusted].map((e) => splitEntry(e).name.replace(/^\[(.*)\]$/, '$1'));
  return [...new Set(names)].filter((n) => !net.isIP(n) || !blocked.check(n, net.isIPv6(n) ? 'ipv6' : 'ipv4'));
}

const hasPort = (entry: string) => /:\d+$/.test(entry);
/** "name:port" into its parts; an IPv6 address is in brackets, so the last colon is the port's. */
function splitEntry(entry: string): { name: string; port?: number } {
  if (!hasPort(entry)) return { name: entry };
  const colon = entry.lastIndexOf(':');
  return { name: entry.slice(0, colon), port: Number(entry.slice(colon + 1)) };
}
const normalizeEntry = (entry: string) =>
  entry
    .trim()
    .toLowerCase()
    .replace(/\.(?=:|$)/, '');

/** Addresses a sandbox never reaches unless trusted: this host's own, loopback, private, link-local, multicast. */
function blockedAddresses(): net.BlockList {
  const list = new net.BlockList();
  const v4 = [
    '0.0.0.0/8',
    '10.0.0.0/8',
    '100.64.0.0/10',
    '127.0.0.0/8',
    '169.254.0.0/16',
    '172.16.0.0/12',
    '192.0.0.0/24',
    '192.168.0.0/16',
    '224.0.0.0/4',
    '240.0.0.0/4',
  ];
  // BlockList checks an IPv4-mapped address against the IPv4 rules; NAT64 and 6to4 addresses
  // embed an IPv4 address too, and are refused as a whole.
  const v6 = ['::/127', '64:ff9b::/96', '2002::/16', 'fc00::/7', 'fe80::/10', 'ff00::/8'];
  for (const cidr of v4) list.addSubnet(cidr.split('/')[0], Number(cidr.split('/')[1]), 'ipv4');
  for (const cidr of v6) list.addSubnet(cidr.split('/')[0], Number(cidr.split('/')[1]), 'ipv6');
  // A service listening on all interfaces is reachable on the host's public address too.
  for (const addrs of Object.values(os.networkInterfaces())) {
    for (const a of addrs ?? []) list.addAddress(a.address, a.family === 'IPv6' ? 'ipv6' : 'ipv4');
  }
  return list;
}

type Decision = { address: string } | { refused: string };

export class EgressPolicy {
  private readonly blocked = blockedAddresses();

  constructor(private readonly rules: EgressRules) {}

  private listed(host: string, port: number): boolean {
    return this.rules.hosts.some((entry) => {
      const { name, port: entryPort } = splitEntry(entry);
      const portOk = entryPort === undefined ? port === 443 || port === 80 : port === entryPort;
      const nameOk = name.startsWith('*.') ? host.endsWith(name.slice(1)) : host === name;
      return portOk && nameOk;
    });
  }

  /** Where to connect for host:port, resolved once here so the address checked is the one used. */
  async decide(rawHost: string, port: number): Promise<Decision> {
    const host = normalizeEntry(rawHost.replace(/^\[(.*)\]$/, '$1'));
    // Entries write an IPv6 address in brackets, as URLs do.
    const name = net.isIPv6(host) ? `[${host}]` : host;
    const trusted = this.rules.trusted.includes(`${name}:${port}`);
    if (!trusted && !this.listed(name, port)) return { refused: `${name}:${port} is not on the sandbox's allowlist` };
    let addresses: { address: string; family: number }[];
    try {
      addresses = net.isIP(host) ? [{ address: host, family: net.isIP(host) }] : await dns.lookup(host, { all: true });
    } catch (err) {
      return { refused: `${host} does not resolve (${(err as NodeJS.ErrnoException).code ?? 'error'})` };
    }
    if (addresses.length === 0) return { refused: `${host} does not resolve` };
    if (!trusted) {
      const bad = addresses.find((a) => this.blocked.check(a.address, a.family === 6 ? 'ipv6' : 'ipv4'));
      if (bad)
        return { refused: `${host} resolves to ${bad.address}, a loopback, private, link-local or local address` };
    }
    return { address: addresses[0].address };
  }
}

/** host and port of a CONNECT target ("name:443", "[::1]:443"). */
function parseAuthority(target: string): { host: string; port: number } | undefined {
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
class EgressProxy {
  private readonly sockets = new Set<net.Socket>();
  readonly refusals: string[] = [];
  private refusedCount = 0;
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
    const decision = target ? await this.policy.decide(target.host, target.port) : { refused: 'not a host:port' };
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
    const decision =
      url?.protocol === 'http:'
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

/** A command's view of its network, for the sandbox provider to apply. */
export interface SandboxNet {
  /** bubblewrap arguments: always its own network namespace, plus the proxy socket when networked. */
  bwrapArgs: string[];
  /** The proxy variables. */
  env: Record<string, string>;
  /** Wraps the command's argv so the proxy bridge listens before it starts. */
  command(argv: string[]): string[];
}

/**
 * Node code run inside the sandbox: listens on 127.0.0.1:<port>, pipes each connection to the
 * unix socket, and once listening runs the command, exiting as it does.
 */
const BRIDGE = `
const net = require('net'), os = require('os'), { spawn } = require('child_process');
const [port, sock, ...cmd] = process.argv.slice(1);
const server = net.createServer((c) => {
  const u = net.connect(sock);
  const end = () => { c.destroy(); u.destroy(); };
  c.on('error', end); u.on('error', end); c.on('close', end); u.on('close', end);
  c.pipe(u); u.pipe(c);
});
server.on('error', (e) => { console.error('flotilla egress bridge: ' + e.message); process.exit(125); });
server.listen(Number(port), '127.0.0.1', () => {
  const child = spawn(cmd[0], cmd.slice(1), { stdio: 'inherit' });
  child.on('error', (e) => { console.error(e.message); process.exit(127); });
  child.on('exit', (code, sig) => process.exit(code ?? 128 + (os.constants.signals[sig] || 0)));
});`;

/**
 * Runs one command with its network: none at all, or the allowlisting proxy for the command's
 * lifetime. Refused connections are appended to its output (and streamed to onOutput).
 */
export async function withSandboxNet(
  rules: EgressRules | undefined,
  onOutput: ((chunk: string) => void) | undefined,
  run: (net: SandboxNet) => Promise<ExecResult>,
): Promise<ExecResult> {
  if (!rules) return run({ bwrapArgs: ['--unshare-net'], env: {}, command: (argv) => argv });
  // Unix socket paths are short (108 bytes): a private directory of its own under /tmp.
  const dir = await mkdtemp(path.join(os.tmpdir(), 'flotilla-egress-'));
  const socketPath = path.join(dir, `${randomBytes(4).toString('hex')}.sock`);
  const proxy = new EgressProxy(new EgressPolicy(rules));
  try {
    await proxy.listen(socketPath);
    // bwrap may run as another user, who must reach the socket to mount it; inside, the socket is
    // all a sandbox sees of this directory, and no sandbox sees the host's /tmp.
    await chmod(dir, 0o711);
    await chmod(socketPath, 0o666);
    const url = `http://127.0.0.1:${BRIDGE_PORT}`;
    const result = await run({
      bwrapArgs: ['--unshare-net', '--ro-bind', socketPath, SOCKET_INSIDE],
      env: { HTTP_PROXY: url, HTTPS_PROXY: url, http_proxy: url, https_proxy: url, NO_PROXY: '', no_proxy: '' },
      command: (argv) => [process.execPath, '-e', BRIDGE, String(BRIDGE_PORT), SOCKET_INSIDE, ...argv],
    });
    const note = proxy.report();
    if (!note) return result;
    onOutput?.(note);
    return { ...result, output: result.output + note };
  } finally {
    await proxy.close();
    await rm(dir, { recursive: true, force: true });
  }
}
