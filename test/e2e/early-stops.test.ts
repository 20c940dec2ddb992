/**
 * Early stops (issue 18), in real runs with shell agents in real sandboxes: an agent that writes
 * outside its paths is stopped at the next checkpoint (or the next turn it reports), long before
 * its task would have ended, and its retry is told why; under policy.outOfScope: revert only the stray changes go, the agent
 * is told while it runs, and the rest is pushed; a silent agent is stopped after
 * limits.idleMinutes and a looping one after limits.stallCheckpoints, each with its reason.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { TestEnv } from '../support/env';
import { makeRemote } from '../support/remotes';
import { shellRequest, subTask } from '../support/requests';

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

/** What every agent here sleeps at most: a stop that came from its end would take this long. */
const LONG_TASK_S = 60;
const QUICK = { checkpointIntervalSeconds: 1 };

describe('early stops', () => {
  it('an agent writing outside its paths is stopped at a checkpoint, its retry is told why, and the stray file is never pushed', async () => {
    const remote = await makeRemote({ 'README.md': '# sample\n' });
    // The first attempt strays and then works on for a minute; the retry, told why, keeps to w/.
    const agent = [
      'mkdir -p w && echo mine > w/a.txt',
      `if grep -q 'wrote outside its paths: stray.txt' "$FLOTILLA_PROMPT_FILE"; then exit 0; fi`,
      `echo stray > stray.txt && sleep ${LONG_TASK_S}`,
    ].join('\n');
    const started = Date.now();
    const end = await env.run(shellRequest(remote.url, [subTask('w', agent)], { limits: { ...QUICK, retries: 1 } }));
    const elapsedS = (Date.now() - started) / 1000;

    expect(end.result?.outcome, end.failureMessage).toBe('pushed');
    expect(elapsedS).toBeLessThan(LONG_TASK_S);
    const first = end.result!.workers.find((w) => w.workerId === 'w');
    expect(first).toMatchObject({
      status: 'failed',
      reason: 'wrote outside its paths: stray.txt',
      outOfScope: ['stray.txt'],
    });
    // Stopped, its work checkpointed and salvaged (unverified, never merged).
    expect(first?.salvaged?.commits).toBeGreaterThan(0);
    expect((await remote.files()).sort()).toEqual(['README.md', 'w/a.txt']);
    expect(env.sandboxesLeft()).toEqual([]);
  });

  it('a turn the agent reports is checked at once, without waiting for the checkpoint interval', async () => {
    const remote = await makeRemote({ 'README.md': '# sample\n' });
    const agent = `echo stray > stray.txt && echo '::flotilla {"turns": 1}' && sleep ${LONG_TASK_S}`;
    const started = Date.now();
    const end = await env.run(
      shellRequest(remote.url, [subTask('w', agent)], { limits: { checkpointIntervalSeconds: 600, retries: 0 } }),
    );

    expect((Date.now() - started) / 1000).toBeLessThan(LONG_TASK_S);
    expect(end.failureType).toBe('failed');
    expect(end.result?.workers.find((r) => r.workerId === 'w')).toMatchObject({
      status: 'failed',
      reason: 'wrote outside its paths: stray.txt',
    });
    expect(await remote.files()).toEqual(['README.md']);
  });

  it('under outOfScope: revert, only the stray changes are undone, the running agent is told, and the rest is pushed', async () => {
    const remote = await makeRemote({ 'README.md': '# sample\n' });
    // Strays twice (a new file, an edit of a file it does not own), then waits for the notice and keeps it.
    const agent = [
      'mkdir -p w && echo mine > w/a.txt',
      'echo stray > stray.txt && echo "# changed" > README.md',
      `for i in $(seq ${LONG_TASK_S * 5}); do [ -s "$FLOTILLA_NOTICES_FILE" ] && break; sleep 0.2; done`,
      'cp "$FLOTILLA_NOTICES_FILE" w/notice.txt',
    ].join('\n');
    const started = Date.now();
    const end = await env.run(
      shellRequest(remote.url, [subTask('w', agent)], {
        limits: { ...QUICK, retries: 0 },
        policy: { outOfScope: 'revert' },
      }),
    );

    expect(end.result?.outcome, end.failureMessage).toBe('pushed');
    expect((Date.now() - started) / 1000).toBeLessThan(LONG_TASK_S);
    expect((await remote.files()).sort()).toEqual(['README.md', 'w/a.txt', 'w/notice.txt']);
    expect(await remote.show('main', 'README.md')).toBe('# sample\n');
    const notice = await remote.show('main', 'w/notice.txt');
    expect(notice).toContain(
      'Flotilla reverted your changes to 2 path(s) outside the paths this sub-task may change (w)',
    );
    expect(notice).toMatch(/: (README\.md, stray\.txt|stray\.txt, README\.md)\./);
  });

  it('a silent agent is stopped after idleMinutes, its work checkpointed, with the reason', async () => {
    const remote = await makeRemote({ 'README.md': '# sample\n' });
    const agent = `mkdir -p w && echo half > w/half.txt && echo started && sleep ${LONG_TASK_S}`;
    const started = Date.now();
    const end = await env.run(
      shellRequest(remote.url, [subTask('w', agent)], { limits: { ...QUICK, retries: 0, idleMinutes: 0.05 } }),
    );

    expect((Date.now() - started) / 1000).toBeLessThan(LONG_TASK_S);
    expect(end.failureType).toBe('failed');
    const w = end.result?.workers.find((r) => r.workerId === 'w');
    expect(w).toMatchObject({ status: 'failed', reason: 'idle for 0.05 minutes' });
    expect(w?.checkpoint).toBeDefined();
    expect(w?.salvaged?.commits).toBeGreaterThan(0);
    expect(await remote.files()).toEqual(['README.md']);
  });

  it('a looping agent that prints the same line and changes nothing is stopped as stalled', async () => {
    const remote = await makeRemote({ 'README.md': '# sample\n' });
    const agent = `mkdir -p w && echo once > w/once.txt && for i in $(seq ${LONG_TASK_S * 5}); do echo thinking; sleep 0.2; done`;
    const started = Date.now();
    const end = await env.run(
      shellRequest(remote.url, [subTask('w', agent)], { limits: { ...QUICK, retries: 0, stallCheckpoints: 3 } }),
    );

    expect((Date.now() - started) / 1000).toBeLessThan(LONG_TASK_S);
    expect(end.failureType).toBe('failed');
    const w = end.result?.workers.find((r) => r.workerId === 'w');
    expect(w?.status).toBe('failed');
    expect(w?.reason).toMatch(/^stalled: 3 checkpoint\(s\) in a row \(0\.05 minutes\) with an unchanged workspace/);
    expect(await remote.files()).toEqual(['README.md']);
  });
});
