/**
 * Safe deploys: the histories of this release's runs, committed under test/history/, replay
 * against the current workflow code. A change that would break runs in flight (a reordered
 * activity, a new await before an old one) fails here, in CI, before it is deployed.
 *
 * Each release's fixtures are in a directory of their own (test/history/v1, v2, …), kept as long
 * as runs of that release may be in flight: a workflow change guarded with patched() must still
 * replay the older ones. `scripts/record-histories.sh <dir>` (RECORD_HISTORIES=<dir>) runs each
 * scenario on the suite's dev server and writes every leader's and worker's history there.
 */
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { addSubTask, approve, awaitRun, cancelSubTask, resume, startRun } from '../../src/client/index';
import { finish, revise } from '../../src/client/messages';
import { statusQuery } from '../../src/contracts/messages';
import { parseLeaderRequest } from '../../src/contracts/request';
import { TestEnv } from '../support/env';
import { greetingsRemote, greetingsRequest, renamer } from '../support/greetings';
import { holdCommand, letGo, processesRunning, waitFor } from '../support/processes';
import { HISTORY_ROOT, History, fixtureHistories, fixtureReleases, replay } from '../support/replay';
import { greet, shell, subTask, withGates, writeAgent } from '../support/requests';
import { waitForStatus } from '../support/runs';

const RECORD = process.env.RECORD_HISTORIES;
const releases = RECORD ? [] : fixtureReleases();
const TO_OBJECT = { longs: String, enums: String, bytes: String } as const;

/**
 * Every release's scenarios; from v3 (the living plan) on, a diamond of dependencies and an
 * amended plan too; from v5 on, a best of N and a review round; from v6 on, a run that rolls over;
 * from v7 on, a plan sent in parts that rolls over (the carry read back by the carry query).
 */
const SCENARIOS = ['history-gates', 'history-redo', 'history-repair', 'history-spine', 'history-suspend'];
const LIVING_PLAN = ['history-amend', 'history-diamond'];
const WAVE_3 = ['history-bestof', 'history-review'];
const ROLLOVER = ['history-rollover'];
const PARTS = ['history-parts'];
const scenariosOf = (release: string) =>
  release < 'v3'
    ? SCENARIOS
    : release < 'v5'
      ? [...SCENARIOS, ...LIVING_PLAN]
      : release < 'v6'
        ? [...SCENARIOS, ...LIVING_PLAN, ...WAVE_3]
        : release < 'v7'
          ? [...SCENARIOS, ...LIVING_PLAN, ...WAVE_3, ...ROLLOVER]
          : [...SCENARIOS, ...LIVING_PLAN, ...WAVE_3, ...ROLLOVER, ...PARTS];

describe.skipIf(RECORD)('committed histories', () => {
  it('exist for each release, covering the spine, gates, suspend/resume, repair and redo (and the living plan from v3, best of N and review from v5, a rollover from v6, a plan in parts from v7)', () => {
    expect(releases).toEqual(expect.arrayContaining(['v1', 'v2', 'v3', 'v4', 'v5', 'v6', 'v7']));
    for (const release of releases) {
      const scenarios = new Set(fixtureHistories(release).map((h) => h.workflowId.split('/')[0]));
      expect([...scenarios].sort(), release).toEqual(scenariosOf(release).sort());
    }
  });

  it.each(releases)('of release %s replay against the current workflow code', async (release) => {
    const histories = fixtureHistories(release);
    const { replayed, errors } = await replay(histories, release);
    expect(errors).toEqual([]);
    expect(replayed).toBe(histories.length);
  });
});

// ---- Recording (RECORD_HISTORIES=<release>): one run per scenario, every workflow's history saved ----

describe.runIf(RECORD)('recording', () => {
  const DIR = path.join(HISTORY_ROOT, path.basename(RECORD ?? 'unnamed'));
  let env: TestEnv;
  beforeAll(async () => {
    env = await TestEnv.start();
    rmSync(DIR, { recursive: true, force: true });
    mkdirSync(DIR, { recursive: true });
  });

  /**
   * Saves the leader's history and each of its children's, as `<scenario>.<workflow>.json`; a run
   * that rolled over, each earlier history of its chain as `<scenario>.leader-<n>.json` (n from 1).
   */
  async function save(scenario: string, leaderId: string, runId?: string, n = 0): Promise<void> {
    const leader = await env.client.workflow.getHandle(leaderId, runId).fetchHistory();
    const children = (leader.events ?? []).flatMap(
      (e) => e.childWorkflowExecutionStartedEventAttributes?.workflowExecution?.workflowId ?? [],
    );
    const write = (name: string, history: typeof leader) => {
      const object = History.toObject(History.fromObject(history), TO_OBJECT);
      writeFileSync(path.join(DIR, `${scenario}.${name}.json`), `${JSON.stringify(object, null, 1)}\n`);
    };
    write(n ? `leader-${n}` : 'leader', leader);
    for (const id of children)
      write(id.slice(leaderId.length + 1), await env.client.workflow.getHandle(id).fetchHistory());
    const before = leader.events?.[0]?.workflowExecutionStartedEventAttributes?.continuedExecutionRunId;
    if (before) await save(scenario, leaderId, before, n + 1);
  }

  it('spine', async () => {
    const r = await greetingsRemote();
    const end = await env.run(greetingsRequest(r.url, [greet('one'), greet('two')]), 'history-spine');
    expect(end.result?.outcome).toBe('pushed');
    await save('spine', end.workflowId);
  });

  it('gates', async () => {
    const r = await greetingsRemote();
    const handle = await env.start(greetingsRequest(r.url, [greet('one')], withGates('plan', 'push')), 'history-gates');
    await waitForStatus(handle, 'the plan gate', (s) => s.gate?.gate === 'plan');
    await handle.signal('approve', { gate: 'deploy' }); // a refused signal is part of a run's history too
    await approve(env.client, handle.workflowId, { gate: 'plan', by: 'ana' });
    const sha = await waitFor('the push gate', async () => (await handle.query(statusQuery)).gate?.sha);
    await approve(env.client, handle.workflowId, { gate: 'push', sha, by: 'ana' });
    expect((await awaitRun(handle)).result?.outcome).toBe('pushed');
    await save('gates', handle.workflowId);
  });

  it('suspend', async () => {
    const r = await greetingsRemote();
    const asker = subTask(
      'one',
      `if [ -n "\${FLOTILLA_RESUME_MESSAGE:-}" ]; then ${writeAgent('one/greeting.txt', 'hello')}; else echo '::flotilla {"question": "ready?"}'; fi`,
    );
    const handle = await env.start(greetingsRequest(r.url, [asker]), 'history-suspend');
    await waitForStatus(handle, 'the question', (s) => s.workers[0].state === 'suspended');
    await resume(env.client, handle.workflowId, { workerId: 'one', message: 'yes', addBudgetUsd: 1 });
    expect((await awaitRun(handle)).result?.outcome).toBe('pushed');
    await save('suspend', handle.workflowId);
  });

  it('repair', async () => {
    const r = await greetingsRemote();
    const fixer = shell(
      `if grep -q 'This is round 2 of' "$FLOTILLA_PROMPT_FILE"; then echo hello > grumpy/greeting.txt; else echo still > grumpy/greeting.txt; fi`,
    );
    const end = await env.run(
      greetingsRequest(r.url, [subTask('grumpy', writeAgent('grumpy/greeting.txt', 'go away'))], {
        repair: { agent: fixer, maxRounds: 3 },
      }),
      'history-repair',
    );
    expect(end.result?.outcome).toBe('pushed');
    await save('repair', end.workflowId);
  });

  it('redo', async () => {
    const r = await greetingsRemote();
    const lazy = shell('git add -A');
    const end = await env.run(
      greetingsRequest(r.url, [renamer('left'), renamer('right')], {
        sharedPaths: ['shared'],
        resolver: { agent: lazy, maxRounds: 1 },
        // One at a time: right conflicts with left, the resolver fails, and right's next attempt redoes it.
        limits: { maxParallel: 1 },
      }),
      'history-redo',
    );
    expect(end.result?.outcome).toBe('pushed');
    expect(end.result?.workers.map((w) => w.workerId)).toEqual(['left', 'right', 'right.attempt2']);
    await save('redo', end.workflowId);
  });

  it('diamond', async () => {
    const r = await greetingsRemote();
    const dependent = (id: string, dependsOn: string[]) => ({ ...greet(id), dependsOn });
    const plan = [greet('a'), dependent('b', ['a']), dependent('c', ['a']), dependent('d', ['b', 'c'])];
    const end = await env.run(greetingsRequest(r.url, plan), 'history-diamond');
    expect(end.result?.outcome).toBe('pushed');
    await save('diamond', end.workflowId);
  });

  it('amend', async () => {
    const r = await greetingsRemote();
    const [slowHold, victimHold] = [holdCommand(), holdCommand()];
    const held = (id: string, hold: string) => subTask(id, `${hold}; ${writeAgent(`${id}/greeting.txt`, 'hello')}`);
    const handle = await env.start(
      greetingsRequest(r.url, [held('slow', slowHold), held('victim', victimHold)]),
      'history-amend',
    );
    await waitFor('both agents to hold', async () =>
      (await processesRunning(slowHold)).length && (await processesRunning(victimHold)).length ? true : undefined,
    );
    await addSubTask(env.client, handle.workflowId, { subTask: greet('extra'), by: 'ana' });
    await handle.signal('addSubTask', { subTask: greet('extra'), by: 'ana' }); // refused: a recorded refusal
    await cancelSubTask(env.client, handle.workflowId, { subTaskId: 'victim', by: 'ana', reason: 'not needed' });
    await letGo(slowHold);
    expect((await awaitRun(handle)).result?.outcome).toBe('pushed');
    await save('amend', handle.workflowId);
  });

  it('bestof', async () => {
    const r = await greetingsRemote();
    const end = await env.run(greetingsRequest(r.url, [{ ...greet('one'), attempts: 2 }]), 'history-bestof');
    expect(end.result?.outcome).toBe('pushed');
    expect(end.result?.candidates?.map((c) => c.id)).toEqual(['one.candidate1', 'one.candidate2']);
    await save('bestof', end.workflowId);
  });

  it('rollover', async () => {
    const r = await greetingsRemote();
    const plan = ['one', 'two', 'three', 'four'].map(greet);
    const limits = { maxParallel: 1, historyEvents: 50 };
    const end = await env.run(greetingsRequest(r.url, plan, { limits }), 'history-rollover');
    expect(end.result?.outcome).toBe('pushed');
    await save('rollover', end.workflowId);
    expect(readdirSync(DIR).filter((f) => f.startsWith('rollover.leader-')).length).toBeGreaterThan(0);
  });

  it('parts', async () => {
    const r = await greetingsRemote();
    // Prompts long enough that startRun sends the plan in three parts or more.
    const plan = ['one', 'two', 'three'].map((id) => ({ ...greet(id), prompt: `greet ${'politely '.repeat(4_000)}` }));
    const request = parseLeaderRequest(
      greetingsRequest(r.url, plan, { limits: { maxParallel: 1, historyEvents: 50 } }),
    );
    const handle = await startRun(env.client, request, { taskQueue: env.taskQueue, workflowId: 'history-parts' });
    expect((await awaitRun(handle)).result?.outcome).toBe('pushed');
    await save('parts', handle.workflowId);
    expect(readdirSync(DIR).filter((f) => f.startsWith('parts.leader-')).length).toBeGreaterThan(0);
  });

  it('review', async () => {
    const r = await greetingsRemote();
    const reviewed = subTask(
      'one',
      `if printf '%s\\n' "$FLOTILLA_PROMPT" | grep -q '^\\[comment '; then ${writeAgent('one/review.txt', 'revised')}; else ${writeAgent('one/greeting.txt', 'hello')}; fi`,
    );
    const handle = await env.start(greetingsRequest(r.url, [reviewed], { review: { rounds: 2 } }), 'history-review');
    await waitForStatus(handle, 'the review phase', (s) => s.phase === 'review' && s.review?.waiting === true);
    await revise(env.client, handle.workflowId, {
      comments: [{ body: 'say more', path: 'one/greeting.txt', kind: 'comment' }],
      by: 'ana',
    });
    await waitForStatus(handle, 'the round to end', (s) => s.review?.rounds.length === 1 && s.review.waiting === true);
    await finish(env.client, handle.workflowId, { by: 'ana', reason: 'approved' });
    expect((await awaitRun(handle)).result?.review?.rounds).toHaveLength(1);
    await save('review', handle.workflowId);
  });
});
