/**
 * Crash safety: worker processes killed with SIGKILL mid-run and a Temporal server restarted
 * mid-run; the run still finishes, nothing is lost and the push happens once. Uses its own dev
 * server (so it can restart it) and real worker processes.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { awaitRun, startRun } from '../src/client';
import { parseLeaderRequest } from '../src/spec';
import { type TemporalTarget, ensureTemporal } from '../src/temporal';
import { statusQuery } from '../src/workflows/messages';
import { makeRemote, tempDir } from './helpers';
import { processesMatching, processesRunning, waitFor } from './processes';

let serverDir: string;
let port: number;
let server: TemporalTarget;
let dataDir: string;
const taskQueue = `crash-${process.pid}`;
const workers: ChildProcess[] = [];

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const srv = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(p));
    });
  });
}

async function connect(): Promise<Client> {
  return new Client({ connection: await Connection.connect({ address: server.address }) });
}

/** A real `flotilla worker` process on the shared data directory. */
async function startWorker(): Promise<ChildProcess> {
  const child = spawn(process.execPath, [path.join(__dirname, '../bin/flotilla'), 'worker'], {
    env: { ...process.env, TEMPORAL_ADDRESS: server.address, FLOTILLA_HOME: dataDir, FLOTILLA_TASK_QUEUE: taskQueue },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  workers.push(child);
  let out = '';
  child.stdout!.on('data', (b) => (out += b));
  child.stderr!.on('data', (b) => (out += b));
  await waitFor('the worker to poll', async () => (out.includes('polling task queue') ? true : undefined), 60_000).catch((err) => {
    throw new Error(`${err.message}; it printed:\n${out}`);
  });
  return child;
}

function kill9(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

beforeAll(async () => {
  serverDir = mkdtempSync(path.join(os.tmpdir(), 'flotilla-crash-server-'));
  dataDir = tempDir('crash-data');
  port = await freePort();
  server = await ensureTemporal({ dataDir: serverDir, port });
});

afterAll(async () => {
  for (const w of workers) if (w.exitCode === null && w.signalCode === null) await kill9(w);
  await server?.stop();
  rmSync(serverDir, { recursive: true, force: true });
  rmSync(dataDir, { recursive: true, force: true });
});

/** An agent that notes each attempt in its workspace, and whether it was told of an interruption. */
function noteTakingAgent(id: string, marker: string): string {
  return [
    `mkdir -p ${id}`,
    `echo attempt >> ${id}/attempts.txt`,
    `if [ -n "\${FLOTILLA_INTERRUPTED:-}" ]; then echo "told of the interruption" > ${id}/interrupted.txt; else ${marker}; fi`,
    `echo hello > ${id}/greeting.txt`,
    `git add -A && git commit -qm "work of ${id}"`,
  ].join(' && ');
}

function crashRequest(url: string, tasks: { id: string; command: string }[], testCmd = 'true') {
  return parseLeaderRequest({
    objective: 'survive crashes',
    repo: { url, baseRef: 'main' },
    testCmd,
    subTasks: tasks.map((t) => ({ id: t.id, prompt: t.id, ownedPaths: [t.id], agent: { kind: 'shell', command: t.command } })),
    limits: { heartbeatTimeoutSeconds: 3 },
  });
}

describe('crash safety', () => {
  it('kill -9 of the worker during an agent run and again during integration: a new worker finishes, one push', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const base = (await remote.head())!;
    // Unique command lines to find the processes by; the fractions keep the sleeps short.
    const agentMarker = `sleep 30.${Math.floor(Math.random() * 1e6)}`;
    const testMarker = `sleep 3.${Math.floor(Math.random() * 1e6)}`;
    const client = await connect();
    let worker = await startWorker();
    const handle = await startRun(
      client,
      crashRequest(remote.url, [{ id: 'alpha', command: noteTakingAgent('alpha', agentMarker) }, { id: 'beta', command: noteTakingAgent('beta', 'true') }], `${testMarker}; true`),
      { taskQueue, workflowId: `crash-${Date.now()}` },
    );

    await waitFor('the agent to run', async () => ((await processesRunning(agentMarker)).length ? true : undefined));
    // Only alpha is interrupted: beta, which has nothing to wait for, must be done before the kill.
    await waitFor('beta to finish', async () => ((await handle.query(statusQuery)).workers.find((w) => w.id === 'beta')?.state === 'done' ? true : undefined));
    await kill9(worker);
    // The agent dies with its worker (bubblewrap --die-with-parent).
    await waitFor('the agent to die', async () => ((await processesMatching(agentMarker)).length === 0 ? true : undefined));
    worker = await startWorker();

    await waitFor('the tests to run', async () => ((await processesRunning(testMarker)).length ? true : undefined), 60_000);
    await kill9(worker);
    await startWorker();

    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    // The interrupted attempt's progress was kept, and the retry was told about it.
    expect(await remote.show('main', 'alpha/attempts.txt')).toBe('attempt\nattempt\n');
    expect(await remote.show('main', 'alpha/interrupted.txt')).toBe('told of the interruption\n');
    expect(await remote.show('main', 'beta/attempts.txt')).toBe('attempt\n');
    // Exactly one integration landed: one merge per worker, each worker's commit once.
    const log = await remote.log('main', base);
    expect(log.filter((s) => s.startsWith('Integrate')).sort()).toEqual(['Integrate alpha: alpha', 'Integrate beta: beta']);
    expect(log.filter((s) => s === 'work of alpha')).toHaveLength(1);
    await client.connection.close();
    remote.cleanup();
  });

  it('a Temporal server restarted mid-run (same database) does not lose the run', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const marker = `sleep 4.${Math.floor(Math.random() * 1e6)}`;
    let client = await connect();
    const handle = await startRun(client, crashRequest(remote.url, [{ id: 'gamma', command: `${marker} && mkdir -p gamma && echo hi > gamma/greeting.txt` }]), {
      taskQueue,
      workflowId: `restart-${Date.now()}`,
    });
    await waitFor('the agent to run', async () => ((await processesRunning(marker)).length ? true : undefined));
    await client.connection.close();
    await server.stop();
    server = await ensureTemporal({ dataDir: serverDir, port });
    client = await connect();
    const end = await awaitRun(client.workflow.getHandle(handle.workflowId));
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'gamma/greeting.txt')).toBe('hi\n');
    expect((await client.workflow.getHandle(handle.workflowId).query(statusQuery)).phase).toBe('done');
    await client.connection.close();
    remote.cleanup();
  });
});
