/**
 * Flotilla's search attributes, read back through the Temporal API the Web UI uses (describe and
 * visibility queries), and `flotilla list`'s filters built on them; `flotilla setup-cluster` on a
 * fresh namespace, and a worker that refuses one without them. Visibility is eventually
 * consistent: every read waits for its condition.
 */
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { msToTs } from '@temporalio/common/lib/time';
import { simpleGit } from 'simple-git';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { awaitRun } from '../../src/client/index';
import type { RunRow } from '../../src/client/list';
import {
  FlotillaAwaiting,
  FlotillaCostUsd,
  FlotillaOutcome,
  FlotillaPhase,
  FlotillaRepo,
  FlotillaTargetRef,
  SEARCH_ATTRIBUTES,
} from '../../src/contracts/search-attributes';
import { TestEnv } from '../support/env';
import { CLI, flotilla, run, spawnWorker, waitFor } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { describeReplay } from '../support/replay';
import { greet, shellRequest, subTask, withGates, writeAgent } from '../support/requests';
import { tempDir } from '../support/temp';

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

/** The run's attributes as describe (the run's page) shows them. */
async function attributes(handle: WorkflowHandle) {
  const attrs = (await handle.describe()).typedSearchAttributes;
  return {
    repo: attrs.get(FlotillaRepo),
    targetRef: attrs.get(FlotillaTargetRef),
    phase: attrs.get(FlotillaPhase),
    awaiting: attrs.get(FlotillaAwaiting),
    outcome: attrs.get(FlotillaOutcome),
    costUsd: attrs.get(FlotillaCostUsd),
  };
}

async function attributesWhen(
  handle: WorkflowHandle,
  what: string,
  ok: (a: Awaited<ReturnType<typeof attributes>>) => boolean,
) {
  return waitFor(what, async () => {
    const a = await attributes(handle);
    return ok(a) ? a : undefined;
  });
}

/** Workflow ids a visibility query returns, once it returns exactly `expected` (it lags). */
async function queryFinds(query: string, expected: string[]): Promise<string[]> {
  return waitFor(`${query} to list ${expected.join(', ') || 'nothing'}`, async () => {
    const ids: string[] = [];
    for await (const wf of env.client.workflow.list({ query })) ids.push(wf.workflowId);
    return ids.sort().join() === [...expected].sort().join() ? ids : undefined;
  });
}

async function list(...args: string[]): Promise<RunRow[]> {
  const r = await flotilla(env.taskQueue, ['list', '--json', ...args]);
  if (r.code !== 0) throw new Error(`flotilla list ${args.join(' ')}: exit ${r.code}: ${r.err}`);
  return JSON.parse(r.out) as RunRow[];
}

/** `flotilla list` with these filters, once it lists exactly `expected`. */
async function listFinds(args: string[], expected: string[]): Promise<RunRow[]> {
  return waitFor(`flotilla list ${args.join(' ')} to list ${expected.join(', ') || 'nothing'}`, async () => {
    const rows = await list(...args);
    return rows
      .map((r) => r.id)
      .sort()
      .join() === [...expected].sort().join()
      ? rows
      : undefined;
  });
}

describe('search attributes', () => {
  it('follow a run through the plan gate, the push gate and its end; flotilla list filters by them', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const paid = `echo '::flotilla {"costUsd": 0.25}' && ${writeAgent('api/greeting.txt', 'hello')}`;
    const gated = await env.start(
      shellRequest(remote.url, [subTask('api', paid)], {
        objective: 'gated run',
        repo: { url: remote.url, baseRef: 'main', targetRef: 'feature' },
        ...withGates('plan', 'push'),
      }),
    );
    const finished = await env.start(shellRequest(remote.url, [greet('web')], { objective: 'finished run' }));
    expect((await awaitRun(finished)).result?.outcome).toBe('pushed');
    const byRepo = `FlotillaRepo = '${remote.url}'`;

    // ---- At the plan gate ----
    const atPlan = await attributesWhen(gated, 'the plan gate', (a) => a.awaiting === 'plan');
    expect(atPlan).toMatchObject({
      repo: remote.url,
      targetRef: 'feature',
      phase: 'awaiting-plan-approval',
      costUsd: 0,
    });
    expect(atPlan.outcome).toBeUndefined();
    await queryFinds(`${byRepo} AND FlotillaAwaiting = 'plan'`, [gated.workflowId]);
    await listFinds(['--awaiting', '--repo', remote.url], [gated.workflowId]);
    await listFinds(['--awaiting', 'plan', '--repo', remote.url], [gated.workflowId]);
    expect((await list('--awaiting', 'push', '--repo', remote.url)).map((r) => r.id)).toEqual([]);
    expect((await flotilla(env.taskQueue, ['approve', gated.workflowId, '--gate', 'plan'])).code).toBe(0);

    // ---- At the push gate: the worker's cost is in ----
    const atPush = await attributesWhen(gated, 'the push gate', (a) => a.awaiting === 'push');
    expect(atPush).toMatchObject({ phase: 'awaiting-push-approval', costUsd: 0.25 });
    await queryFinds(`${byRepo} AND FlotillaAwaiting = 'push' AND FlotillaCostUsd > 0.2`, [gated.workflowId]);
    const [row] = await listFinds(['--awaiting', 'push', '--repo', remote.url], [gated.workflowId]);
    expect(row).toMatchObject({
      phase: 'awaiting-push-approval',
      awaiting: 'push',
      repo: remote.url,
      targetRef: 'feature',
      costUsd: 0.25,
    });
    await listFinds(['--awaiting', 'plan', '--repo', remote.url], []);
    const text = await flotilla(env.taskQueue, ['list', '--awaiting', '--repo', remote.url]);
    expect(text.out).toMatch(
      new RegExp(`^${gated.workflowId}\\s+awaiting-push-approval\\s+push\\s+-\\s+\\$0\\.25`, 'm'),
    );
    const sha = (await gated.query<{ gate?: { sha?: string } }>('status')).gate!.sha!;
    expect((await flotilla(env.taskQueue, ['approve', gated.workflowId, '--gate', 'push', '--sha', sha])).code).toBe(0);

    // ---- Finished: nobody is awaited, the outcome is set ----
    expect((await awaitRun(gated)).result?.outcome).toBe('pushed');
    expect(await attributes(gated)).toMatchObject({
      phase: 'done',
      awaiting: 'none',
      outcome: 'pushed',
      costUsd: 0.25,
    });
    // One upsert per change a filter sees (phases, gates, workers ending), not one per progress message.
    // (The SDK's own upserts of TemporalChangeVersion, one per patch a run meets, are not ours to count.)
    const { events } = await gated.fetchHistory();
    const upserts = (events ?? []).filter((e) =>
      Object.keys(e.upsertWorkflowSearchAttributesEventAttributes?.searchAttributes?.indexedFields ?? {}).some((k) =>
        k.startsWith('Flotilla'),
      ),
    ).length;
    expect(upserts).toBeLessThanOrEqual(9);
    await listFinds(['--awaiting', '--repo', remote.url], []);
    await listFinds(['--outcome', 'pushed', '--repo', remote.url], [gated.workflowId, finished.workflowId]);
    await listFinds(['--phase', 'done', '--repo', remote.url], [gated.workflowId, finished.workflowId]);
  });

  it('a suspended worker makes its run await an answer; a cancelled run ends cancelled', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const spender = `echo '::flotilla {"costUsd": 2}'; sleep 60`;
    const handle = await env.start(
      shellRequest(remote.url, [subTask('spender', spender)], { limits: { workerBudgetUsd: 1 } }),
    );
    await attributesWhen(handle, 'the suspension', (a) => a.awaiting === 'answer');
    await listFinds(['--awaiting', 'answer', '--repo', remote.url], [handle.workflowId]);
    await handle.cancel();
    await expect(handle.result()).rejects.toThrow();
    expect(await attributes(handle)).toMatchObject({ phase: 'cancelled', awaiting: 'none', outcome: 'cancelled' });
    await listFinds(['--outcome', 'cancelled', '--repo', remote.url], [handle.workflowId]);
  });

  it('--repo is one quoted value: a quote or a backslash in it neither breaks nor widens the query', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    // A repository whose path holds a quote, so quoting has to keep it to find the run.
    const odd = path.join(tempDir('odd'), `it's-a-repo.git`);
    await simpleGit().clone(remote.url, odd, ['--bare']);
    const handle = await env.start(shellRequest(odd, [greet('api')]));
    const end = await awaitRun(handle);
    expect(end.result?.outcome, end.failureMessage).toBe('pushed');
    await listFinds(['--repo', odd], [handle.workflowId]);
    // Each would list every run if it ended the literal; a backslash must not swallow the closing quote either.
    for (const hostile of [
      `${odd}' OR WorkflowType = 'leaderWorkflow`,
      `x\\' OR WorkflowType = 'leaderWorkflow' OR FlotillaRepo = '`,
      `' OR '1'='1`,
      'x\\',
    ]) {
      expect(await list('--repo', hostile), hostile).toEqual([]);
    }
  });

  it('a bad filter value is refused, naming the option and the values it takes', async () => {
    const r = await flotilla(env.taskQueue, ['list', '--phase', 'sleeping']);
    expect(r.code).toBe(2);
    expect(r.err).toContain('--phase must be one of resolving, planning, awaiting-plan-approval');
    const a = await flotilla(env.taskQueue, ['list', '--awaiting', 'coffee']);
    expect(a.code).toBe(2);
    expect(a.err).toContain('--awaiting must be one of plan, push, answer, any (got "coffee")');
  });
});

describe('flotilla setup-cluster', () => {
  it('registers the attributes in a fresh namespace, where list and the worker said to run it; a second run has nothing to do', async () => {
    const namespace = `fresh-${randomUUID().slice(0, 8)}`;
    await env.client.workflowService.registerNamespace({
      namespace,
      workflowExecutionRetentionPeriod: msToTs('1 day'),
    });
    const inFresh = { TEMPORAL_NAMESPACE: namespace };

    // Before: a filter and a worker both name the command.
    const refused = await waitFor('the fresh namespace to answer', async () => {
      const r = await flotilla(env.taskQueue, ['list', '--awaiting'], inFresh);
      return r.err.includes('lacks') ? r : undefined;
    });
    expect(refused.code).toBe(3);
    expect(refused.err).toContain(`namespace "${namespace}" lacks Flotilla's search attributes (FlotillaRepo,`);
    expect(refused.err).toContain('register them with `flotilla setup-cluster`');
    const home = tempDir('home');
    const worker = await run(CLI[0], [...CLI.slice(1), 'worker'], {
      TEMPORAL_ADDRESS: inject('temporalAddress'),
      FLOTILLA_HOME: home,
      ...inFresh,
    });
    expect(worker.code).not.toBe(0);
    expect(worker.err).toContain(`refusing to start: namespace "${namespace}" lacks Flotilla's search attributes`);
    expect(worker.err).toContain('`flotilla setup-cluster`');

    // Setup registers all of them, once.
    const setup = await flotilla(env.taskQueue, ['setup-cluster'], inFresh);
    expect(setup.code, setup.err).toBe(0);
    expect(setup.out).toBe(
      `Registered in namespace "${namespace}": ${SEARCH_ATTRIBUTES.map((k) => k.name).join(', ')}.\n`,
    );
    const again = await flotilla(env.taskQueue, ['setup-cluster'], inFresh);
    expect(again.code, again.err).toBe(0);
    expect(again.out).toBe(`Nothing to do: namespace "${namespace}" has all of Flotilla's search attributes.\n`);
    const { customAttributes } = await env.client.connection.operatorService.listSearchAttributes({ namespace });
    expect(Object.keys(customAttributes ?? {})).toEqual(expect.arrayContaining(SEARCH_ATTRIBUTES.map((k) => k.name)));

    // After: filters work there.
    await waitFor('filters in the set-up namespace', async () => {
      const r = await flotilla(env.taskQueue, ['list', '--awaiting', '--json'], inFresh);
      return r.code === 0 && r.out.trim() === '[]' ? true : undefined;
    });
  });
});

describe('FLOTILLA_REGISTER_SEARCH_ATTRIBUTES=1', () => {
  it('lets a worker register them itself, as the compose deployment does, then poll', async () => {
    const namespace = `owned-${randomUUID().slice(0, 8)}`;
    await env.client.workflowService.registerNamespace({
      namespace,
      workflowExecutionRetentionPeriod: msToTs('1 day'),
    });
    await waitFor(
      'the new namespace',
      async () => (await env.client.workflowService.describeNamespace({ namespace })) ?? undefined,
    );
    const worker = spawnWorker({
      ...process.env,
      TEMPORAL_ADDRESS: inject('temporalAddress'),
      TEMPORAL_NAMESPACE: namespace,
      FLOTILLA_HOME: tempDir('home'),
      FLOTILLA_REGISTER_SEARCH_ATTRIBUTES: '1',
    });
    await worker.polling(60_000);
    expect(worker.output()).toContain(
      `Registered search attributes in namespace "${namespace}": ${SEARCH_ATTRIBUTES.map((k) => k.name).join(', ')}`,
    );
    const { customAttributes } = await env.client.connection.operatorService.listSearchAttributes({ namespace });
    expect(Object.keys(customAttributes ?? {})).toEqual(expect.arrayContaining(SEARCH_ATTRIBUTES.map((k) => k.name)));
  });
});

describeReplay(() => env, 2);
