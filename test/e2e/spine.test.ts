/**
 * The spine end to end: a real dev server, real git remotes, real sandboxes, shell agents.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { TestEnv } from '../support/env';
import { greetingsRemote, greetingsRequest } from '../support/greetings';
import { replayFinishedRuns } from '../support/replay';
import { greet, subTask, writeAgent } from '../support/requests';
import { payloadSizes, waitForStatus } from '../support/runs';

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

describe('spine', () => {
  it('three workers with disjoint changes: all three land and the tests pass on them', async () => {
    const remote = await greetingsRemote();
    const base = await remote.head();
    const end = await env.run(greetingsRequest(remote.url, ['alpha', 'beta', 'gamma'].map(greet)));
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    const head = await remote.head();
    expect(head).toBe(end.result?.pushedSha);
    expect(head).not.toBe(base);
    for (const id of ['alpha', 'beta', 'gamma']) {
      expect(await remote.show('main', `${id}/greeting.txt`)).toBe(`hello from ${id}\n`);
    }
    expect(end.result?.test?.exitCode).toBe(0);
    expect(end.result?.test?.tail).toContain('all greetings ok');
    expect(end.result?.workers.map((w) => w.isolation)).toEqual(['bubblewrap', 'bubblewrap', 'bubblewrap']);
    expect(env.sandboxesLeft()).toEqual([]);
  });

  it('uncommitted work the agent leaves is committed, not lost', async () => {
    const remote = await greetingsRemote();
    const end = await env.run(
      greetingsRequest(remote.url, [subTask('lazy', writeAgent('lazy/greeting.txt', 'hello, uncommitted', false))]),
    );
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'lazy/greeting.txt')).toBe('hello, uncommitted\n');
  });

  it('a worker that writes outside its ownedPaths fails the run, naming the path', async () => {
    const remote = await greetingsRemote();
    const base = await remote.head();
    const sneaky = `${writeAgent('rogue/greeting.txt', 'hello')} && echo four >> shared/names.txt && git commit -qam sneak`;
    const end = await env.run(greetingsRequest(remote.url, [greet('good'), subTask('rogue', sneaky)]));
    expect(end.failureType).toBe('failed');
    const rogue = end.result?.workers.find((w) => w.workerId === 'rogue');
    expect(rogue?.status).toBe('failed');
    expect(rogue?.outOfScope).toEqual(['shared/names.txt']);
    expect(end.failureMessage).toContain('shared/names.txt');
    expect(await remote.head()).toBe(base);
  });

  it('two workers editing the same lines, no resolver and no retries: a conflict report names both, nothing is pushed', async () => {
    const remote = await greetingsRemote();
    const base = await remote.head();
    const edit = (id: string) =>
      `${writeAgent(`${id}/greeting.txt`, 'hello')} && sed -i 's/two/${id}/' shared/names.txt && git commit -qam 'rename two'`;
    const end = await env.run(
      // One at a time, so that left is merged first; no retry, which would redo right on top of it.
      greetingsRequest(remote.url, [subTask('left', edit('left')), subTask('right', edit('right'))], {
        sharedPaths: ['shared'],
        limits: { maxParallel: 1, retries: 0 },
      }),
    );
    expect(end.failureType).toBe('conflict');
    expect(end.result?.conflict).toEqual({ workerId: 'right', conflictsWith: ['left'], files: ['shared/names.txt'] });
    expect(end.failureMessage).toMatch(/right.*left.*shared\/names\.txt/);
    expect(await remote.head()).toBe(base);
    expect(env.sandboxesLeft()).toEqual([]);
  });

  it('a failing test command: nothing is pushed and the result carries the output tail', async () => {
    const remote = await greetingsRemote();
    const base = await remote.head();
    const end = await env.run(
      greetingsRequest(remote.url, [subTask('grumpy', writeAgent('grumpy/greeting.txt', 'go away'))]),
    );
    expect(end.failureType).toBe('tests-failed');
    expect(end.result?.test?.exitCode).toBe(1);
    expect(end.result?.test?.tail).toContain('FAIL: grumpy/greeting.txt does not greet');
    expect(await remote.head()).toBe(base);
  });

  it('the target ref moves between base resolution and push: "raced", remote unchanged', async () => {
    const remote = await greetingsRemote();
    const slow = `sleep 3 && ${writeAgent('slow/greeting.txt', 'hello')}`;
    const handle = await env.start(greetingsRequest(remote.url, [subTask('slow', slow)]));
    // Once workers run, the base is resolved; someone else pushes meanwhile.
    await waitForStatus(handle, 'the workers to run', (s) => s.phase === 'running');
    const theirs = await remote.advance('README.md', '# changed elsewhere\n');
    const end = await handle.result().then(
      () => undefined,
      (err) => err.cause,
    );
    expect(end?.type).toBe('raced');
    expect(end?.message).toContain('moved');
    expect(await remote.head()).toBe(theirs);
    expect(await remote.show('main', 'slow/greeting.txt')).toBeNull();
  });

  it('pushes to a new target branch with a create-only lease', async () => {
    const remote = await greetingsRemote();
    const base = await remote.head();
    const end = await env.run({
      ...greetingsRequest(remote.url, [greet('feature')]),
      repo: { url: remote.url, baseRef: 'main', targetRef: 'flotilla/feature' },
    });
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.head('flotilla/feature')).toBe(end.result?.pushedSha);
    expect(await remote.head('main')).toBe(base);
  });

  it('an agent that exits non-zero: the worker reports it, the run fails cleanly, no sandbox is left', async () => {
    const remote = await greetingsRemote();
    const base = await remote.head();
    const end = await env.run(
      greetingsRequest(remote.url, [greet('ok'), subTask('broken', 'echo "cannot do this" >&2; exit 7')]),
    );
    expect(end.failureType).toBe('failed');
    const broken = end.result?.workers.find((w) => w.workerId === 'broken');
    expect(broken).toMatchObject({ status: 'failed', exitCode: 7, reason: 'the agent exited with code 7' });
    expect(broken?.tail).toContain('cannot do this');
    expect(end.failureMessage).toContain('broken: the agent exited with code 7');
    expect(await remote.head()).toBe(base);
    expect(env.sandboxesLeft()).toEqual([]);
  });

  it('the git credential reaches neither a sandbox nor workflow history', async () => {
    const remote = await greetingsRemote();
    const token = `tok-${Date.now()}-secret`;
    process.env.FLOTILLA_GIT_TOKEN = token;
    try {
      const snoop = `mkdir -p snoop && { env; cat .git/config; git config --list; } > snoop/env.txt && echo hello > snoop/greeting.txt && git add -A && git commit -qm snoop`;
      const end = await env.run(greetingsRequest(remote.url, [subTask('snoop', snoop)]));
      expect(end.failureMessage).toBeUndefined();
      expect(end.result?.outcome).toBe('pushed');
      const seen = (await remote.show('main', 'snoop/env.txt'))!;
      expect(seen).toContain('FLOTILLA_WORKER_ID=snoop');
      expect(seen).not.toContain(token);
      for (const id of [end.workflowId, `${end.workflowId}/snoop`]) {
        const history = await env.client.workflow.getHandle(id).fetchHistory();
        expect(
          JSON.stringify(history, (_k, v) => (v instanceof Uint8Array ? Buffer.from(v).toString('utf8') : v)),
        ).not.toContain(token);
      }
    } finally {
      delete process.env.FLOTILLA_GIT_TOKEN;
    }
  });

  it.each([
    ['a missing field', (r: Record<string, unknown>) => delete r.testCmd, 'testCmd: is required'],
    [
      'dependencies that form a cycle',
      (r: Record<string, any>) => {
        r.subTasks[0].dependsOn = ['beta'];
        r.subTasks[1].dependsOn = ['alpha'];
      },
      'subTasks[0].dependsOn: the dependencies form a cycle: alpha → beta → alpha',
    ],
    [
      'a dependency on an unknown sub-task',
      (r: Record<string, any>) => (r.subTasks[1].dependsOn = ['gamma']),
      'subTasks[1].dependsOn[0]: unknown sub-task "gamma" (known: alpha, beta)',
    ],
    [
      'an ext:: remote',
      (r: Record<string, any>) => (r.repo.url = 'ext::sh -c touch% /tmp/pwned'),
      'repo.url: repository uses the transport helper "ext::"',
    ],
    [
      'a branch with ..',
      (r: Record<string, any>) => (r.repo.targetRef = 'feature/../main'),
      'repo.targetRef: branch name contains ".."',
    ],
  ])('a request with %s is refused inside the workflow, naming the field', async (_what, spoil, expected) => {
    const req = greetingsRequest('/nonexistent/remote.git', [greet('alpha'), greet('beta')]) as Record<string, unknown>;
    spoil(req);
    const end = await env.run(req);
    expect(end.failureType).toBe('InvalidRequest');
    expect(end.failureMessage).toContain(expected);
  });

  it('workers producing megabytes of changes and output keep every history payload small', async () => {
    const remote = await greetingsRemote();
    const heavy = (id: string) =>
      `mkdir -p ${id} && head -c 3000000 /dev/urandom | base64 > ${id}/blob.txt && seq 1 300000 && echo hello > ${id}/greeting.txt && git add -A && git commit -qm big`;
    const end = await env.run(
      greetingsRequest(remote.url, [subTask('heavy1', heavy('heavy1')), subTask('heavy2', heavy('heavy2'))]),
    );
    expect(end.result?.outcome).toBe('pushed');
    expect((await remote.show('main', 'heavy1/blob.txt'))!.length).toBeGreaterThan(3_000_000);
    const ids = [end.workflowId, `${end.workflowId}/heavy1`, `${end.workflowId}/heavy2`];
    for (const id of ids) {
      const history = await env.client.workflow.getHandle(id).fetchHistory();
      const sizes = payloadSizes(history);
      expect(sizes.length).toBeGreaterThan(0);
      expect(Math.max(...sizes)).toBeLessThan(64 * 1024);
    }
  });

  it('the histories of finished runs replay without nondeterminism', async () => {
    const { replayed, errors } = await replayFinishedRuns(env);
    expect(replayed).toBeGreaterThan(10);
    expect(errors).toEqual([]);
  });
});
