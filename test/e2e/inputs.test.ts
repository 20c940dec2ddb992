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
import { temporal } from '@temporalio/proto';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { MessageRefused, approve, awaitRun } from '../../src/client/index';
import { approveSignal, statusQuery } from '../../src/contracts/messages';
import { MAX_WAIT_MINUTES } from '../../src/contracts/request';
import { releaseAtEnd } from '../support/cleanup';
import { TestEnv } from '../support/env';
import { makeRemote } from '../support/remotes';
import { flotilla } from '../support/processes';
import { greet, shellRequest, subTask, withGates } from '../support/requests';
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

describe('requests that refuse themselves', () => {
  it('a run whose request is refused shows phase failed with the refusal, and what it named', async () => {
    const url = 'ssh://-oProxyCommand=x/repo.git';
    const handle = await env.start({ ...shellRequest(url, [greet('one')]), testCmd: '' });
    await expect(awaitRun(handle)).resolves.toMatchObject({ failureType: 'InvalidRequest' });
    const s = await handle.query(statusQuery);
    expect([s.phase, s.outcome, s.repo, s.objective]).toEqual(['failed', 'failed', url, 'a test run']);
    expect(s.message).toBe(
      'invalid request: repo.url: repository names a user or host starting with "-", which ssh would read as an option; testCmd: must not be empty',
    );
    const shown = await flotilla(env.taskQueue, ['status', handle.workflowId]);
    expect(shown.code).toBe(0);
    expect(shown.out).toMatch(/^phase: +failed \(failed\)$/m);
    expect(shown.out).toMatch(/^message: +invalid request: repo\.url: /m);
  });

  it('a gate of 1.5e11 minutes started past validation ends the run at once, naming the field', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const gate = { mode: 'manual' as const, timeoutMinutes: 1.5e11 };
    const end = await env.run(shellRequest(remote.url, [greet('one')], { gates: { push: gate } }));
    expect(end.failureType).toBe('InvalidRequest');
    expect(end.failureMessage).toContain('gates.push.timeoutMinutes: must be at most 525600 minutes (a year)');
  });

  it('a sub-task workflow started by hand with {} fails at once, naming the fields it lacks', async () => {
    const handle = await env.client.workflow.start('workerWorkflow', {
      taskQueue: env.taskQueue,
      workflowId: `by-hand-${Date.now()}`,
      args: [{}],
    });
    const failure = await handle.result().then(
      () => undefined,
      (err: { cause?: { type?: string; message?: string; nonRetryable?: boolean } }) => err.cause,
    );
    expect(failure?.type).toBe('InvalidRequest');
    expect(failure?.nonRetryable).toBe(true);
    expect(failure?.message).toMatch(
      /^invalid sub-task input: runKey: is required; objective: is required; task: is required/,
    );
  });
});

describe('messages to a run, as the CLI says them', () => {
  it('approve, reject, pause and resume on a run that has ended say it has ended, and how', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const handle = await env.start(shellRequest(remote.url, [greet('one')], withGates('plan')));
    await waitForStatus(handle, 'the plan gate', (st) => st.phase === 'awaiting-plan-approval');
    const rejected = await flotilla(env.taskQueue, ['reject', handle.workflowId, '--gate', 'plan', '--reason', 'no']);
    expect(rejected.code).toBe(0);
    await awaitRun(handle);
    const how = `run ${handle.workflowId} has ended (rejected: `;
    for (const args of [
      ['approve', '--gate', 'plan'],
      ['reject', '--gate', 'plan', '--reason', 'again'],
      ['pause', '--subtask', 'one'],
      ['resume', '--subtask', 'one'],
    ]) {
      const r = await flotilla(env.taskQueue, [args[0], handle.workflowId, ...args.slice(1)]);
      expect(r.code, args[0]).toBe(2);
      expect(r.err, args[0]).toContain(how);
      expect(r.err, args[0]).toContain('rejected the plan gate: no); it takes no more messages');
      expect(r.err, args[0]).not.toContain('no run with id');
      expect(r.err, args[0]).not.toContain('--help');
    }
    const cancel = await flotilla(env.taskQueue, ['cancel', handle.workflowId]);
    expect([cancel.code, cancel.err]).toEqual([2, expect.stringContaining(`${how}`)]);
  });

  it('a refusal is said once, and reject without --reason says what is missing', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const handle = await env.start(shellRequest(remote.url, [greet('one')], withGates('plan')));
    await waitForStatus(handle, 'the plan gate', (st) => st.phase === 'awaiting-plan-approval');
    const wrong = await flotilla(env.taskQueue, ['approve', handle.workflowId, '--gate', 'push']);
    expect(wrong.code).toBe(2);
    expect(wrong.err).toContain('refused: the push gate is not open (the plan gate is)');
    expect(wrong.err.match(/refused/g)).toHaveLength(1);
    const noReason = await flotilla(env.taskQueue, ['reject', handle.workflowId, '--gate', 'plan']);
    expect(noReason.code).toBe(2);
    expect(noReason.err).toContain("required option '--reason <text>' not specified");
    await handle.cancel();
  });

  it('--json errors are JSON on stdout', async () => {
    const r = await flotilla(env.taskQueue, ['status', 'no-such-run', '--json']);
    expect(r.code).toBe(2);
    expect(r.err).toBe('');
    expect(JSON.parse(r.out)).toEqual({ error: { message: 'no run with id no-such-run', exitCode: 2 } });
    const usage = await flotilla(env.taskQueue, ['list', '--json', '--limit', '0x10']);
    expect(usage.code).toBe(2);
    expect(JSON.parse(usage.out).error.message).toContain('--limit must be a positive whole number');
  });

  it('cancel with no worker polling says so at once, instead of waiting', async () => {
    const queue = `nobody-${Date.now()}`;
    const id = `unserved-${Date.now()}`;
    await env.client.workflow.start('leaderWorkflow', { taskQueue: queue, workflowId: id, args: [{}] });
    const started = Date.now();
    const r = await flotilla(queue, ['cancel', id]);
    expect(Date.now() - started).toBeLessThan(20_000);
    expect(r.code).toBe(3);
    expect(r.err).toContain(`asked ${id} to cancel, but no worker is polling task queue "${queue}"`);
    await env.client.workflow.getHandle(id).terminate('test over');
  });

  it('a question with a newline cannot fake a line of flotilla status', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const fake = 'Which colour?\n  approve: flotilla approve RUN --gate push --sha 0000';
    const asker = subTask('asker', `echo '::flotilla ${JSON.stringify({ question: fake })}'`);
    const handle = await env.start(shellRequest(remote.url, [asker]));
    await waitForStatus(handle, 'the question', (st) => st.workers[0].state === 'suspended');
    const shown = await flotilla(env.taskQueue, ['status', handle.workflowId]);
    expect(shown.out).toContain('question: Which colour?\\n  approve: flotilla approve RUN --gate push --sha 0000');
    expect(shown.out.split('\n').filter((l) => /^\s*approve:/.test(l))).toEqual([]);
    await handle.cancel();
  });
});

describe('refused messages in history', () => {
  /** The run's history events by type, e.g. { EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED: 3 }. */
  const eventsByType = async (id: string) => {
    const counts: Record<string, number> = {};
    for (const e of (await env.client.workflow.getHandle(id).fetchHistory()).events ?? []) {
      const type = temporal.api.enums.v1.EventType[e.eventType ?? 0];
      counts[type] = (counts[type] ?? 0) + 1;
    }
    return counts;
  };
  const added = (before: Record<string, number>, after: Record<string, number>) =>
    Object.fromEntries(
      Object.entries(after)
        .map(([type, n]) => [type, n - (before[type] ?? 0)])
        .filter(([, n]) => n !== 0),
    );

  it('a refused signal adds its own event and the tasks that read it, never a command; a refused update adds nothing', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const handle = await env.start(shellRequest(remote.url, [greet('one')], withGates('plan')));
    await waitForStatus(handle, 'the plan gate', (st) => st.phase === 'awaiting-plan-approval');
    const id = handle.workflowId;
    const before = await eventsByType(id);
    const n = 300;
    for (let i = 0; i < n; i++) await handle.signal(approveSignal, { gate: 'push' });
    await waitForStatus(handle, 'every refusal', (st) => st.refusedCount === n);
    const afterSignals = await eventsByType(id);
    const bySignals = added(before, afterSignals);
    // Each signal is recorded, and read by a workflow task (several, when they come together);
    // the handler itself writes nothing: no command, so no event of ours.
    expect(Object.keys(bySignals).sort()).toEqual([
      'EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED',
      'EVENT_TYPE_WORKFLOW_TASK_COMPLETED',
      'EVENT_TYPE_WORKFLOW_TASK_SCHEDULED',
      'EVENT_TYPE_WORKFLOW_TASK_STARTED',
    ]);
    expect(bySignals.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED).toBe(n);
    expect(bySignals.EVENT_TYPE_WORKFLOW_TASK_COMPLETED).toBeLessThanOrEqual(n);
    for (let i = 0; i < 100; i++)
      await expect(approve(env.client, id, { gate: 'push', sha: 'a'.repeat(40) })).rejects.toThrow(MessageRefused);
    expect(added(afterSignals, await eventsByType(id))).toEqual({});
    await handle.cancel();
  });
});
