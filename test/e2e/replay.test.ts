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
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { temporal as proto } from '@temporalio/proto';
import { Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { approve, awaitRun, resume } from '../../src/client/index';
import { statusQuery } from '../../src/contracts/messages';
import { TestEnv, makeRemote, writeAgent } from '../support/helpers';
import { waitFor } from '../support/processes';

const ROOT = path.join(__dirname, '../history');
const RECORD = process.env.RECORD_HISTORIES;
const workflowsPath = path.join(__dirname, '../../src/workflows/index.ts');
const releases = RECORD ? [] : readdirSync(ROOT).sort();
const fixtures = (release: string) =>
  readdirSync(path.join(ROOT, release))
    .filter((f) => f.endsWith('.json'))
    .sort();

/**
 * Fixtures are protobuf's own object form of a History, as JSON. Not the Temporal CLI's proto3
 * JSON: the SDK's parser for that (historyFromJSON) fails with "type must be a Type" in this
 * dependency tree, where @temporalio/common and @temporalio/proto each carry a protobufjs copy.
 */
const History = proto.api.history.v1.History;
const TO_OBJECT = { longs: String, enums: String, bytes: String } as const;

describe.skipIf(RECORD)('committed histories', () => {
  it('exist for each release, covering the spine, gates, suspend/resume, repair and redo', () => {
    expect(releases.length).toBeGreaterThan(0);
    for (const release of releases) {
      const scenarios = new Set(fixtures(release).map((f) => f.split('.')[0]));
      expect([...scenarios].sort(), release).toEqual(['gates', 'redo', 'repair', 'spine', 'suspend']);
    }
  });

  it.each(releases)('of release %s replay against the current workflow code', async (release) => {
    const histories = fixtures(release).map((file) => {
      // <scenario>.leader.json is run history-<scenario>; <scenario>.<worker>.json its child history-<scenario>/<worker>.
      const [scenario, ...rest] = file.replace(/\.json$/, '').split('.');
      const name = rest.join('.');
      const history = History.fromObject(JSON.parse(readFileSync(path.join(ROOT, release, file), 'utf8')));
      return { workflowId: name === 'leader' ? `history-${scenario}` : `history-${scenario}/${name}`, history };
    });
    const errors: string[] = [];
    let replayed = 0;
    for await (const r of Worker.runReplayHistories({ workflowsPath, replayName: release }, histories)) {
      replayed++;
      if (r.error) errors.push(`${r.workflowId}: ${r.error}`);
    }
    expect(errors).toEqual([]);
    expect(replayed).toBe(histories.length);
  });
});

// ---- Recording (RECORD_HISTORIES=1): one run per scenario, every workflow's history saved ----

const CHECK =
  '#!/bin/bash\nfor f in $(ls */greeting.txt 2>/dev/null); do grep -q hello "$f" || { echo "FAIL: $f does not greet"; exit 1; }; done\necho ok\n';
const shell = (command: string) => ({ kind: 'shell' as const, command });
const task = (id: string, command = writeAgent(`${id}/greeting.txt`, `hello from ${id}`)) => ({
  id,
  prompt: `write ${id}`,
  ownedPaths: [id],
  agent: shell(command),
});
const request = (url: string, subTasks: ReturnType<typeof task>[], extra: object = {}) => ({
  objective: 'recorded for replay',
  repo: { url, baseRef: 'main' },
  testCmd: './check.sh',
  subTasks,
  ...extra,
});
const BOTH = 'one\\nleft\\nright\\nthree\\n';
const renamer = (id: string) =>
  task(
    id,
    `${writeAgent(`${id}/greeting.txt`, 'hello')} && if grep -qx left shared/names.txt; then printf '${BOTH}' > shared/names.txt; else sed -i 's/two/${id}/' shared/names.txt; fi && git commit -qam 'rename two'`,
  );

describe.runIf(RECORD)('recording', () => {
  const DIR = path.join(ROOT, path.basename(RECORD ?? 'unnamed'));
  let env: TestEnv;
  beforeAll(async () => {
    env = await TestEnv.start();
    rmSync(DIR, { recursive: true, force: true });
    mkdirSync(DIR, { recursive: true });
  });
  afterAll(async () => {
    await env?.stop();
  });

  /** Saves the leader's history and each of its children's, as `<scenario>.<workflow>.json`. */
  async function save(scenario: string, leaderId: string) {
    const leader = await env.client.workflow.getHandle(leaderId).fetchHistory();
    const children = (leader.events ?? []).flatMap(
      (e) => e.childWorkflowExecutionStartedEventAttributes?.workflowExecution?.workflowId ?? [],
    );
    for (const id of [leaderId, ...children]) {
      const history = id === leaderId ? leader : await env.client.workflow.getHandle(id).fetchHistory();
      const name = id === leaderId ? 'leader' : id.slice(leaderId.length + 1);
      const object = History.toObject(History.fromObject(history), TO_OBJECT);
      writeFileSync(path.join(DIR, `${scenario}.${name}.json`), `${JSON.stringify(object, null, 1)}\n`);
    }
  }

  const remote = () => makeRemote({ 'README.md': 'x\n', 'check.sh': CHECK, 'shared/names.txt': 'one\ntwo\nthree\n' });

  it('spine', async () => {
    const r = await remote();
    const end = await env.run(request(r.url, [task('one'), task('two')]), 'history-spine');
    expect(end.result?.outcome).toBe('pushed');
    await save('spine', end.workflowId);
  });

  it('gates', async () => {
    const r = await remote();
    const handle = await env.start(
      request(r.url, [task('one')], { gates: { plan: { mode: 'manual' }, push: { mode: 'manual' } } }),
      'history-gates',
    );
    await waitFor('the plan gate', async () =>
      (await handle.query(statusQuery)).gate?.gate === 'plan' ? true : undefined,
    );
    await handle.signal('approve', { gate: 'deploy' }); // a refused signal is part of a run's history too
    await approve(env.client, handle.workflowId, { gate: 'plan', by: 'ana' });
    const sha = await waitFor('the push gate', async () => (await handle.query(statusQuery)).gate?.sha);
    await approve(env.client, handle.workflowId, { gate: 'push', sha, by: 'ana' });
    expect((await awaitRun(handle)).result?.outcome).toBe('pushed');
    await save('gates', handle.workflowId);
  });

  it('suspend', async () => {
    const r = await remote();
    const asker = task(
      'one',
      `if [ -n "\${FLOTILLA_RESUME_MESSAGE:-}" ]; then ${writeAgent('one/greeting.txt', 'hello')}; else echo '::flotilla {"question": "ready?"}'; fi`,
    );
    const handle = await env.start(request(r.url, [asker]), 'history-suspend');
    await waitFor('the question', async () =>
      (await handle.query(statusQuery)).workers[0].state === 'suspended' ? true : undefined,
    );
    await resume(env.client, handle.workflowId, { workerId: 'one', message: 'yes', addBudgetUsd: 1 });
    expect((await awaitRun(handle)).result?.outcome).toBe('pushed');
    await save('suspend', handle.workflowId);
  });

  it('repair', async () => {
    const r = await remote();
    const fixer = shell(
      `if grep -q 'This is round 2 of' "$FLOTILLA_PROMPT_FILE"; then echo hello > grumpy/greeting.txt; else echo still > grumpy/greeting.txt; fi`,
    );
    const end = await env.run(
      request(r.url, [task('grumpy', writeAgent('grumpy/greeting.txt', 'go away'))], {
        repair: { agent: fixer, maxRounds: 3 },
      }),
      'history-repair',
    );
    expect(end.result?.outcome).toBe('pushed');
    await save('repair', end.workflowId);
  });

  it('redo', async () => {
    const r = await remote();
    const lazy = shell('git add -A');
    const end = await env.run(
      request(r.url, [renamer('left'), renamer('right')], {
        sharedPaths: ['shared'],
        resolver: { agent: lazy, maxRounds: 1 },
      }),
      'history-redo',
    );
    expect(end.result?.outcome).toBe('pushed');
    expect(end.result?.workers.map((w) => w.workerId)).toEqual(['left', 'right', 'right.redo']);
    await save('redo', end.workflowId);
  });
});
