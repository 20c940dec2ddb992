/**
 * Crash safety: worker processes killed with SIGKILL mid-run (shell agents, and real Claude Code
 * and Codex mid-session against the scripted model server) and a Temporal server restarted
 * mid-run; the run still finishes, nothing is lost and the push happens once. Uses its own dev
 * server (so it can restart it) and real worker processes.
 */
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import { beforeAll, describe, expect, it } from 'vitest';
import { addSubTask, awaitRun, startRun } from '../../src/client/index';
import { runKeyOf } from '../../src/contracts/names';
import { parseLeaderRequest } from '../../src/contracts/request';
import { type TemporalTarget, ensureTemporal } from '../../src/temporal/server';
import { statusQuery } from '../../src/contracts/messages';
import { priceClaudeReply } from '../../src/agents/prices';
import { releaseAtEnd } from '../support/cleanup';
import { INPUT_TOKENS, ModelServer, userTexts } from '../support/model-server';
import { freeServerPort } from '../support/ports';
import {
  type WorkerProcess,
  holdCommand,
  letGo,
  processesMatching,
  processesRunning,
  spawnWorker,
  waitFor,
} from '../support/processes';
import { countingRemote, makeRemote } from '../support/remotes';
import { shell, shellRequest, subTask, writeAgent } from '../support/requests';
import { waitForStatus } from '../support/runs';
import { tempDir } from '../support/temp';

let serverDir: string;
let port: number;
let server: TemporalTarget;
let dataDir: string;
let models: ModelServer;
const taskQueue = `crash-${process.pid}`;

beforeAll(async () => {
  serverDir = tempDir('crash-server');
  dataDir = tempDir('crash-data');
  port = await freeServerPort();
  server = await ensureTemporal({ dataDir: serverDir, port });
  // The server a test restarted, if it did.
  releaseAtEnd(() => server.stop());
  models = await ModelServer.start();
});

/** A client of this file's server, closed when the test ends. */
async function connect(): Promise<Client> {
  const client = new Client({ connection: await Connection.connect({ address: server.address }) });
  releaseAtEnd(() => client.connection.close());
  return client;
}

/**
 * A real `flotilla worker` process on the shared data directory, once it polls. Killed when its
 * test ends, so the next test's kill hits the worker that runs its agent.
 */
async function startWorker(): Promise<WorkerProcess> {
  const worker = spawnWorker({
    ...process.env,
    TEMPORAL_ADDRESS: server.address,
    FLOTILLA_HOME: dataDir,
    FLOTILLA_TASK_QUEUE: taskQueue,
    ANTHROPIC_BASE_URL: models.url,
    ANTHROPIC_API_KEY: 'test-key',
    OPENAI_API_KEY: 'test-key',
    // The worker's own configuration names the model server, so the egress proxy lets Codex reach it.
    OPENAI_BASE_URL: `${models.url}/v1`,
  });
  await worker.polling(60_000);
  return worker;
}

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

/** Heartbeats every 3 s: a dead worker's activity is retried within seconds. */
const QUICK = { limits: { heartbeatTimeoutSeconds: 3 } };

/** The sandbox directories of a run (named after its key, which starts with the workflow id's characters). */
function sandboxesOf(workflowId: string): string[] {
  const dir = path.join(dataDir, 'sandboxes');
  return existsSync(dir) ? readdirSync(dir).filter((d) => d.startsWith(workflowId)) : [];
}

/** Whether the run's test sandbox holds `file` in its workspace. */
function integrationFiles(workflowId: string, file: string): boolean {
  return sandboxesOf(workflowId).some(
    (d) => /_integration-[0-9a-f]{10}$/.test(d) && existsSync(path.join(dataDir, 'sandboxes', d, 'workspace', file)),
  );
}

/** The key a run names its refs and sandboxes by. */
async function runKeyOfHandle(handle: WorkflowHandle): Promise<string> {
  return runKeyOf(handle.workflowId, (await handle.describe()).runId);
}

/** What is left of the run's mirror of its base (git/run-mirror.ts): gone with its last sandbox. */
function runObjectsOf(runKey: string): string[] {
  const dir = path.join(dataDir, 'run-objects');
  return existsSync(dir) ? readdirSync(dir).filter((d) => d.startsWith(runKey)) : [];
}

/** Once `hold`'s agent holds again (its attempt retried after a kill), lets it go. */
async function letGoOnceHeldAgain(hold: string): Promise<void> {
  await waitFor('held to hold again', async () => ((await processesRunning(hold)).length ? true : undefined), 60_000);
  await letGo(hold);
}

/** The run's end, having pushed, and exactly once. */
async function pushedOnce(handle: WorkflowHandle, remote: { pushes(): number }) {
  const end = await awaitRun(handle);
  expect(end.failureMessage).toBeUndefined();
  expect(end.result?.outcome).toBe('pushed');
  expect(remote.pushes()).toBe(1);
  return end;
}

describe('crash safety', () => {
  it('kill -9 of the worker during an agent run and again during integration: a new worker finishes, one push', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const base = (await remote.head())!;
    // Unique command lines to find the processes by; the fractions keep the sleeps short.
    const agentMarker = `sleep 300.${Math.floor(Math.random() * 1e6)}`;
    const testMarker = `sleep 3.${Math.floor(Math.random() * 1e6)}`;
    const client = await connect();
    let worker = await startWorker();
    const handle = await startRun(
      client,
      parseLeaderRequest(
        shellRequest(
          remote.url,
          [subTask('alpha', noteTakingAgent('alpha', agentMarker)), subTask('beta', noteTakingAgent('beta', 'true'))],
          // The marker runs on the merged tree only, not on the base (tested while the agents run).
          { ...QUICK, testCmd: `if [ -f alpha/greeting.txt ]; then ${testMarker}; fi; true` },
        ),
      ),
      { taskQueue, workflowId: `crash-${Date.now()}` },
    );

    await waitFor('the agent to run', async () => ((await processesRunning(agentMarker)).length ? true : undefined));
    // Only alpha is interrupted: beta, which has nothing to wait for, must be done before the kill.
    await waitForStatus(handle, 'beta to finish', (s) => s.workers.find((w) => w.id === 'beta')?.state === 'done');
    await worker.stop('SIGKILL');
    // The agent dies with its worker (bubblewrap --die-with-parent).
    await waitFor('the agent to die', async () =>
      (await processesMatching(agentMarker)).length === 0 ? true : undefined,
    );
    worker = await startWorker();

    await waitFor(
      'the tests to run',
      async () => ((await processesRunning(testMarker)).length ? true : undefined),
      60_000,
    );
    await worker.stop('SIGKILL');
    // The test command dies with its worker, and the next worker runs it again from the start.
    await waitFor('the tests to die', async () =>
      (await processesMatching(testMarker)).length === 0 ? true : undefined,
    );
    await startWorker();
    await waitFor(
      'the tests to run again',
      async () => ((await processesRunning(testMarker)).length ? true : undefined),
      60_000,
    );

    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    // The interrupted attempt's progress was kept, and the retry was told about it.
    expect(await remote.show('main', 'alpha/attempts.txt')).toBe('attempt\nattempt\n');
    expect(await remote.show('main', 'alpha/interrupted.txt')).toBe('told of the interruption\n');
    expect(await remote.show('main', 'beta/attempts.txt')).toBe('attempt\n');
    // Exactly one integration landed: one merge per worker, each worker's commit once.
    const log = await remote.log('main', base);
    expect(log.filter((s) => s.startsWith('Integrate')).sort()).toEqual([
      'Integrate alpha: do alpha',
      'Integrate beta: do beta',
    ]);
    expect(log.filter((s) => s === 'work of alpha')).toHaveLength(1);
  });

  it('kill -9 of the worker mid-session: a real Claude Code agent resumes its session, and the crash costs one turn', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    // Not a bare sleep, which Claude Code's Bash tool refuses to run in the foreground.
    const marker = `timeout 300.${Math.floor(Math.random() * 1e6)} tail -f /dev/null`;
    models.script('CRASH-claude', [
      { text: 'Thinking it over first.', tools: [{ name: 'Bash', input: { command: marker, description: 'Think' } }] },
      {
        tools: [
          { name: 'Write', input: { file_path: '/workspace/delta/greeting.txt', content: 'hello after the crash\n' } },
        ],
      },
      { text: 'Wrote delta/greeting.txt.' },
    ]);
    const client = await connect();
    let worker = await startWorker();
    const request = parseLeaderRequest({
      objective: 'survive a crash mid-session',
      repo: { url: remote.url, baseRef: 'main' },
      testCmd: 'cat delta/greeting.txt',
      agent: { kind: 'claude-code' },
      sandbox: { network: true },
      subTasks: [{ id: 'delta', prompt: 'Task CRASH-claude: write delta/greeting.txt', ownedPaths: ['delta'] }],
      ...QUICK,
    });
    const handle = await startRun(client, request, { taskQueue, workflowId: `crash-claude-${Date.now()}` });

    await waitFor(
      'the agent to run its long command',
      async () => ((await processesRunning(marker)).length ? true : undefined),
      60_000,
    );
    // The session id and the first reply's cost reach the server in the activity's heartbeat details.
    const sessionId = await waitFor('the session in the heartbeat details', async () => {
      const described = await client.workflow.getHandle(`${handle.workflowId}/delta`).describe();
      const payload = described.raw.pendingActivities?.[0]?.heartbeatDetails?.payloads?.[0];
      const agent = payload?.data ? JSON.parse(Buffer.from(payload.data).toString('utf8'))?.agent : undefined;
      return typeof agent?.sessionId === 'string' && agent.costUsd > 0 ? (agent.sessionId as string) : undefined;
    });
    await worker.stop('SIGKILL');
    await waitFor('the agent to die', async () => ((await processesMatching(marker)).length === 0 ? true : undefined));
    worker = await startWorker();

    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'delta/greeting.txt')).toBe('hello after the crash\n');

    const turns = models.requests.filter((r) => r.conversation === 'CRASH-claude');
    // One turn before the crash, then the same session carried on: no turn was asked for twice.
    expect(turns.map((r) => r.step)).toEqual([0, 1, 2]);
    expect(new Set(turns.map((r) => r.headers['x-claude-code-session-id']))).toEqual(new Set([sessionId]));
    const resumed = turns[1];
    const history = JSON.stringify(resumed.body.messages);
    expect(history).toContain('Task CRASH-claude: write delta/greeting.txt');
    expect(history).toContain(marker);
    expect(userTexts(resumed.body).join('\n')).toContain('A previous attempt at this task was interrupted midway');
    // The interrupted attempt's reply, priced as it streamed, is carried over into the cost of the
    // two replies after it (Claude Code's own figure: it prices each scripted reply at $0.006).
    const interrupted = priceClaudeReply('claude-opus-5-5', { input: INPUT_TOKENS, output: 1 });
    expect(end.result?.workers[0].costUsd).toBeCloseTo(interrupted + 2 * 0.006, 6);
    expect(end.result?.workers[0]).toMatchObject({ runs: 1, turns: 3 });
  });

  it('kill -9 of the worker mid-session: a real Codex agent resumes its thread', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const marker = `timeout 300.${Math.floor(Math.random() * 1e6)} tail -f /dev/null`;
    models.script('CRASH-codex', [
      { tools: [{ name: 'exec_command', input: { cmd: marker, workdir: '/workspace' } }] },
      {
        tools: [
          {
            name: 'exec_command',
            input: { cmd: 'mkdir -p echo && echo "hello after the crash" > echo/greeting.txt', workdir: '/workspace' },
          },
        ],
      },
      { text: 'Wrote echo/greeting.txt.' },
    ]);
    const provider = `model_providers.local={name="local",base_url="${models.url}/v1",env_key="OPENAI_API_KEY",wire_api="responses"}`;
    const client = await connect();
    let worker = await startWorker();
    const request = parseLeaderRequest({
      objective: 'survive a crash mid-thread',
      repo: { url: remote.url, baseRef: 'main' },
      testCmd: 'cat echo/greeting.txt',
      agent: { kind: 'codex', model: 'gpt-5.5', config: [provider, 'model_provider=local'] },
      sandbox: { network: true },
      subTasks: [{ id: 'echo', prompt: 'Task CRASH-codex: write echo/greeting.txt', ownedPaths: ['echo'] }],
      ...QUICK,
    });
    const handle = await startRun(client, request, { taskQueue, workflowId: `crash-codex-${Date.now()}` });

    await waitFor(
      'the agent to run its long command',
      async () => ((await processesRunning(marker)).length ? true : undefined),
      60_000,
    );
    const threadId = await waitFor('the thread in the heartbeat details', async () => {
      const described = await client.workflow.getHandle(`${handle.workflowId}/echo`).describe();
      const payload = described.raw.pendingActivities?.[0]?.heartbeatDetails?.payloads?.[0];
      const agent = payload?.data ? JSON.parse(Buffer.from(payload.data).toString('utf8'))?.agent : undefined;
      return typeof agent?.sessionId === 'string' ? (agent.sessionId as string) : undefined;
    });
    await worker.stop('SIGKILL');
    await waitFor('the agent to die', async () => ((await processesMatching(marker)).length === 0 ? true : undefined));
    worker = await startWorker();

    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'echo/greeting.txt')).toBe('hello after the crash\n');
    const turns = models.requests.filter((r) => r.conversation === 'CRASH-codex');
    expect(turns.map((r) => r.step)).toEqual([0, 1, 2]);
    expect(new Set(turns.map((r) => r.headers['thread-id']))).toEqual(new Set([threadId]));
    const history = JSON.stringify(turns[1].body.input);
    expect(history).toContain('Task CRASH-codex: write echo/greeting.txt');
    expect(history).toContain(marker);
    expect(userTexts(turns[1].body).join('\n')).toContain('A previous attempt at this task was interrupted midway');
  });

  it('kill -9 of the worker during an incremental merge (its tests, with limits.testEachMerge): the run finishes, one push, every merge once', async () => {
    const remote = await countingRemote({ 'README.md': 'x\n' });
    const base = (await remote.head())!;
    const hold = holdCommand();
    const testMarker = `sleep 3.${Math.floor(Math.random() * 1e6)}`;
    const client = await connect();
    let worker = await startWorker();
    const handle = await startRun(
      client,
      parseLeaderRequest(
        shellRequest(
          remote.url,
          [
            subTask('quick', writeAgent('quick/greeting.txt', 'hello')),
            subTask('held', `${hold}; ${writeAgent('held/greeting.txt', 'hello')}`),
          ],
          {
            // On merged trees only: the base, tested while the agents run, does not hold the marker.
            testCmd: `if [ -f quick/greeting.txt ]; then ${testMarker}; fi; true`,
            limits: { ...QUICK.limits, testEachMerge: true },
          },
        ),
      ),
      { taskQueue, workflowId: `crash-merge-${Date.now()}` },
    );
    // quick is being merged (its tests run on the head) while held's agent still runs.
    await waitFor('the merge of quick to be tested', async () =>
      (await processesRunning(testMarker)).length && (await processesRunning(hold)).length ? true : undefined,
    );
    await worker.stop('SIGKILL');
    await waitFor('the tests to die', async () =>
      (await processesMatching(testMarker)).length === 0 ? true : undefined,
    );
    worker = await startWorker();
    await waitForStatus(handle, 'quick to be integrated', (s) => s.workers[0].integrated === true, 90_000);
    await letGoOnceHeldAgain(hold);

    const end = await pushedOnce(handle, remote);
    expect(await remote.show('main', 'quick/greeting.txt')).toBe('hello\n');
    expect(await remote.show('main', 'held/greeting.txt')).toBe('hello\n');
    const log = await remote.log('main', base);
    expect(log.filter((l) => l.startsWith('Integrate')).sort()).toEqual([
      'Integrate held: do held',
      'Integrate quick: do quick',
    ]);
    expect(end.result?.head?.integrated).toEqual(['quick', 'held']);
  });

  it('kill -9 of the worker while the warmed test sandbox waits for the agent, and again during the tests: one push, no sandbox left', async () => {
    const remote = await countingRemote({ 'README.md': 'x\n', 'lib/util.txt': 'util\n' });
    const hold = holdCommand();
    const testMarker = `sleep 3.${Math.floor(Math.random() * 1e6)}`;
    const workflowId = `crash-warm-${Date.now()}`;
    const client = await connect();
    let worker = await startWorker();
    const handle = await startRun(
      client,
      parseLeaderRequest(
        shellRequest(remote.url, [subTask('held', `${hold}; ${writeAgent('held/greeting.txt', 'hello')}`)], {
          ...QUICK,
          // The marker runs on the merged tree only, not on the base (tested while the agent runs).
          testCmd: `if [ -f held/greeting.txt ]; then ${testMarker}; fi; test -f lib/util.txt`,
        }),
      ),
      { taskQueue, workflowId },
    );
    // The test sandbox holds the base's files while the agent still runs.
    await waitFor('the warmed test sandbox', async () =>
      (await processesRunning(hold)).length && integrationFiles(workflowId, 'lib/util.txt') ? true : undefined,
    );
    await worker.stop('SIGKILL');
    worker = await startWorker();
    await letGoOnceHeldAgain(hold);
    await waitFor(
      'the tests to run',
      async () => ((await processesRunning(testMarker)).length ? true : undefined),
      60_000,
    );
    await worker.stop('SIGKILL');
    await startWorker();

    await pushedOnce(handle, remote);
    expect(await remote.show('main', 'held/greeting.txt')).toBe('hello\n');
    expect(sandboxesOf(workflowId)).toEqual([]);
    expect(runObjectsOf(await runKeyOfHandle(handle))).toEqual([]);
  });

  it('a leader terminated while the warmed test sandbox waits for the agent: its keeper destroys it, nothing is left running', async () => {
    const remote = await countingRemote({ 'README.md': 'x\n', 'lib/util.txt': 'util\n' });
    const hold = holdCommand();
    const workflowId = `crash-terminated-${Date.now()}`;
    const client = await connect();
    await startWorker();
    const handle = await startRun(
      client,
      parseLeaderRequest(
        shellRequest(remote.url, [subTask('held', `${hold}; ${writeAgent('held/greeting.txt', 'hello')}`)], QUICK),
      ),
      { taskQueue, workflowId },
    );
    await waitFor('the warmed test sandbox', async () =>
      (await processesRunning(hold)).length && integrationFiles(workflowId, 'lib/util.txt') ? true : undefined,
    );
    const runKey = await runKeyOfHandle(handle);
    await handle.terminate('operator pulled the plug');
    const keeper = client.workflow.getHandle(`${workflowId}/integration-sandboxes.1`);
    await waitFor('the keeper to close', async () =>
      (await keeper.describe()).status.name === 'CANCELLED' ? true : undefined,
    );
    await waitFor('every sandbox of the run to go', async () =>
      sandboxesOf(workflowId).length === 0 && (await processesMatching(hold)).length === 0 ? true : undefined,
    );
    expect(runObjectsOf(runKey)).toEqual([]);
    expect(remote.pushes()).toBe(0);
  });

  it('a leader terminated while the tests run: the keeper waits for them to stop, then destroys the sandbox; nothing is left', async () => {
    const remote = await countingRemote({ 'README.md': 'x\n' });
    const testHold = holdCommand();
    const workflowId = `crash-terminated-tests-${Date.now()}`;
    const client = await connect();
    await startWorker();
    const handle = await startRun(
      client,
      parseLeaderRequest(
        shellRequest(remote.url, [subTask('quick', writeAgent('quick/greeting.txt', 'hello'))], {
          ...QUICK,
          testCmd: `if [ -f quick/greeting.txt ]; then ${testHold}; fi; true`,
        }),
      ),
      { taskQueue, workflowId },
    );
    await waitFor('the tests to run', async () => ((await processesRunning(testHold)).length ? true : undefined));
    const runKey = await runKeyOfHandle(handle);
    await handle.terminate('operator pulled the plug');
    // The test command stops once its activity finds the leader gone (its next heartbeat), and
    // only then does the keeper destroy the sandbox: never while a command of the run still runs in it.
    let destroyedUnderIt = false;
    await waitFor(
      'the tests to stop and the sandbox to go',
      async () => {
        const running = (await processesMatching(testHold)).length > 0;
        const left = sandboxesOf(workflowId).length;
        if (running && !left) destroyedUnderIt = true;
        return !running && !left ? true : undefined;
      },
      60_000,
    );
    expect(destroyedUnderIt).toBe(false);
    const keeper = client.workflow.getHandle(`${workflowId}/integration-sandboxes.1`);
    await waitFor('the keeper to close', async () =>
      (await keeper.describe()).status.name === 'CANCELLED' ? true : undefined,
    );
    expect(sandboxesOf(workflowId)).toEqual([]);
    expect(runObjectsOf(runKey)).toEqual([]);
  });

  it('kill -9 of the worker while an added sub-task runs: the amendment is kept, the run finishes, one push', async () => {
    const remote = await countingRemote({ 'README.md': 'x\n' });
    const [slowHold, addedHold] = [holdCommand(), holdCommand()];
    const client = await connect();
    let worker = await startWorker();
    const handle = await startRun(
      client,
      parseLeaderRequest(
        shellRequest(remote.url, [subTask('slow', `${slowHold}; ${writeAgent('slow/greeting.txt', 'hello')}`)], QUICK),
      ),
      { taskQueue, workflowId: `crash-amend-${Date.now()}` },
    );
    await waitFor('slow to hold', async () => ((await processesRunning(slowHold)).length ? true : undefined), 60_000);
    const extra = {
      id: 'extra',
      prompt: 'do extra',
      ownedPaths: ['extra'],
      agent: shell(`${addedHold}; ${writeAgent('extra/greeting.txt', 'hello')}`),
    };
    expect(await addSubTask(client, handle.workflowId, { subTask: extra, by: 'ana' })).toContain(
      'added sub-task extra',
    );
    await waitFor('extra to hold', async () => ((await processesRunning(addedHold)).length ? true : undefined), 60_000);
    await worker.stop('SIGKILL');
    await waitFor('the agents to die', async () =>
      (await processesMatching(addedHold)).length + (await processesMatching(slowHold)).length === 0 ? true : undefined,
    );
    worker = await startWorker();
    for (const hold of [slowHold, addedHold]) {
      await waitFor(
        'the agents to hold again',
        async () => ((await processesRunning(hold)).length ? true : undefined),
        60_000,
      );
      await letGo(hold);
    }

    const end = await pushedOnce(handle, remote);
    expect(await remote.show('main', 'extra/greeting.txt')).toBe('hello\n');
    expect(await remote.show('main', 'slow/greeting.txt')).toBe('hello\n');
    expect(end.result?.amendments?.map((a) => [a.kind, a.subTaskId, a.by])).toEqual([['add', 'extra', 'ana']]);
    const status = await handle.query(statusQuery);
    expect(status.workers.map((w) => [w.id, w.state, w.integrated])).toEqual([
      ['slow', 'done', true],
      ['extra', 'done', true],
    ]);
  });

  it(
    'kill -9 of the worker while a run drains to roll over, and again just after it rolled over: one push, every sub-task once',
    async () => {
      const remote = await countingRemote({ 'README.md': 'x\n' });
      const base = (await remote.head())!;
      const hold = holdCommand();
      const ids = ['a', 'b', 'c', 'd', 'e', 'f'];
      const quick = ids.map((id) => subTask(id, writeAgent(`${id}/greeting.txt`, id)));
      const held = subTask('held', `${hold}; ${writeAgent('held/greeting.txt', 'held')}`);
      const client = await connect();
      let worker = await startWorker();
      const handle = await startRun(
        client,
        parseLeaderRequest(
          shellRequest(remote.url, [held, ...quick], {
            limits: { ...QUICK.limits, maxParallel: 2, historyEvents: 50 },
          }),
        ),
        { taskQueue, workflowId: `crash-rollover-${Date.now()}` },
      );
      const first = client.workflow.getHandle(handle.workflowId, (await handle.describe()).runId);
      // The run is past its bound with held still running: it starts nothing more and waits for held.
      await waitFor(
        'the history past its bound while held runs',
        async () => {
          const running = (await processesRunning(hold)).length > 0;
          return running && (await handle.describe()).historyLength >= 50 ? true : undefined;
        },
        60_000,
      );
      await worker.stop('SIGKILL');
      await waitFor('held to die', async () => ((await processesMatching(hold)).length === 0 ? true : undefined));
      worker = await startWorker();
      await letGoOnceHeldAgain(hold);
      await waitFor(
        'the run to roll over',
        async () => ((await first.describe()).status.name === 'CONTINUED_AS_NEW' ? true : undefined),
        60_000,
      );
      await worker.stop('SIGKILL');
      await startWorker();

      await pushedOnce(handle, remote);
      for (const id of ['held', ...ids]) expect(await remote.show('main', `${id}/greeting.txt`)).toBe(`${id}\n`);
      const merges = (await remote.log('main', base)).filter((m) => m.startsWith('Integrate'));
      expect(merges.map((m) => m.split(':')[0]).sort()).toEqual(['held', ...ids].sort().map((id) => `Integrate ${id}`));
      const status = await handle.query(statusQuery);
      expect(status.rollovers).toBeGreaterThanOrEqual(1);
      expect(status.workers.filter((w) => w.integrated)).toHaveLength(ids.length + 1);
    },
    // Three worker starts (each compiles the sources) and two kills: about 35 s alone, 90 s in the full suite.
    240_000,
  );

  it('a Temporal server restarted mid-run (same database) does not lose the run', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const marker = `sleep 4.${Math.floor(Math.random() * 1e6)}`;
    let client = await connect();
    await startWorker();
    const handle = await startRun(
      client,
      parseLeaderRequest(
        shellRequest(
          remote.url,
          [subTask('gamma', `${marker} && mkdir -p gamma && echo hi > gamma/greeting.txt`)],
          QUICK,
        ),
      ),
      {
        taskQueue,
        workflowId: `restart-${Date.now()}`,
      },
    );
    await waitFor('the agent to run', async () => ((await processesRunning(marker)).length ? true : undefined));
    await client.connection.close();
    await server.stop();
    server = await ensureTemporal({ dataDir: serverDir, port });
    client = await connect();
    const end = await awaitRun(client.workflow.getHandle(handle.workflowId));
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'gamma/greeting.txt')).toBe('hi\n');
    expect((await client.workflow.getHandle(handle.workflowId).query(statusQuery)).phase).toBe('done');
  });
});
