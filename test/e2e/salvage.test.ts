/**
 * A failed agent run never destroys work that could be collected: before its sandbox goes, what
 * the agent committed (and left uncommitted) is imported into the staging repository and named on
 * the failed report, so a person can recover it. The run still fails: nothing tested it. Real
 * sandboxes, real git, a real dev server; each failure is really provoked.
 */
import path from 'node:path';
import { simpleGit } from 'simple-git';
import { formatRunEnd } from '../../src/cli/format/run-end';
import { beforeAll, describe, expect, it } from 'vitest';
import { awaitRun } from '../../src/client/index';
import { TestEnv } from '../support/env';
import { processesRunning, waitFor } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { describeReplay } from '../support/replay';
import { shellRequest, subTask, writeAgent } from '../support/requests';

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

const staging = () => simpleGit(path.join(env.dataDir, 'staging.git'));

describe('salvage', () => {
  it('an agent that commits and then outlives its time limit: the run fails, its work is in staging at the ref the result names', async () => {
    const remote = await makeRemote({ 'README.md': '# sample\n' });
    const base = await remote.head();
    // One commit, one file left uncommitted, then a sleep far past the 3-second limit.
    const agent = `${writeAgent('slow/greeting.txt', 'hello, salvaged')} && echo 'half done' > slow/notes.txt && sleep 300`;
    const end = await env.run(
      shellRequest(remote.url, [subTask('slow', agent)], { limits: { workerTimeoutMinutes: 0.05 } }),
    );

    expect(end.failureType).toBe('failed');
    const slow = end.result?.workers.find((w) => w.workerId === 'slow');
    expect(slow).toMatchObject({ status: 'failed', reason: 'the agent timed out' });
    const salvaged = slow?.salvaged;
    expect(salvaged?.commits).toBe(2);
    expect(salvaged?.ref).toMatch(/workers\/slow$/);
    const git = staging();
    expect((await git.revparse([salvaged!.ref])).trim()).toBe(salvaged!.headSha);
    expect(await git.show([`${salvaged!.ref}:slow/greeting.txt`])).toBe('hello, salvaged\n');
    expect(await git.show([`${salvaged!.ref}:slow/notes.txt`])).toBe('half done\n');
    expect((await git.raw(['log', '--format=%s', `${base}..${salvaged!.ref}`])).split('\n')).toContain(
      'write slow/greeting.txt',
    );
    expect(formatRunEnd(end)).toContain(
      `salvaged: 2 unverified commit(s) at ${salvaged!.ref} (${salvaged!.headSha.slice(0, 12)})`,
    );

    expect(await remote.head()).toBe(base);
    expect(env.sandboxesLeft()).toEqual([]);
  });

  it('an agent that commits and then hits a sandbox limit: its activity fails for good, the reason says why, its commit is salvaged', async () => {
    const remote = await makeRemote({ 'README.md': '# sample\n' });
    const base = await remote.head();
    const agent = `${writeAgent('full/greeting.txt', 'hello before the limit')} && head -c 64M /dev/zero > /tmp/fill`;
    const end = await env.run(
      shellRequest(remote.url, [subTask('full', agent)], { sandbox: { limits: { tmpMiB: 8 } } }),
    );

    expect(end.failureType).toBe('failed');
    const full = end.result?.workers.find((w) => w.workerId === 'full');
    expect(full).toMatchObject({
      status: 'failed',
      reason: "the sandbox's /tmp is full (limit 8 MiB)",
      isolation: 'bubblewrap',
    });
    expect(full?.salvaged?.commits).toBe(1);
    expect(await staging().show([`${full!.salvaged!.ref}:full/greeting.txt`])).toBe('hello before the limit\n');
    expect(end.failureMessage).toContain('/tmp is full');

    expect(await remote.head()).toBe(base);
    expect(env.sandboxesLeft()).toEqual([]);
  });

  it('an agent that fails having changed nothing: nothing is salvaged and the result says nothing of it', async () => {
    const remote = await makeRemote({ 'README.md': '# sample\n' });
    const end = await env.run(shellRequest(remote.url, [subTask('idle', 'echo "giving up" >&2; exit 3')]));
    const idle = end.result?.workers.find((w) => w.workerId === 'idle');
    expect(idle).toMatchObject({ status: 'failed', reason: 'the agent exited with code 3' });
    expect(idle?.salvaged).toBeUndefined();
    expect(formatRunEnd(end)).not.toContain('salvaged');
  });

  it('work that cannot be collected (over the policy) leaves the reason the agent failed, says why beside it, and nothing in staging', async () => {
    const remote = await makeRemote({ 'README.md': '# sample\n' });
    const agent = `mkdir -p huge && head -c 5000 /dev/zero > huge/blob.bin && git add -A && git commit -qm blob && exit 9`;
    const end = await env.run(shellRequest(remote.url, [subTask('huge', agent)], { policy: { maxFileBytes: 1000 } }));
    const huge = end.result?.workers.find((w) => w.workerId === 'huge');
    expect(huge?.status).toBe('failed');
    expect(huge?.reason).toBe('the agent exited with code 9');
    const why = '"huge/blob.bin" is 5000 bytes, over the limit of 1000 bytes (policy.maxFileBytes)';
    expect(huge?.salvageFailed).toBe(why);
    expect(huge?.salvaged).toBeUndefined();
    expect(formatRunEnd(end)).toContain(`not salvaged: ${why}`);
    expect(await staging().raw(['for-each-ref', '--format=%(refname)', 'refs/'])).not.toContain('workers/huge');
    expect(env.sandboxesLeft()).toEqual([]);
  });

  it('a cancelled run collects nothing: the committed work goes with its sandbox', async () => {
    const remote = await makeRemote({ 'README.md': '# sample\n' });
    const marker = `sleep 5${Math.floor(Math.random() * 1e6)}`;
    const handle = await env.start(
      shellRequest(remote.url, [
        subTask('patient', `${writeAgent('patient/greeting.txt', 'hello, cancelled')} && ${marker}`),
      ]),
    );
    // The sleep starts only once the commit is made.
    await waitFor('the agent to commit and sleep', async () =>
      (await processesRunning(marker)).length ? true : undefined,
    );
    await handle.cancel();
    expect((await awaitRun(handle)).failureType).toBe('cancelled');
    expect(await staging().raw(['for-each-ref', '--format=%(refname)', `refs/`])).not.toContain('workers/patient');
    expect(env.sandboxesLeft()).toEqual([]);
  });
});

describeReplay(() => env, 2);
