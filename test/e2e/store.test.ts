/**
 * The shared store: activities of ONE run move between two hosts (two workers with their own data
 * directories, one polling at a time, on the suite's dev server) and the run still pushes the
 * right tree, every ref, commit and log it needs coming from the store. A host "goes away" at a
 * chosen activity: it stops polling and fails that activity as a dying host would, so Temporal's
 * retry lands on the other host. The data a host leaves is deleted before the other takes over,
 * so nothing can come from it.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { simpleGit } from 'simple-git';
import { beforeAll, describe, expect, it, inject } from 'vitest';
import { createActivities } from '../../src/activities/index';
import { defaultDeps } from '../../src/activities/deps';
import { awaitRun } from '../../src/client/index';
import type { GcReport } from '../../src/retention/gc';
import { leaderWorkflow } from '../../src/workflows/index';
import { approveSignal } from '../../src/contracts/messages';
import type { LeaderRequestInput } from '../../src/contracts/request';
import { workflowBundle } from '../support/bundle';
import { releaseAtEnd } from '../support/cleanup';
import { installQuietRuntime } from '../support/env';
import { type ServedStore, fileStore, serveStore } from '../support/git-daemon';
import { renamer } from '../support/greetings';
import { flotilla, waitFor } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { shell, shellRequest, subTask, withGates, writeAgent } from '../support/requests';
import { waitForStatus } from '../support/runs';
import { tempDir } from '../support/temp';

type Activities = ReturnType<typeof createActivities>;

let connection: NativeConnection;
let client: Client;

beforeAll(async () => {
  installQuietRuntime();
  const address = inject('temporalAddress');
  connection = await NativeConnection.connect({ address });
  releaseAtEnd(() => connection.close());
  client = new Client({ connection: await Connection.connect({ address }) });
  releaseAtEnd(() => client.connection.close());
});

/** The activity at which a host goes away, and which of its calls. */
interface Leaving {
  activity: keyof Activities;
  when?: (input: never) => boolean;
}

/**
 * A worker host: Flotilla's activities on `dataDir` and the shared store. With `leaving`, the
 * host goes away when that activity reaches it: `gone` resolves, and once the test calls stop()
 * (no more polling) the activity fails retryably, as on a host that died before finishing it.
 */
async function startHost(dataDir: string, store: ServedStore | undefined, taskQueue: string, leaving?: Leaving) {
  // Both hosts serve the shared queue as their host queue too: a sandbox's activities may land on
  // either, which is what this test makes happen (test/hosts.test.ts has a queue per host).
  const activities = createActivities(
    defaultDeps(dataDir, { stagingUrl: store?.url, host: { host: path.basename(dataDir), taskQueue } }),
  );
  let reached!: () => void;
  const gone = new Promise<void>((resolve) => (reached = resolve));
  let stopped!: () => void;
  const stopping = new Promise<void>((resolve) => (stopped = resolve));
  if (leaving) {
    const real = activities[leaving.activity] as (input: never) => Promise<unknown>;
    (activities as Record<string, unknown>)[leaving.activity] = async (input: never) => {
      if (leaving.when && !leaving.when(input)) return real(input);
      reached();
      await stopping;
      throw new Error(`this host went away before ${leaving.activity}`);
    };
  }
  const worker = await Worker.create({
    connection,
    namespace: 'default',
    taskQueue,
    workflowBundle: workflowBundle(),
    activities,
    maxHeartbeatThrottleInterval: '2 seconds',
    // The activity left behind reports its failure before the worker is gone.
    shutdownGraceTime: '30 seconds',
  });
  const running = worker.run();
  let done: Promise<void> | undefined;
  const stop = () =>
    (done ??= (async () => {
      worker.shutdown();
      stopped();
      await running;
    })());
  releaseAtEnd(stop);
  return { gone, stop };
}

const CHECK = `#!/bin/bash
for id in one two; do grep -q "hello from $id" $id/greeting.txt || { echo "FAIL: $id has no greeting"; exit 1; }; done
test -f one/repaired.txt || { echo "FAIL needs-repair-5c1e: one/repaired.txt is missing"; exit 1; }
echo "all greetings ok"
`;

/** Greetings by one and two, each agent saying it is at work, tested by check.sh and pushed to `targetRef`. */
function request(url: string, targetRef: string, fields: Partial<LeaderRequestInput> = {}) {
  const task = (id: string) =>
    subTask(id, `echo "agent ${id} at work" && ${writeAgent(`${id}/greeting.txt`, `hello from ${id}`)}`);
  return shellRequest(url, [task('one'), task('two')], {
    repo: { url, baseRef: 'main', targetRef },
    testCmd: './check.sh',
    ...fields,
  });
}

/** Until the host goes away, or the run ends first (then the assertions on its result say why). */
async function leaves(host: { gone: Promise<void> }, run: { result(): Promise<unknown> }): Promise<void> {
  await Promise.race([host.gone, run.result().catch(() => undefined)]);
}

function startRun(taskQueue: string, req: LeaderRequestInput) {
  return client.workflow.start(leaderWorkflow, {
    taskQueue,
    workflowId: `store-${randomUUID()}`,
    args: [req],
  });
}

/** Until `host` goes away at its activity (see leaves); then it stops polling. */
async function untilGone(
  host: Awaited<ReturnType<typeof startHost>>,
  run: { result(): Promise<unknown> },
): Promise<void> {
  await leaves(host, run);
  await host.stop();
}

/** A host on `dataDir` takes the run over to its end, which must be a push. */
async function finishOn(dataDir: string, store: ServedStore, taskQueue: string, run: Parameters<typeof awaitRun>[0]) {
  const host = await startHost(dataDir, store, taskQueue);
  const end = await awaitRun(run);
  await host.stop();
  expect(end.result?.outcome, end.result?.message).toBe('pushed');
  return end;
}

async function refsIn(dataDir: string, prefix: string): Promise<string[]> {
  const out = await simpleGit(path.join(dataDir, 'staging.git')).raw(['for-each-ref', '--format=%(refname)', prefix]);
  return out.split('\n').filter(Boolean);
}

describe('one run across two hosts through the shared store', () => {
  it('base and workers on A, merge, tests and push on B (git daemon): the pushed tree has both workers', async () => {
    const store = await serveStore();
    const remote = await makeRemote({
      'README.md': '# across\n',
      'check.sh': CHECK.replace(/^test -f one\/repaired.*$/m, ''),
    });
    const taskQueue = `store-${randomUUID()}`;
    const dataA = tempDir('host-a');
    const dataB = tempDir('host-b');
    const a = await startHost(dataA, store, taskQueue, { activity: 'mergeWorkers' });
    const handle = await startRun(taskQueue, request(remote.url, 'across'));
    await untilGone(a, handle);
    rmSync(dataA, { recursive: true, force: true });

    const end = await finishOn(dataB, store, taskQueue, handle);
    expect(await remote.show('across', 'one/greeting.txt')).toBe('hello from one\n');
    expect(await remote.show('across', 'two/greeting.txt')).toBe('hello from two\n');
    expect(await remote.show('across', 'README.md')).toBe('# across\n');
    expect(await remote.log('across', 'main'), 'one push: both merges on the base').toEqual(
      expect.arrayContaining([expect.stringMatching(/^Integrate one/), expect.stringMatching(/^Integrate two/)]),
    );

    // B had the workers' commits only from the store: they are in its cache, pulled.
    const runKey = (await refsIn(dataB, 'refs/flotilla/'))[0].split('/')[2];
    expect(await refsIn(dataB, `refs/flotilla/${runKey}/workers/`)).toEqual([
      `refs/flotilla/${runKey}/workers/one`,
      `refs/flotilla/${runKey}/workers/two`,
    ]);
    // A log written on A (worker one's agent), read on B.
    const logRef = end.result!.workers.find((w) => w.workerId === 'one')!.logRef!;
    expect((await defaultDeps(dataB, { stagingUrl: store.url }).artifacts.get(logRef)).toString()).toContain(
      'agent one at work',
    );
  });

  it("a repair on B reads the failing test's log written on A; the tests run again on A (file://)", async () => {
    const store = await fileStore();
    const remote = await makeRemote({ 'README.md': '# repair\n', 'check.sh': CHECK });
    const taskQueue = `store-${randomUUID()}`;
    const dataA = tempDir('host-a');
    const dataB = tempDir('host-b');
    // The repair agent fixes only what the failing output it was shown asks for.
    const repair = {
      maxRounds: 1,
      agent: shell(`grep -q needs-repair-5c1e "$FLOTILLA_PROMPT_FILE" && echo fixed > one/repaired.txt`),
    };
    const a = await startHost(dataA, store, taskQueue, {
      activity: 'provisionSandbox',
      when: (ref: { key: string }) => ref.key.endsWith('/integration-fixer'),
    });
    const handle = await startRun(taskQueue, request(remote.url, 'repaired', { repair }));
    await untilGone(a, handle);
    // A keeps its test sandbox (it comes back for the second test run) but nothing else.
    rmSync(path.join(dataA, 'staging.git'), { recursive: true, force: true });
    rmSync(path.join(dataA, 'artifacts'), { recursive: true, force: true });

    const b = await startHost(dataB, store, taskQueue, { activity: 'runTests' });
    await untilGone(b, handle);
    rmSync(dataB, { recursive: true, force: true });

    const end = await finishOn(dataA, store, taskQueue, handle);
    expect(end.result?.integration?.attempts.map((x) => [x.kind, x.state])).toEqual([['repair', 'succeeded']]);
    expect(await remote.show('repaired', 'one/repaired.txt')).toBe('fixed\n');
    expect(await remote.show('repaired', 'two/greeting.txt')).toBe('hello from two\n');
  });
});

describe('the shared store out of reach', () => {
  it('while an agent finishes: its result is kept and only its log waits for the store; the agent starts once', async () => {
    const store = await fileStore();
    const remote = await makeRemote({ 'README.md': '# away\n' });
    const taskQueue = `store-${randomUUID()}`;
    const dataDir = tempDir('host');
    await startHost(dataDir, store, taskQueue);
    // Every start is counted in the sandbox's scratch directory, which a retry in the same sandbox sees.
    const agent = [
      'echo start >> "$HOME/starts"',
      'while [ ! -f "$HOME/go" ]; do sleep 0.2; done',
      'mkdir -p one && cp "$HOME/starts" one/starts.txt && git add -A && git commit -qm starts',
    ].join(' && ');
    const handle = await startRun(taskQueue, shellRequest(remote.url, [subTask('one', agent)]));
    const scratch = await waitFor('the agent to start', async () => {
      const dirs = readdirSync(path.join(dataDir, 'sandboxes')).filter((d) => d.includes('_worker_one-'));
      const dir = dirs[0] && path.join(dataDir, 'sandboxes', dirs[0], 'scratch');
      return dir && existsSync(path.join(dir, 'starts')) ? dir : undefined;
    });
    const away = `${store.dir}.away`;
    renameSync(store.dir, away);
    writeFileSync(path.join(scratch, 'go'), '');
    const subTask1 = client.workflow.getHandle(`${handle.workflowId}/one`);
    const starts = () => readFileSync(path.join(scratch, 'starts'), 'utf8');
    await waitFor('the finished agent to wait for the store, or to start again', async () => {
      if (starts() !== 'start\n') return true;
      const pending = (await subTask1.describe()).raw.pendingActivities ?? [];
      const details = pending
        .filter((a) => a.activityType?.name === 'runAgent')
        .flatMap((a) => a.heartbeatDetails?.payloads ?? [])
        .map((p) => Buffer.from(p.data ?? []).toString());
      return details.some((d) => d.includes('its log waits for the shared store')) ? true : undefined;
    });
    renameSync(away, store.dir);
    const end = await awaitRun(handle);
    expect(end.result?.outcome, end.result?.message).toBe('pushed');
    expect(await remote.show('main', 'one/starts.txt')).toBe('start\n');
    expect(end.result!.workers[0].runs).toBe(1);
  });
});

describe('no shared store', () => {
  it('a sandbox moved off a lost host fails at once, saying the shared store is missing', async () => {
    const remote = await makeRemote({ 'README.md': '# alone\n' });
    const taskQueue = `store-${randomUUID()}`;
    const a = await startHost(tempDir('host-a'), undefined, taskQueue, { activity: 'runAgent' });
    const handle = await startRun(taskQueue, shellRequest(remote.url, [subTask('one', writeAgent('one/a.txt', 'a'))]));
    await untilGone(a, handle);
    // What host A held (the run's base among it) is not on B, and no store brings it.
    const lost = Date.now();
    await startHost(tempDir('host-b'), undefined, taskQueue);
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('failed');
    const one = end.result!.workers.find((w) => w.workerId === 'one')!;
    expect(one.reason).toContain('base commit');
    expect(one.reason).toContain('is not on this host, and there is no shared store (FLOTILLA_STAGING_URL)');
    expect(one.reason).not.toContain('Needed a single revision');
    expect(Date.now() - lost, 'failed at once, not after the seed was retried for minutes').toBeLessThan(60_000);
  });
});

describe('a conflict across hosts', () => {
  it("resolved on A, tested and pushed by B: the resolver's commit reaches B through the store", async () => {
    const store = await serveStore();
    const check = '#!/bin/bash\ngrep -qx left shared/names.txt && grep -qx right shared/names.txt\n';
    const remote = await makeRemote({
      'README.md': '# conflict\n',
      'check.sh': check,
      'shared/names.txt': 'one\ntwo\nthree\n',
    });
    const req = shellRequest(remote.url, [renamer('left'), renamer('right')], {
      repo: { url: remote.url, baseRef: 'main', targetRef: 'renamed' },
      testCmd: './check.sh',
      sharedPaths: ['shared'],
      resolver: { maxRounds: 1, agent: shell(`printf 'one\\nleft\\nright\\nthree\\n' > shared/names.txt`) },
      // One at a time: left is merged first, so that right is the one that conflicts.
      limits: { maxParallel: 1 },
    });
    const taskQueue = `store-${randomUUID()}`;
    const dataA = tempDir('host-a');
    const dataB = tempDir('host-b');
    const a = await startHost(dataA, store, taskQueue, {
      activity: 'provisionSandbox',
      when: (ref: { key: string }) => ref.key.endsWith('/integration'),
    });
    const handle = await startRun(taskQueue, req);
    await untilGone(a, handle);
    rmSync(dataA, { recursive: true, force: true });

    const end = await finishOn(dataB, store, taskQueue, handle);
    expect(end.result?.integration?.attempts.map((x) => [x.kind, x.workerId, x.state])).toEqual([
      ['resolve', 'right', 'succeeded'],
    ]);
    expect(await remote.show('renamed', 'shared/names.txt')).toBe('one\nleft\nright\nthree\n');
    expect(await remote.show('renamed', 'right/greeting.txt')).toBe('hello\n');
  });
});

describe('flotilla gc with a shared store', () => {
  it("removes a closed run's refs and artifacts from the store, from any host, never an open run's", async () => {
    const store = await fileStore();
    const remote = await makeRemote({
      'README.md': '# gc\n',
      'check.sh': CHECK.replace(/^test -f one\/repaired.*$/m, ''),
    });
    const taskQueue = `store-${randomUUID()}`;
    const dataA = tempDir('host-a');
    const host = await startHost(dataA, store, taskQueue);
    const start = (targetRef: string, fields: Partial<LeaderRequestInput> = {}) =>
      client.workflow.start(leaderWorkflow, {
        taskQueue,
        workflowId: `store-gc-${targetRef}-${randomUUID()}`,
        args: [request(remote.url, targetRef, fields)],
      });
    const done = await awaitRun(await start('done'));
    expect(done.result?.outcome, done.result?.message).toBe('pushed');
    const open = await start('open', withGates('plan'));
    await waitForStatus(open, 'the plan gate', (s) => s.phase === 'awaiting-plan-approval');
    const keyOf = (workflowId: string) => async () =>
      (await store.refs()).map((r) => r.split('/')[2]).find((k) => k.startsWith(`${workflowId.slice(0, 60)}-`));
    const doneKey = (await keyOf(done.workflowId)())!;
    const openKey = (await keyOf(open.workflowId)())!;
    expect([doneKey, openKey].every(Boolean), 'both runs have refs in the store').toBe(true);
    const runRefs = async (key: string) => (await store.refs(`refs/flotilla/${key}/`)).length;
    const artifacts = () => store.refs('refs/flotilla/artifacts/');
    expect(await artifacts()).not.toEqual([]);

    // From another host, which ran nothing: everything it removes comes from the store's listing.
    const elsewhere = tempDir('host-b');
    const gc = async (dataDir: string, ...args: string[]) => {
      const r = await flotilla(taskQueue, ['gc', '--json', '--older-than', '0', ...args], {
        FLOTILLA_HOME: dataDir,
        FLOTILLA_STAGING_URL: store.url,
      });
      expect(r.err).toBe('');
      return JSON.parse(r.out) as GcReport;
    };
    const dry = await waitFor('the finished run listed as closed', async () => {
      const r = await gc(elsewhere, '--dry-run');
      return r.removedRuns.some((x) => x.runKey === doneKey) ? r : undefined;
    });
    expect(dry.sharedStore).toEqual({ refs: await runRefs(doneKey), artifacts: 0 });
    const first = await gc(elsewhere);
    expect(first.removedRuns.map((x) => x.runKey)).toEqual([doneKey]);
    expect(first.keptRuns).toContainEqual(expect.objectContaining({ runKey: openKey, reason: 'open' }));
    expect(await runRefs(doneKey), "the closed run's refs are gone from the store").toBe(0);
    expect(await runRefs(openKey), "the open run's are all there").toBeGreaterThan(0);
    expect((await artifacts()).length, 'an open run keeps every artifact').toBeGreaterThan(0);

    // The open run still works from what the store kept.
    await open.signal(approveSignal, { gate: 'plan', by: 'test' });
    expect((await awaitRun(open)).result?.outcome).toBe('pushed');
    await host.stop();
    const last = await waitFor('the second run listed as closed', async () => {
      const r = await gc(elsewhere, '--dry-run');
      return r.keptRuns.length === 0 && r.removedRuns.length === 1 ? r : undefined;
    });
    expect(last.sharedStore?.artifacts).toBe((await artifacts()).length);
    await gc(elsewhere);
    expect(await store.refs(), 'nothing of either run is left in the store').toEqual([]);
    // The host that ran them cleans its own cache; what the store no longer has is no error.
    const own = await gc(dataA);
    expect(own.removedRuns.map((x) => x.runKey).sort()).toEqual([doneKey, openKey].sort());
    expect(await refsIn(dataA, 'refs/flotilla/')).toEqual([]);
    expect(await remote.head('done')).toBe(done.result?.pushedSha);
  });
});
