/**
 * Reaching a secured cluster: a real nginx terminates TLS (and checks an API key) in front of
 * the suite's dev server; a real worker process and the real CLI connect through it with the
 * Temporal CLI's settings (TEMPORAL_* variables, a temporal.toml profile).
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import YAML from 'yaml';
import { type Ran, CLI, spawnWorker, waitFor } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { shellRequest, subTask, withGates, writeAgent } from '../support/requests';
import { tempDir } from '../support/temp';
import { type TlsProxy, startTlsProxy } from '../support/tls-proxy';

/** The environment without any Temporal setting of the caller's, so each test says exactly what it configures. */
function envWith(settings: Record<string, string>): NodeJS.ProcessEnv {
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith('TEMPORAL_') || k === 'TEMPORAL_CLI_PATH'),
  );
  // No temporal.toml of this machine's user either.
  return { ...env, TEMPORAL_CONFIG_FILE: path.join(tempDir('no-config'), 'none.toml'), ...settings };
}

function cli(args: string[], settings: Record<string, string>): Promise<Ran> {
  return new Promise((resolve) => {
    execFile(
      CLI[0],
      [...CLI.slice(1), ...args],
      { encoding: 'utf8', env: envWith(settings), timeout: 120_000 },
      (error, out, err) => {
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, out, err });
      },
    );
  });
}

let proxy: TlsProxy;
beforeAll(async () => {
  proxy = await startTlsProxy(inject('temporalAddress'));
});

const request = (url: string) =>
  shellRequest(url, [subTask('one', writeAgent('one/greeting.txt', 'hello over tls'))], {
    testCmd: 'cat one/greeting.txt',
  });

describe('a TLS cluster', () => {
  it('a worker process and the CLI reach it with TEMPORAL_TLS_SERVER_CA_CERT_PATH: a run is pushed, status works, the worker output is quiet', async () => {
    const tls = {
      TEMPORAL_ADDRESS: proxy.address,
      TEMPORAL_TLS_SERVER_CA_CERT_PATH: proxy.caPath,
      FLOTILLA_TASK_QUEUE: `tls-${randomUUID()}`,
    };
    const worker = spawnWorker(envWith({ ...tls, FLOTILLA_HOME: tempDir('tls-home') }));
    expect(await worker.polling()).toContain(`at ${proxy.address}`);

    const remote = await makeRemote({ 'README.md': 'x\n' });
    const file = path.join(remote.root, 'req.yaml');
    writeFileSync(file, YAML.stringify(request(remote.url)));
    const started = await cli(['start', file, '--id', `tls-${randomUUID()}`, '--wait'], tls);
    expect(started.err).toBe('');
    expect(started.out).toMatch(/: pushed/);
    expect(await remote.show('main', 'one/greeting.txt')).toBe('hello over tls\n');
    const id = /Started run (\S+)/.exec(started.out)![1];
    const status = await cli(['status', id], tls);
    expect(status.code).toBe(0);
    expect(status.out).toMatch(/phase:\s+done \(pushed\)/);

    // An ordinary failure: a person rejects the plan. The worker says so in one line.
    writeFileSync(file, YAML.stringify({ ...request(remote.url), ...withGates('plan') }));
    const gated = /Started run (\S+)/.exec((await cli(['start', file], tls)).out)![1];
    await waitFor('the plan gate', async () =>
      (await cli(['status', gated], tls)).out.includes('awaiting-plan-approval') ? true : undefined,
    );
    expect((await cli(['reject', gated, '--gate', 'plan', '--reason', 'not today', '--by', 'bo'], tls)).err).toBe('');
    expect((await cli(['result', gated], tls)).out).toContain('bo rejected the plan gate: not today');
    await waitFor('the worker to log the rejection', async () =>
      worker.output().includes('not today') ? true : undefined,
    );
    expect(await worker.stop()).toBe(0);
    const output = worker.output();
    expect(output.split('\n').filter((line) => line.includes('not today'))).toHaveLength(1);
  });

  it('a wrong CA is refused, by the CLI and the worker, with a message that says it is a TLS problem', async () => {
    const wrongCa = {
      TEMPORAL_ADDRESS: proxy.address,
      TEMPORAL_TLS_SERVER_CA_CERT_PATH: proxy.wrongCaPath,
      FLOTILLA_HOME: tempDir('wrong-ca'),
    };
    const [status, worker] = await Promise.all([cli(['status', 'any-run'], wrongCa), cli(['worker'], wrongCa)]);
    for (const r of [status, worker]) {
      expect(r.code).not.toBe(0);
      expect(r.err).toContain(`cannot reach Temporal at ${proxy.address}: TLS handshake failed (`);
      expect(r.err).toContain('check the server CA');
      expect(r.err).not.toMatch(/\n\s+at /);
    }
  });

  it('a temporal.toml profile names the address, CA and API key; the same profile without the key is refused', async () => {
    const dir = tempDir('profile');
    const config = path.join(dir, 'temporal.toml');
    const profile = (name: string, apiKey?: string) =>
      `[profile.${name}]\naddress = "${proxy.keyedAddress}"\n${apiKey ? `api_key = "${apiKey}"\n` : ''}` +
      `[profile.${name}.tls]\nserver_ca_cert_path = "${proxy.caPath}"\n`;
    writeFileSync(config, `${profile('keyed', proxy.apiKey)}\n${profile('keyless')}`);
    const file = path.join(dir, 'req.yaml');
    writeFileSync(file, YAML.stringify(request(path.join(dir, 'nowhere.git'))));
    const queue = { FLOTILLA_TASK_QUEUE: `profile-${randomUUID()}`, TEMPORAL_CONFIG_FILE: config };

    const keyed = await cli(['start', file], { ...queue, TEMPORAL_PROFILE: 'keyed' });
    expect(keyed.code, keyed.err).toBe(0);
    // No worker serves this queue: the CLI says so, and that is all it has to say.
    expect(keyed.err).toContain('no worker is polling task queue');
    expect(keyed.err).not.toContain('cannot reach');
    expect(keyed.out).toMatch(/Started run flotilla-/);

    const keyless = await cli(['start', file], { ...queue, TEMPORAL_PROFILE: 'keyless' });
    expect(keyless.code).not.toBe(0);
    expect(keyless.err).toContain(`cannot reach Temporal at ${proxy.keyedAddress} (profile "keyless" of ${config})`);
    expect(keyless.out).not.toContain('Started run');

    const missing = await cli(['start', file], { ...queue, TEMPORAL_PROFILE: 'prod' });
    expect(missing.err).toContain(`bad Temporal configuration (profile "prod" of ${config}): Profile 'prod' not found`);
  });

  it('a worker refuses to start when its client key or a config file holding an API key is readable inside sandboxes', async () => {
    // Sandboxes mount /etc, /opt... read-only; FLOTILLA_SANDBOX_RO_PATHS adds the proxy's directory.
    const visible = { FLOTILLA_SANDBOX_RO_PATHS: proxy.dir, FLOTILLA_HOME: tempDir('visible') };
    const keyPath = path.join(proxy.dir, 'server.key');
    const mtls = await cli(['worker'], {
      ...visible,
      TEMPORAL_ADDRESS: proxy.address,
      TEMPORAL_TLS_SERVER_CA_CERT_PATH: proxy.caPath,
      TEMPORAL_TLS_CLIENT_CERT_PATH: path.join(proxy.dir, 'server.pem'),
      TEMPORAL_TLS_CLIENT_KEY_PATH: keyPath,
    });
    expect(mtls.code).not.toBe(0);
    expect(mtls.err).toContain(
      `refusing to start: ${keyPath} holds Temporal credentials, and every sandbox can read it (${proxy.dir} is mounted into sandboxes)`,
    );

    const config = path.join(proxy.dir, 'temporal.toml');
    writeFileSync(
      config,
      `[profile.default]\naddress = "${proxy.keyedAddress}"\napi_key = "${proxy.apiKey}"\n[profile.default.tls]\nserver_ca_cert_path = "${proxy.caPath}"\n`,
    );
    const keyed = await cli(['worker'], { ...visible, TEMPORAL_CONFIG_FILE: config });
    expect(keyed.code).not.toBe(0);
    expect(keyed.err).toContain(`refusing to start: ${config} holds Temporal credentials`);
    expect(keyed.err).not.toContain(proxy.apiKey);
  });
});
