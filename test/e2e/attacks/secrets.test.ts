/**
 * Secrets against a hostile agent and hostile requests: the git token goes only to the hosts the
 * worker allows, credentials in a repository URL are refused without being repeated, agents' API
 * keys are redacted from everything that leaves the sandbox, output floods do not grow the
 * worker, and the data directory is private. Real runs, real git, a real https server.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StagingRepo } from '../../../src/git/staging';
import { releaseAtEnd } from '../../support/cleanup';
import { TestEnv } from '../../support/env';
import { ModelServer } from '../../support/model-server';
import { flotilla, waitFor } from '../../support/processes';
import { makeRemote } from '../../support/remotes';
import { shellRequest, subTask } from '../../support/requests';
import { tempDir } from '../../support/temp';

// Built from pieces so that no request, and so no workflow history, contains it whole.
const KEY_HEAD = 'sk-ant-api03-';
const KEY_TAIL = 'Zq8mXw4TestOnlyKey';
const API_KEY = KEY_HEAD + KEY_TAIL;
const GIT_TOKEN = 'ghp_testOnlyToken0123456789';

let env: TestEnv;
const saved = { ...process.env };
beforeAll(async () => {
  process.env.ANTHROPIC_API_KEY = API_KEY;
  env = await TestEnv.start();
});
afterAll(() => {
  for (const k of ['ANTHROPIC_API_KEY', 'FLOTILLA_GIT_TOKEN', 'FLOTILLA_GIT_TOKEN_HOSTS', 'GIT_SSL_CAINFO']) {
    if (saved[k] === undefined) delete process.env[k];
    else process.env[k] = saved[k];
  }
});

/** Every file under `dir`, recursively. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? filesUnder(p) : e.isFile() ? [p] : [];
  });
}

/** The heartbeat details of a worker's running activities, as JSON text. */
async function heartbeats(workflowId: string): Promise<string> {
  const d = await env.client.workflow.getHandle(workflowId).describe();
  return (d.raw.pendingActivities ?? [])
    .flatMap((a) => a.heartbeatDetails?.payloads ?? [])
    .map((p) => Buffer.from(p.data ?? []).toString())
    .join('\n');
}

describe('credentials in a repository URL', () => {
  const url = `https://x-access-token:${GIT_TOKEN}@github.com/acme/app.git`;

  it('are refused by validate and start, and the message does not repeat them', async () => {
    const dir = tempDir('req');
    const file = path.join(dir, 'request.json');
    writeFileSync(file, JSON.stringify(shellRequest(url, [subTask('a', 'true')])));
    for (const command of ['validate', 'start']) {
      const r = await flotilla(env.taskQueue, [command, file]);
      expect(r.code).toBe(2);
      expect(r.err).toContain('repo.url: repository must not contain credentials');
      expect(r.out + r.err).not.toContain(GIT_TOKEN);
    }
  });

  it('are refused by the workflow too, without echoing them in the failure', async () => {
    const end = await env.run(shellRequest(url, [subTask('a', 'true')]));
    expect(end.failureType).toBe('InvalidRequest');
    expect(end.failureMessage).toContain('repo.url: repository must not contain credentials');
    expect(end.failureMessage).not.toContain(GIT_TOKEN);
  });
});

describe('the git token', () => {
  it('goes only to an allowed host, and not along a redirect to another one', async () => {
    const dir = tempDir('tls');
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-days',
        '1',
        '-subj',
        '/CN=localhost',
        '-addext',
        'subjectAltName=DNS:localhost,IP:127.0.0.1',
        '-keyout',
        path.join(dir, 'key.pem'),
        '-out',
        path.join(dir, 'cert.pem'),
      ],
      { stdio: 'ignore' },
    );
    const seen: { host: string; url: string; authorization?: string }[] = [];
    const server = https.createServer(
      { key: readFileSync(path.join(dir, 'key.pem')), cert: readFileSync(path.join(dir, 'cert.pem')) },
      (req, res) => {
        seen.push({ host: req.headers.host ?? '', url: req.url ?? '', authorization: req.headers.authorization });
        if (req.headers.host?.startsWith('localhost') && req.url?.startsWith('/redirect')) {
          res
            .writeHead(302, { location: `https://127.0.0.1:${port}/elsewhere${req.url.slice('/redirect'.length)}` })
            .end();
        } else res.writeHead(404).end();
      },
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    process.env.FLOTILLA_GIT_TOKEN = GIT_TOKEN;
    process.env.FLOTILLA_GIT_TOKEN_HOSTS = `localhost:${port}`;
    process.env.GIT_SSL_CAINFO = path.join(dir, 'cert.pem');
    try {
      const staging = await StagingRepo.open(tempDir('staging'));
      const basic = `Basic ${Buffer.from(`x-access-token:${GIT_TOKEN}`).toString('base64')}`;
      // A host not in the list: no header at all.
      await expect(staging.remoteBranchSha(`https://127.0.0.1:${port}/repo.git`, 'main')).rejects.toThrow();
      expect(seen.length).toBeGreaterThan(0);
      expect(seen.filter((s) => s.authorization)).toEqual([]);
      // The allowed host gets it; the host it redirects to does not.
      seen.length = 0;
      await expect(staging.remoteBranchSha(`https://localhost:${port}/redirect/repo.git`, 'main')).rejects.toThrow();
      expect(seen.find((s) => s.host === `localhost:${port}`)?.authorization).toBe(basic);
      const redirected = seen.filter((s) => s.host === `127.0.0.1:${port}`);
      expect(redirected.length).toBeGreaterThan(0);
      expect(redirected.filter((s) => s.authorization)).toEqual([]);
    } finally {
      delete process.env.FLOTILLA_GIT_TOKEN;
      delete process.env.FLOTILLA_GIT_TOKEN_HOSTS;
      delete process.env.GIT_SSL_CAINFO;
      server.close();
    }
  });
});

describe("agents' API keys", () => {
  it('reach no shell agent, and one printed anyway is redacted from heartbeats, tail, result and artifacts', async () => {
    const remote = await makeRemote({ 'README.md': '# secrets\n' });
    const agent = [
      'echo "inherited: ${ANTHROPIC_API_KEY:-unset}"',
      `k="${KEY_HEAD}"; k="\${k}${KEY_TAIL}"`,
      // Split across writes too, so a secret straddling two output chunks is caught.
      'for i in $(seq 1 60); do printf "leaking %s" "${k:0:10}"; printf "%s\\n" "${k:10}"; sleep 0.1; done',
      'mkdir -p keys && echo done > keys/done.txt',
    ].join('; ');
    const handle = await env.start(shellRequest(remote.url, [subTask('keys', agent)]));
    const beat = await waitFor('a heartbeat with the leak in it', async () => {
      const text = await heartbeats(`${handle.workflowId}/keys`);
      return text.includes('leaking [redacted]') ? text : undefined;
    });
    expect(beat).toContain('leaking [redacted]');
    expect(beat).not.toContain(KEY_TAIL);
    const result = await handle.result();
    expect(result.outcome).toBe('pushed');
    const worker = result.workers[0];
    expect(worker?.tail).toContain('leaking [redacted]');
    expect(JSON.stringify(result)).not.toContain(KEY_TAIL);
    const log = env.artifact(worker!.logRef!);
    expect(log).toContain('inherited: unset');
    expect(log).toContain('leaking [redacted]');
    for (const file of filesUnder(env.dataDir)) expect(readFileSync(file).includes(KEY_TAIL), file).toBe(false);
  });
});

describe('a secret committed by an agent', () => {
  it("Claude Code writing `env` into a file it commits is refused naming the key's variable and the file, never its value; nothing is pushed", async () => {
    const server = await ModelServer.start();
    process.env.ANTHROPIC_BASE_URL = server.url;
    releaseAtEnd(() => delete process.env.ANTHROPIC_BASE_URL);
    server.script('E2E-env', [
      {
        tools: [
          {
            name: 'Bash',
            input: {
              command: 'mkdir -p envdump && env > envdump/env.txt && git add -A && git commit -qm "what I see"',
              description: 'Record the environment',
            },
          },
        ],
      },
      { text: 'Recorded it.' },
    ]);
    const remote = await makeRemote({ 'README.md': '# secrets\n' });
    const base = await remote.head();
    const end = await env.run(
      shellRequest(
        remote.url,
        [{ id: 'envdump', prompt: 'Task E2E-env: record the environment', ownedPaths: ['envdump'] }],
        {
          agent: { kind: 'claude-code' },
          sandbox: { network: true },
        },
      ),
    );
    const worker = end.result!.workers[0];
    expect(worker.status).toBe('failed');
    expect(worker.reason).toContain(
      `its work was not collected: the worker's commits: "envdump/env.txt" holds the value of ANTHROPIC_API_KEY, a secret this worker holds`,
    );
    expect(JSON.stringify(end)).not.toContain(KEY_TAIL);
    expect(await remote.head()).toBe(base);
    for (const file of filesUnder(env.dataDir)) expect(readFileSync(file).includes(KEY_TAIL), file).toBe(false);
  });
});

describe('output floods', () => {
  it('300 MB of stdout keeps the worker within bounds, and the artifact keeps its head and tail', async () => {
    const remote = await makeRemote({ 'README.md': '# flood\n' });
    global.gc?.();
    const before = process.memoryUsage().rss;
    let peak = before;
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().rss);
    }, 50);
    const agent = `yes 'flooding the worker with output, line after line' | head -c ${process.env.FLOOD_BYTES ?? 300000000}; echo; echo the-last-line; mkdir -p flood && echo ok > flood/ok.txt`;
    const end = await env
      .run(shellRequest(remote.url, [subTask('flood', agent)]))
      .finally(() => clearInterval(sampler));
    expect(end.result?.outcome).toBe('pushed');
    const worker = end.result!.workers[0];
    expect(worker.tail).toContain('the-last-line');
    const artifact = path.join(env.dataDir, 'artifacts', `${worker.logRef!.slice('sha256:'.length)}.log`);
    expect(statSync(artifact).size).toBeLessThan(20 * 1024 * 1024);
    const log = readFileSync(artifact, 'utf8');
    expect(log.startsWith('flooding the worker')).toBe(true);
    expect(log).toMatch(/\[flotilla: \d+ bytes of output omitted\]/);
    expect(log.trimEnd().endsWith('the-last-line')).toBe(true);
    expect(peak - before).toBeLessThan(250 * 1024 * 1024);
  });
});

describe('the data directory', () => {
  it('is private: directories 0700, artifacts and staging objects 0600', () => {
    const mode = (p: string) => statSync(p).mode & 0o777;
    expect(mode(env.dataDir)).toBe(0o700);
    expect(mode(path.join(env.dataDir, 'artifacts'))).toBe(0o700);
    const staging = path.join(env.dataDir, 'staging.git');
    expect(mode(staging)).toBe(0o700);
    const files = [...filesUnder(path.join(env.dataDir, 'artifacts')), ...filesUnder(path.join(staging, 'objects'))];
    expect(files.length).toBeGreaterThan(2);
    expect(files.filter((f) => (mode(f) & 0o077) !== 0)).toEqual([]);
  });
});
