/**
 * A TLS-terminating gRPC proxy (real nginx) in front of the suite's plaintext dev server, with
 * certificates made by openssl for this test only: what a secured cluster looks like to a client.
 * Two listeners: `address` needs only TLS; `keyedAddress` also needs `Authorization: Bearer <apiKey>`,
 * the header an API key becomes.
 */
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { releaseAtEnd } from './cleanup';
import { freePort } from './ports';
import { waitFor } from './processes';
import { tempDir } from './temp';

export interface TlsProxy {
  address: string;
  keyedAddress: string;
  apiKey: string;
  /** The CA that signed the proxy's certificate, and one that did not. */
  caPath: string;
  wrongCaPath: string;
  dir: string;
}

function openssl(dir: string, args: string[]): void {
  execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
}

function makeCa(dir: string, name: string): void {
  openssl(dir, [
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-days',
    '1',
    '-subj',
    `/CN=${name}`,
    '-keyout',
    `${name}.key`,
    '-out',
    `${name}.pem`,
  ]);
}

function makeCertificates(dir: string): void {
  makeCa(dir, 'ca');
  makeCa(dir, 'wrong-ca');
  openssl(dir, [
    'req',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-subj',
    '/CN=localhost',
    '-keyout',
    'server.key',
    '-out',
    'server.csr',
  ]);
  writeFileSync(path.join(dir, 'server.ext'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n');
  openssl(dir, [
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    'ca.pem',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-days',
    '1',
    '-extfile',
    'server.ext',
    '-out',
    'server.pem',
  ]);
}

function listening(port: number): Promise<true | undefined> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port }, () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(undefined));
  });
}

/** The proxy in front of `upstream`, once both listeners answer; stopped when the test (or file) ends. */
export async function startTlsProxy(upstream: string): Promise<TlsProxy> {
  const dir = tempDir('tls');
  makeCertificates(dir);
  const tmp = path.join(dir, 'tmp');
  mkdirSync(tmp);
  chmodSync(tmp, 0o777);
  const [port, keyedPort] = [await freePort(), await freePort()];
  const apiKey = randomBytes(12).toString('hex');
  // Long polls last about a minute: the proxy must not cut them.
  const server = (listen: number, guard: string) => `
    server {
      listen 127.0.0.1:${listen} ssl http2;
      ssl_certificate ${dir}/server.pem;
      ssl_certificate_key ${dir}/server.key;
      grpc_read_timeout 300s;
      grpc_send_timeout 300s;
      client_body_timeout 300s;
      location / {
        ${guard}
        grpc_pass grpc://${upstream};
      }
    }`;
  writeFileSync(
    path.join(dir, 'nginx.conf'),
    `${process.getuid?.() === 0 ? 'user root;' : ''}
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path ${tmp}/body;
  proxy_temp_path ${tmp}/proxy;
  fastcgi_temp_path ${tmp}/fastcgi;
  uwsgi_temp_path ${tmp}/uwsgi;
  scgi_temp_path ${tmp}/scgi;
  keepalive_timeout 300s;
  ${server(port, '')}
  ${server(keyedPort, `if ($http_authorization != "Bearer ${apiKey}") { return 401; }`)}
}
`,
  );
  const nginx = spawn('nginx', ['-p', dir, '-e', `${dir}/error.log`, '-c', `${dir}/nginx.conf`, '-g', 'daemon off;'], {
    stdio: 'ignore',
  });
  const exited = new Promise((resolve) => nginx.once('exit', resolve));
  releaseAtEnd(async () => {
    if (nginx.exitCode === null && nginx.signalCode === null) nginx.kill('SIGTERM');
    await exited;
  });
  await waitFor(
    `nginx listening on ${port} and ${keyedPort}`,
    async () => (await listening(port)) && (await listening(keyedPort)),
    15_000,
  ).catch((err) => {
    throw new Error(`${err.message}: ${readFileSync(path.join(dir, 'error.log'), 'utf8')}`);
  });
  return {
    address: `localhost:${port}`,
    keyedAddress: `localhost:${keyedPort}`,
    apiKey,
    caPath: path.join(dir, 'ca.pem'),
    wrongCaPath: path.join(dir, 'wrong-ca.pem'),
    dir,
  };
}
