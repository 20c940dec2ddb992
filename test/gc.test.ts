/**
 * `flotilla gc`: real runs on the suite's Temporal, then our CLI on the worker's data directory.
 * Finished runs lose their staging refs; an open run (held at a manual plan gate) keeps all of
 * its state; --dry-run removes nothing; what was pushed stays pushed.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { simpleGit } from 'simple-git';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GcReport } from '../src/gc';
import { awaitRun } from '../src/client';
import { acquireRunObjects } from '../src/run-objects';
import { approveSignal, statusQuery } from '../src/workflows/messages';
import { TestEnv, makeRemote, writeAgent } from './helpers';
import { flotilla, waitFor } from './processes';

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});
afterAll(async () => {
  await env?.stop();
});

function request(url: string, id: string, extra: object = {}) {
  return {
    objective: `gc ${id}`,
    repo: { url, baseRef: 'main', targetRef: id },
    testCmd: 'true',
    subTasks: [{ id, prompt: `do ${id}`, ownedPaths: [id], agent: { kind: 'shell', command: writeAgent(`${id}/out.txt`, `from ${id}`) } }],
    ...extra,
  };
}

async function stagingRefs(): Promise<string[]> {
  const out = await simpleGit({ baseDir: path.join(env.dataDir, 'staging.git') }).raw(['for-each-ref', '--format=%(refname)', 'refs/flotilla/']);
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
    expect(pushed.alpha).toMatch(/^[0-9a-f]{40}$/);

    const open = await env.start(request(remote.url, 'gamma', { gates: { plan: { mode: 'manual' } } }));
    await waitFor('the plan gate', async () => ((await open.query(statusQuery)).phase === 'awaiting-plan-approval' ? true : undefined));
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
    expect(done.artifacts.removed, 'an open run keeps every artifact').toBe(0);
    const after = await stagingRefs();
    expect(after.filter((r) => !r.startsWith(`refs/flotilla/${openKey}/`)), 'no ref of a finished run is left').toEqual([]);
    expect(after).toEqual(openRefs);
    const staging = simpleGit({ baseDir: path.join(env.dataDir, 'staging.git') });
    expect(await staging.raw(['cat-file', '-t', pushed.alpha!]).catch(() => 'gone'), "a finished run's objects go with its refs").toBe('gone');
    expect(await remote.head('alpha')).toBe(pushed.alpha);
    expect(await remote.head('beta')).toBe(pushed.beta);

    // The open run still works: approved, it pushes from the refs gc kept.
    await open.signal(approveSignal, { gate: 'plan', by: 'test' });
    expect((await awaitRun(open)).result?.outcome).toBe('pushed');
    expect(await remote.show('gamma', 'gamma/out.txt')).toBe('from gamma\n');

    // Nothing open or recent any more: artifacts go too, and the space is accounted for.
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

  it("removes the object store a finished run's lost sandbox left behind", async () => {
    const remote = await makeRemote({ 'README.md': 'gc\n' });
    const end = await env.run(request(remote.url, 'delta'));
    expect(end.result?.outcome).toBe('pushed');
    const key = (await stagingRefs()).map((r) => r.split('/')[2]).find((k) => k.startsWith(`${end.workflowId}-`))!;
    // A sandbox of the run that was never destroyed (its worker died) still holds the store.
    await acquireRunObjects(env.dataDir, `${key}/worker/lost`, path.join(env.dataDir, 'staging.git'), `refs/flotilla/${key}/base`);
    const stores = () => readdirSync(path.join(env.dataDir, 'run-objects')).sort();
    expect(stores()).toEqual([`${key}.git`, `${key}.users`]);
    await waitFor('the run listed as closed', async () => ((await gc('--older-than', '0', '--dry-run')).removedRuns.length === 1 ? true : undefined));
    expect(stores(), '--dry-run removes nothing').toEqual([`${key}.git`, `${key}.users`]);
    await gc('--older-than', '0');
    expect(stores()).toEqual([]);
  });

  it('keeps the refs of a run Temporal does not know', async () => {
    const cwd = path.join(env.dataDir, 'staging.git');
    const tree = execFileSync('git', ['mktree'], { cwd, input: '' }).toString().trim();
    const commit = execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', 'commit-tree', tree, '-m', 'not a run of ours'], { cwd }).toString().trim();
    execFileSync('git', ['update-ref', 'refs/flotilla/stranger-deadbeef/result', commit], { cwd });
    const r = await gc('--older-than', '0');
    expect(r.keptRuns).toEqual([{ runKey: 'stranger-deadbeef', reason: 'Temporal lists no leader run with this key; kept to be safe' }]);
    expect(await stagingRefs()).toEqual(['refs/flotilla/stranger-deadbeef/result']);
  });

  it('refuses a malformed --older-than, naming the option', async () => {
    const r = await flotilla(env.taskQueue, ['gc', '--older-than', '7 days'], { FLOTILLA_HOME: env.dataDir });
    expect(r.code).toBe(2);
    expect(r.err).toContain('--older-than must be a whole number with a unit');
  });
});
