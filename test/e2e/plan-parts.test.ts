/**
 * A plan in parts (issue 19, item 4: every payload under 64 KiB): a plan larger than one payload
 * is sent after the start, part by part, each named in the request by its SHA-256. The run takes
 * only the parts its starter named, reads them back across a rollover, and lands the whole plan;
 * no event of any of its histories holds 64 KiB. Without a server: test/unit/plan-parts.test.ts.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { awaitRun, continueRun, startRun } from '../../src/client/index';
import { planPartSignal, planQuery, statusQuery } from '../../src/contracts/messages';
import { digestOf, partsOf } from '../../src/contracts/plan-parts';
import { parseLeaderRequest } from '../../src/contracts/request';
import { temporalBinary } from '../../src/temporal/server';
import { TestEnv } from '../support/env';
import { run } from '../support/processes';
import { countingRemote } from '../support/remotes';
import { historiesOf, payloadSizes } from '../support/runs';
import { shell, shellRequest, subTask, writeAgent } from '../support/requests';
import { tempDir } from '../support/temp';

const LIMIT = 64 * 1024;

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

/** Sub-tasks whose prompts make the plan about `kib` KiB: each writes its own file. */
const bigPlan = (ids: string[], kib: number) =>
  ids.map((id) => ({
    ...subTask(id, writeAgent(`${id}/greeting.txt`, id)),
    prompt: `write ${id}\n${'context '.repeat(Math.floor((kib * 1024) / ids.length / 8))}`,
  }));

describe('a plan in parts', () => {
  it('takes only the parts its request names, lands the whole plan across a rollover, and keeps every payload under 64 KiB', async () => {
    const remote = await countingRemote({ 'README.md': 'x\n' });
    const ids = ['a', 'b', 'c', 'd', 'e', 'f'];
    const request = shellRequest(remote.url, bigPlan(ids, 150), { limits: { maxParallel: 2, historyEvents: 50 } });
    const { subTasks, ...head } = request;
    const parts = partsOf(subTasks);
    expect(parts.length).toBeGreaterThanOrEqual(3);
    const handle = await env.start({ ...head, planParts: parts.map(digestOf) });
    // Whoever else can signal the run: a part that is not the one named, one past the plan, and no part at all.
    const forged = JSON.stringify([subTask('evil', writeAgent('evil.txt', 'pwned'))]);
    await handle.signal(planPartSignal, { part: 0, text: forged, by: 'mallory' });
    await handle.signal(planPartSignal, { part: parts.length, text: parts[0], by: 'mallory' });
    await handle.signal(planPartSignal, 'not a part' as never);
    for (const [part, text] of parts.entries()) await handle.signal(planPartSignal, { part, text });
    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(remote.pushes()).toBe(1);
    for (const id of ids) expect(await remote.show('main', `${id}/greeting.txt`)).toBe(`${id}\n`);
    expect(await remote.show('main', 'evil.txt')).toBeNull();
    const status = await handle.query(statusQuery);
    expect(status.rollovers).toBeGreaterThanOrEqual(1);
    expect(status.refusals.filter((r) => r.message === 'planPart').map((r) => `${r.by}: ${r.reason}`)).toEqual([
      "mallory: part 0's text does not have the SHA-256 the request names for it (planParts[0])",
      `mallory: part ${parts.length} is not in the plan: the request names ${parts.length} part(s) (planParts)`,
      expect.stringMatching(/^unknown: invalid message: /),
    ]);
    // The plan the run held to the end is the one its starter sent, prompts and all.
    const plan = await handle.query(planQuery);
    expect(plan.subTasks.map((t) => t.prompt)).toEqual(subTasks.map((t) => t.prompt));
    // No event of any history of the chain, the first (the start and the parts) and each continued one, holds 64 KiB.
    const chain = await historiesOf(env.client, handle.workflowId);
    expect(chain.length).toBe(status.rollovers! + 1);
    for (const { history } of chain) expect(Math.max(...payloadSizes(history))).toBeLessThan(LIMIT);
  });

  it('a request whose planParts name no parts, or come beside subTasks, is refused naming the field', async () => {
    const remote = await countingRemote({ 'README.md': 'x\n' });
    const request = shellRequest(remote.url, [subTask('a', writeAgent('a/greeting.txt', 'a'))]);
    const { subTasks: _given, ...head } = request;
    const notDigests = await awaitRun(await env.start({ ...head, planParts: [digestOf('[]'), 'abc'] }));
    expect(notDigests.failureMessage).toContain('planParts[1]: is not a SHA-256 digest (64 lowercase hex digits)');
    const both = await awaitRun(await env.start({ ...request, planParts: [digestOf('[]')] }));
    expect(both.failureMessage).toContain(
      'planParts: a request lists its sub-tasks in subTasks or names them in planParts, not both',
    );
    expect(remote.pushes()).toBe(0);
  });

  it('startRun sends a large plan in parts, and flotilla continue runs a failed one with its whole plan', async () => {
    const remote = await countingRemote({ 'README.md': 'x\n' });
    // r, once p and q are in, fails unless it is told it failed in the run this one continues.
    const r = `grep -q 'which this run continues' "$FLOTILLA_PROMPT_FILE" || exit 3; ${writeAgent('r/greeting.txt', 'r')}`;
    const plan = bigPlan(['p', 'q', 'r'], 100).map((t) =>
      t.id === 'r' ? { ...t, agent: shell(r), dependsOn: ['p', 'q'] } : t,
    );
    const request = parseLeaderRequest(shellRequest(remote.url, plan, { limits: { retries: 0 } }));
    const handle = await startRun(env.client, request, { taskQueue: env.taskQueue });
    env.runs.push(handle.workflowId);
    const failed = await awaitRun(handle);
    expect(failed.result?.outcome).not.toBe('pushed');
    expect(remote.pushes()).toBe(0);
    const first = (await handle.fetchHistory()).events?.[0]?.workflowExecutionStartedEventAttributes;
    expect(first?.input?.payloads?.[0]?.data?.length).toBeLessThan(LIMIT);
    expect(Math.max(...payloadSizes(await handle.fetchHistory()))).toBeLessThan(LIMIT);

    const next = await continueRun(env.client, handle.workflowId, { taskQueue: env.taskQueue });
    env.runs.push(next.workflowId);
    const end = await awaitRun(next);
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    for (const id of ['p', 'q', 'r']) expect(await remote.show('main', `${id}/greeting.txt`)).toBe(`${id}\n`);
    // p and q were adopted from the failed run: only r's agent ran again.
    expect(end.result?.workers.filter((w) => w.runs > 0).map((w) => w.workerId)).toEqual(['r']);
    expect((await next.query(planQuery)).subTasks.map((t) => t.prompt)).toEqual(request.subTasks!.map((t) => t.prompt));
  });

  it("docs/request.md's example sends a plan in parts with the Temporal CLI alone, and the run lands it", async () => {
    const remote = await countingRemote({ 'README.md': 'x\n' });
    const ids = ['u', 'v', 'w'];
    const dir = tempDir('plan-parts-cli');
    const request = shellRequest(remote.url, bigPlan(ids, 3));
    writeFileSync(path.join(dir, 'request.json'), JSON.stringify(request));
    const doc = readFileSync('docs/request.md', 'utf8');
    const example = /```sh\n(jq -cj[^`]*?)```/.exec(doc)?.[1];
    expect(example).toContain('--name planPart');
    const workflowId = `plan-parts-cli-${Date.now()}`;
    // The example as written, on this suite's queue and server, its 500 sub-tasks a part made 2 of 3.
    const script = example!
      .replaceAll('[:500]', '[:2]')
      .replaceAll('[500:]', '[2:]')
      .replaceAll('--task-queue flotilla', `--task-queue ${env.taskQueue}`)
      .replaceAll('my-run', workflowId);
    const temporalDir = path.dirname(temporalBinary());
    const ran = await run(
      'bash',
      ['-euo', 'pipefail', '-c', script],
      {
        PATH: `${temporalDir}:${process.env.PATH}`,
        TEMPORAL_ADDRESS: inject('temporalAddress'),
      },
      dir,
    );
    expect(ran.err).not.toMatch(/error/i);
    env.runs.push(workflowId);
    const end = await awaitRun(env.client.workflow.getHandle(workflowId));
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    for (const id of ids) expect(await remote.show('main', `${id}/greeting.txt`)).toBe(`${id}\n`);
  });
});
