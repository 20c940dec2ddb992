/**
 * `flotilla gc`: real runs on the suite's Temporal, then our CLI on the worker's data directory.
 * Finished runs lose their staging refs; an open run (held at a manual plan gate) keeps all of
 * its state; --dry-run removes nothing; what was pushed stays pushed.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { simpleGit } from 'simple-git';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { ArtifactStore } from '../../src/store/artifacts';
import type { GcReport } from '../../src/retention/gc';
import { approve, awaitRun } from '../../src/client/index';
import { acquireRunObjects } from '../../src/git/run-mirror';
import { runKeyOf } from '../../src/contracts/names';
import { approveSignal, statusQuery } from '../../src/contracts/messages';
import type { LeaderRequestInput } from '../../src/contracts/request';
import { TestEnv } from '../support/env';
import {
  CLI,
  flotilla,
  holdCommand,
  letGo,
  processesRunning,
  run,
  startWorkerProcess,
  waitFor,
} from '../support/processes';
import { makeRemote } from '../support/remotes';
import { shellRequest, subTask, withGates, writeAgent } from '../support/requests';
import { waitForStatus } from '../support/runs';
import { LocalSandboxProvider } from '../../src/sandbox/local/provider';
import { tempDir } from '../support/temp';

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

/** A run whose one sub-task, `id`, writes `<id>/out.txt`, pushed to the branch `id`. */
const request = (url: string, id: string, fields: Partial<LeaderRequestInput> = {}) =>
  shellRequest(url, [subTask(id, writeAgent(`${id}/out.txt`, `from ${id}`))], {
    repo: { url, baseRef: 'main', targetRef: id },
    ...fields,
  });

async function stagingRefs(): Promise<string[]> {
  const out = await simpleGit({ baseDir: path.join(env.dataDir, 'staging.git') }).raw([
    'for-each-ref',
    '--format=%(refname)',
    'refs/flotilla/',
  ]);
  return out.split('\n').filter(Boolean);
}

async function gc(...args: string[]): Promise<GcReport> {
  const r = await flotilla(env.taskQueue, ['gc', '--json', ...args], { FLOTILLA_HOME: env.dataDir });
  expect(r.err).toBe('');
  expect(r.code).toBe(0);
  return JSON.parse(r.out) as GcReport;
}

describe('flotilla gc', () => {
  it("removes finished runs' staging refs, never an open run's; --dry-run removes nothing", async () => {
    const remote = await makeRemote({ 'README.md': 'gc\n' });
    const a = await env.run(request(remote.url, 'alpha'));
    const b = await env.run(request(remote.url, 'beta'));
    expect([a.result?.outcome, b.result?.outcome]).toEqual(['pushed', 'pushed']);
    const pushed = { alpha: await remote.head('alpha'), beta: await remote.head('beta') };
    const store = new ArtifactStore(path.join(env.dataDir, 'artifacts'));
    expect(pushed.alpha).toMatch(/^[0-9a-f]{40}$/);

    const open = await env.start(request(remote.url, 'gamma', withGates('plan')));
    await waitForStatus(open, 'the plan gate', (s) => s.phase === 'awaiting-plan-approval');
    const openKey = (await stagingRefs()).map((r) => r.split('/')[2]).find((k) => k.startsWith(`${open.workflowId}-`));
    expect(openKey, 'the open run has staging refs').toBeDefined();
    const openRefs = (await stagingRefs()).filter((r) => r.startsWith(`refs/flotilla/${openKey}/`));
    const before = await stagingRefs();
    expect(before.length, 'the finished runs have refs of their own').toBeGreaterThan(openRefs.length);

    // Visibility lags a close by a moment: wait until the list shows both runs closed.
    const dry = await waitFor('both finished runs listed as closed', async () => {
      const r = await gc('--older-than', '0', '--dry-run');
      return r.removedRuns.length === 2 ? r : undefined;
    });
    expect(dry.removedRuns.map((r) => r.workflowId).sort()).toEqual([a.workflowId, b.workflowId].sort());
    expect(dry.keptRuns).toContainEqual(expect.objectContaining({ workflowId: open.workflowId, reason: 'open' }));
    expect(await stagingRefs(), '--dry-run removes nothing').toEqual(before);

    // The default threshold (7 days) keeps runs that closed a moment ago.
    const recent = await gc();
    expect(recent.removedRuns).toEqual([]);
    expect(await stagingRefs()).toEqual(before);

    const done = await gc('--older-than', '0');
    expect(done.removedRuns.map((r) => r.workflowId).sort()).toEqual([a.workflowId, b.workflowId].sort());
    // The finished runs claimed their logs, the open run none yet: theirs go, while it is still open.
    expect(done.artifacts.removed).toBeGreaterThan(0);
    for (const ref of [a.result?.workers[0].logRef, b.result?.test?.logRef])
      expect(existsSync(store.pathOf(ref!)), ref).toBe(false);
    const after = await stagingRefs();
    expect(
      after.filter((r) => !r.startsWith(`refs/flotilla/${openKey}/`)),
      'no ref of a finished run is left',
    ).toEqual([]);
    expect(after).toEqual(openRefs);
    const staging = simpleGit({ baseDir: path.join(env.dataDir, 'staging.git') });
    expect(
      await staging.raw(['cat-file', '-t', pushed.alpha!]).catch(() => 'gone'),
      "a finished run's objects go with its refs",
    ).toBe('gone');
    expect(await remote.head('alpha')).toBe(pushed.alpha);
    expect(await remote.head('beta')).toBe(pushed.beta);

    // The open run still works: approved, it pushes from the refs gc kept.
    await open.signal(approveSignal, { gate: 'plan', by: 'test' });
    expect((await awaitRun(open)).result?.outcome).toBe('pushed');
    expect(await remote.show('gamma', 'gamma/out.txt')).toBe('from gamma\n');

    // Nothing open or recent any more: the last run's artifacts go too, and the space is accounted for.
    const logs = () => readdirSync(path.join(env.dataDir, 'artifacts')).filter((n) => n.endsWith('.log'));
    expect(logs().length).toBeGreaterThan(0);
    const last = await waitFor('the third run listed as closed', async () => {
      const r = await gc('--older-than', '0', '--dry-run');
      return r.removedRuns.length === 1 && r.keptRuns.length === 0 ? r : undefined;
    });
    expect(last.artifacts.removed).toBe(logs().length);
    const all = await gc('--older-than', '0');
    expect(all.removedRuns.map((r) => r.workflowId)).toEqual([open.workflowId]);
    expect(await stagingRefs()).toEqual([]);
    expect(logs()).toEqual([]);
    expect(all.freedBytes).toBeGreaterThan(0);
    expect(await remote.head('gamma')).toMatch(/^[0-9a-f]{40}$/);
  });

  it("removes the object store a finished run's lost host left behind", async () => {
    const remote = await makeRemote({ 'README.md': 'gc\n' });
    const end = await env.run(request(remote.url, 'delta'));
    expect(end.result?.outcome).toBe('pushed');
    const key = (await stagingRefs()).map((r) => r.split('/')[2]).find((k) => k.startsWith(`${end.workflowId}-`))!;
    // A host that could not remove the run's store as the run ended (its worker died) still has it.
    await acquireRunObjects(
      env.dataDir,
      `${key}/worker/lost`,
      path.join(env.dataDir, 'staging.git'),
      `refs/flotilla/${key}/base`,
    );
    const stores = () => readdirSync(path.join(env.dataDir, 'run-objects')).sort();
    expect(stores()).toEqual([`${key}.git`]);
    await waitFor('the run listed as closed', async () =>
      (await gc('--older-than', '0', '--dry-run')).removedRuns.length === 1 ? true : undefined,
    );
    expect(stores(), '--dry-run removes nothing').toEqual([`${key}.git`]);
    await gc('--older-than', '0');
    expect(stores()).toEqual([]);
  });

  it('keeps the refs of a run Temporal does not know', async () => {
    const cwd = path.join(env.dataDir, 'staging.git');
    const tree = execFileSync('git', ['mktree'], { cwd, input: '' }).toString().trim();
    const commit = execFileSync(
      'git',
      ['-c', 'user.name=t', '-c', 'user.email=t@t', 'commit-tree', tree, '-m', 'not a run of ours'],
      { cwd },
    )
      .toString()
      .trim();
    execFileSync('git', ['update-ref', 'refs/flotilla/stranger-deadbeef/result', commit], { cwd });
    const r = await gc('--older-than', '0');
    expect(r.keptRuns).toEqual([
      { runKey: 'stranger-deadbeef', reason: 'Temporal lists no leader run with this key; kept to be safe' },
    ]);
    expect(await stagingRefs()).toEqual(['refs/flotilla/stranger-deadbeef/result']);
  });

  it('refuses a malformed --older-than, naming the option', async () => {
    const r = await flotilla(env.taskQueue, ['gc', '--older-than', '7 days'], { FLOTILLA_HOME: env.dataDir });
    expect(r.code).toBe(2);
    expect(r.err).toContain('--older-than must be a whole number with a unit');
  });
});

describe('the retention policy (FLOTILLA_RETENTION)', () => {
  it("a worker prunes a closed run's refs, sandboxes and artifacts by itself, never an open run's, and logs what it removed", async () => {
    const dataDir = tempDir('retention');
    const taskQueue = `retention-${process.pid}`;
    const worker = await startWorkerProcess(taskQueue, {
      FLOTILLA_HOME: dataDir,
      FLOTILLA_RETENTION: '1s',
      FLOTILLA_RETENTION_INTERVAL: '1s',
    });
    const remote = await makeRemote({ 'README.md': 'retention\n' });
    const client = env.client;
    const refsOf = async (key: string) =>
      (
        await simpleGit({ baseDir: path.join(dataDir, 'staging.git') }).raw([
          'for-each-ref',
          '--format=%(refname)',
          `refs/flotilla/${key}/`,
        ])
      )
        .split('\n')
        .filter(Boolean);
    const store = new ArtifactStore(path.join(dataDir, 'artifacts'));
    expect(worker.output()).toContain('Retention: the state of runs closed over 1s is removed every 1s');
    // Both agents print nothing and both tests pass silently: the two runs store the same empty log.
    const agent = (id: string) => `echo 'output of ${id}' && ${writeAgent(`${id}/out.txt`, id)}`;
    const start = (id: string, fields: Partial<LeaderRequestInput> = {}) =>
      client.workflow.start('leaderWorkflow', {
        taskQueue,
        workflowId: `retention-${id}-${process.pid}`,
        args: [request(remote.url, id, { subTasks: [subTask(id, agent(id))], ...fields })],
      });
    const open = await start('held', withGates('push'));
    await waitForStatus(open, 'the push gate', (s) => s.phase === 'awaiting-push-approval', 60_000);
    const done = await start('done');
    const doneKey = runKeyOf(done.workflowId, done.firstExecutionRunId);
    // A sandbox of the run that a crash left behind (a sub-task's whose host died), made by the
    // provider the worker uses and holding a file of its uid; there before the run closes, so
    // one pass removes everything.
    const provider = new LocalSandboxProvider(path.join(dataDir, 'sandboxes'));
    const sandbox = await provider.provision(`${doneKey}/worker/lost`, { network: false });
    expect((await sandbox.exec('echo left behind > left.txt', { timeoutMs: 30_000 })).exitCode).toBe(0);
    const leftover = provider.dirFor(`${doneKey}/worker/lost`);
    expect(path.basename(leftover)).toMatch(new RegExp(`^${doneKey}_worker_lost-[0-9a-f]{10}$`));
    const finished = await awaitRun(done);
    expect(finished.result?.outcome).toBe('pushed');
    const openKey = runKeyOf(open.workflowId, open.firstExecutionRunId);
    const openRefs = await refsOf(openKey);
    expect(openRefs.length).toBeGreaterThan(0);
    const openClaims = (await store.claims()).get(openKey);
    expect(openClaims?.size, 'the gated run has run its agent and tests').toBeGreaterThan(0);
    const testLog = finished.result!.test!.logRef;
    expect(openClaims!.has(testLog.slice('sha256:'.length)), 'both runs stored the same test log').toBe(true);

    // The worker logs a pass once it is over: after that line, everything it removed is gone.
    const pruned =
      /retention \(runs closed over 1s\): removed 1 run\(s\): \d+ staging ref\(s\), 1 sandbox\(es\), [1-9]\d* artifact\(s\); freed/;
    await waitFor('the worker to log the closed run pruned', async () =>
      pruned.test(worker.output()) ? true : undefined,
    );
    expect(await refsOf(doneKey)).toEqual([]);
    expect(existsSync(leftover), 'the sandbox a crash left').toBe(false);
    expect(existsSync(store.pathOf(finished.result!.workers[0].logRef!)), "the closed run's agent log").toBe(false);
    expect(existsSync(store.pathOf(testLog)), 'a log the open run stored too').toBe(true);
    expect((await store.claims()).has(doneKey)).toBe(false);
    expect(await refsOf(openKey)).toEqual(openRefs);
    for (const hex of openClaims!) expect(existsSync(store.pathOf(`sha256:${hex}`)), hex).toBe(true);
    expect(await remote.head('done')).toBe(finished.result?.pushedSha);

    // The open run still pushes from what was kept; closed, it is pruned in turn.
    const gate = await open.query(statusQuery);
    await approve(client, open.workflowId, { gate: 'push', by: 'test', sha: gate.gate!.sha });
    expect((await awaitRun(open)).result?.outcome).toBe('pushed');
    expect(await remote.show('held', 'held/out.txt')).toBe('held\n');
    await waitFor('the second run pruned', async () =>
      (await refsOf(openKey)).length === 0 && !(await store.claims()).has(openKey) ? true : undefined,
    );
    expect(await store.stored()).toEqual([]);
    expect(worker.child.exitCode, 'the worker runs on').toBeNull();
  });

  it("keeps a run that rolled over while a later history of it is open: its first history's key holds its refs", async () => {
    const remote = await makeRemote({ 'README.md': 'gc\n' });
    const hold = holdCommand();
    const quick = ['a', 'b', 'c'].map((id) => subTask(id, writeAgent(`${id}/out.txt`, id)));
    const held = subTask('held', `${hold}; ${writeAgent('held/out.txt', 'held')}`);
    const limits = { maxParallel: 1, historyEvents: 50 };
    const handle = await env.start(shellRequest(remote.url, [...quick, held], { limits }));
    const first = env.client.workflow.getHandle(handle.workflowId, handle.firstExecutionRunId);
    await waitFor(
      'the run to roll over and held to run',
      async () =>
        (await first.describe()).status.name === 'CONTINUED_AS_NEW' && (await processesRunning(hold)).length
          ? true
          : undefined,
      60_000,
    );
    const key = runKeyOf(handle.workflowId, handle.firstExecutionRunId);
    expect((await stagingRefs()).filter((r) => r.startsWith(`refs/flotilla/${key}/`)).length).toBeGreaterThan(0);
    const report = await gc('--older-than', '0', '--dry-run');
    expect(report.keptRuns).toContainEqual(expect.objectContaining({ runKey: key, reason: 'open' }));
    expect(report.removedRuns.map((r) => r.runKey)).not.toContain(key);
    await letGo(hold);
    expect((await awaitRun(handle)).result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'held/out.txt')).toBe('held\n');
  });

  it('refuses a malformed FLOTILLA_RETENTION, and one Temporal would outlast, naming the variable', async () => {
    const worker = (value: string) =>
      run(CLI[0], [...CLI.slice(1), 'worker'], {
        TEMPORAL_ADDRESS: inject('temporalAddress'),
        FLOTILLA_HOME: tempDir('retention-bad'),
        FLOTILLA_RETENTION: value,
      });
    const malformed = await worker('a week');
    expect(malformed.code).toBe(2);
    expect(malformed.err).toContain(
      'FLOTILLA_RETENTION must be a whole number with a unit (s, m, h or d), such as 7d or 12h',
    );
    const zero = await worker('0');
    expect(zero.code).toBe(2);
    expect(zero.err).toContain('FLOTILLA_RETENTION must be longer than 0');
    // The dev server keeps closed runs 24 hours: after that gc could never confirm one is closed.
    const tooLong = await worker('7d');
    expect(tooLong.code).toBe(2);
    expect(tooLong.err).toContain(
      'FLOTILLA_RETENTION=7d is not shorter than the retention of namespace "default" (24h)',
    );
  });
});
