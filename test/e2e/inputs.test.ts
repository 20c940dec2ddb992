/**
 * Careless inputs against real runs on the suite's dev server: the longest waits a request may
 * ask for, remotes that cannot work, agents the worker cannot run, requests that refuse
 * themselves, and messages to runs that have ended. Each ends the run at once with a reason a
 * person can act on, or is refused before anything starts.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { awaitRun } from '../../src/client/index';
import { statusQuery } from '../../src/contracts/messages';
import { MAX_WAIT_MINUTES } from '../../src/contracts/request';
import { releaseAtEnd } from '../support/cleanup';
import { TestEnv } from '../support/env';
import { makeRemote } from '../support/remotes';
import { greet, shellRequest } from '../support/requests';
import { waitForStatus } from '../support/runs';
import { tempDir } from '../support/temp';

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});
afterEach(() => {
  vi.unstubAllEnvs();
});

describe('the longest waits', () => {
  it('a gate that waits a year opens, shows when it expires, and is cancellable', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const gate = { mode: 'manual' as const, timeoutMinutes: MAX_WAIT_MINUTES };
    const handle = await env.start(
      shellRequest(remote.url, [greet('one')], {
        gates: { plan: gate },
        limits: { suspendTimeoutMinutes: MAX_WAIT_MINUTES },
      }),
    );
    const s = await waitForStatus(handle, 'the plan gate', (st) => st.phase === 'awaiting-plan-approval');
    expect(s.gate!.expiresAt - s.gate!.openedAt).toBe(MAX_WAIT_MINUTES * 60_000);
    await handle.cancel();
    const end = await awaitRun(handle);
    expect(end.failureType).toBe('cancelled');
  });
});

/**
 * An https forge on loopback that refuses every request with the status its path starts with
 * (`/403/repo.git`), and the CA file git must be given to trust it. Closed when the file ends.
 */
async function refusingForge(): Promise<{ url: (status: number) => string; caPath: string }> {
  const dir = tempDir('forge');
  const [key, cert] = [path.join(dir, 'key.pem'), path.join(dir, 'cert.pem')];
  execFileSync(
    'openssl',
    ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost'].concat([
      '-addext',
      'subjectAltName=DNS:localhost',
      '-keyout',
      key,
      '-out',
      cert,
    ]),
    { stdio: 'ignore' },
  );
  const server = https.createServer({ key: readFileSync(key), cert: readFileSync(cert) }, (req, res) => {
    const status = Number(req.url?.split('/')[1]);
    res.writeHead(status, status === 401 ? { 'www-authenticate': 'Basic realm="forge"' } : {}).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  releaseAtEnd(() => new Promise((resolve) => server.close(resolve)));
  const { port } = server.address() as AddressInfo;
  return { url: (status) => `https://localhost:${port}/${status}/repo.git`, caPath: cert };
}

describe('remotes that cannot work end the run within a minute, naming the URL', () => {
  const within = async (url: string) => {
    const started = Date.now();
    const end = await env.run(shellRequest(url, [greet('one')]));
    expect(Date.now() - started).toBeLessThan(60_000);
    return end;
  };

  it.each([
    [
      'a path where nothing is',
      () => path.join(tempDir('gone'), 'nothing.git'),
      'does not appear to be a git repository',
    ],
    ['a directory that is not a repository', () => 'file:///etc', "'/etc' does not appear to be a git repository"],
  ])('%s', async (_what, url, reason) => {
    const given = url();
    const end = await within(given);
    expect(end.failureType).toBe('failed');
    expect(end.failureMessage).toContain(
      `resolving the base failed: RemoteRefused: cannot reach repository ${given}: `,
    );
    expect(end.failureMessage).toContain(reason);
  });

  it.each([
    [401, "could not read Username for 'https://localhost:"],
    [403, 'The requested URL returned error: 403'],
    [404, 'not found'],
  ])('a forge that answers %i', async (status, reason) => {
    const forge = await refusingForge();
    vi.stubEnv('GIT_SSL_CAINFO', forge.caPath);
    const end = await within(forge.url(status));
    expect(end.failureMessage).toContain(`RemoteRefused: cannot reach repository ${forge.url(status)}: `);
    expect(end.failureMessage).toContain(reason);
  });

  it('an ssh host starting with "-", refused before the run begins', async () => {
    const url = 'ssh://-oProxyCommand=touch%20owned/repo.git';
    const end = await within(url);
    expect(end.failureType).toBe('InvalidRequest');
    expect(end.failureMessage).toContain('repo.url: repository names a user or host starting with "-"');
  });
});

describe('agents the worker cannot run', () => {
  it('a Codex agent on a worker without its key is refused at the start of the run, naming the key', async () => {
    vi.stubEnv('OPENAI_API_KEY', undefined);
    vi.stubEnv('CODEX_API_KEY', undefined);
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const codex = { id: 'one', prompt: 'greet', ownedPaths: ['one'], agent: { kind: 'codex' as const } };
    const handle = await env.start(shellRequest(remote.url, [codex], { sandbox: { network: true } }));
    const end = await awaitRun(handle);
    expect(end.failureType).toBe('failed');
    expect(end.failureMessage).toMatch(
      /^this worker \(host [^)]+\) cannot run the run's agents: codex: OPENAI_API_KEY or CODEX_API_KEY is not set on this worker/,
    );
    const s = await handle.query(statusQuery);
    expect([s.phase, s.baseSha, s.workers.map((w) => w.state)]).toEqual(['failed', undefined, ['queued']]);
    expect(env.sandboxesLeft()).toEqual([]);
  });
});
