/**
 * A sandbox's network. Every sandbox has a network namespace of its own (bwrap --unshare-net),
 * with only a loopback interface. With `network: true`, its one way out is the egress proxy run
 * here, on the worker's host: the sandbox reaches it through a unix socket bind-mounted in,
 * bridged to 127.0.0.1:3128 inside by a small node process, and HTTP(S)_PROXY point there.
 * Refused attempts are reported in the command's output.
 */
import { randomBytes } from 'node:crypto';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { ExecResult } from '../types';
import { EgressPolicy } from './policy';
import { EgressProxy } from './proxy';
import type { EgressRules } from './rules';

/** Where commands inside find the proxy. */
const BRIDGE_PORT = 3128;
const SOCKET_INSIDE = '/run/flotilla-egress.sock';

/** A command's view of its network, for the sandbox provider to apply. */
export interface SandboxNet {
  /** bubblewrap arguments: always its own network namespace, plus the proxy socket when networked. */
  bwrapArgs: string[];
  /** The proxy variables. */
  env: Record<string, string>;
  /** With the proxy: the program that runs the command's argv (which follows it) once the proxy bridge listens. */
  bridge?: string[];
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
  if (!rules) return run({ bwrapArgs: ['--unshare-net'], env: {} });
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
      bridge: [process.execPath, '-e', BRIDGE, String(BRIDGE_PORT), SOCKET_INSIDE],
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
