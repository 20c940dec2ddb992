/**
 * A whole run on E2B sandboxes: the leader and its workers with sandbox.provider "e2b", the
 * provider talking to the in-process double of the E2B API (no cloud here). Proves the flow
 * end to end on that provider: a shallow seed (the base commit alone, by a streamed bundle),
 * agents, commits back by bundle, integration, pause while suspended, and every sandbox killed at
 * the end.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { awaitRun } from '../../src/client/index';
import { resumeSignal } from '../../src/contracts/messages';
import { E2BDouble } from '../support/e2b-double';
import { TestEnv } from '../support/env';
import { waitFor } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { shellRequest, subTask, writeAgent } from '../support/requests';
import { waitForStatus } from '../support/runs';

let double: E2BDouble;
let env: TestEnv;
beforeAll(async () => {
  double = await E2BDouble.start();
  env = await TestEnv.start({ e2bApi: double });
});

/** The fields of a run on E2B sandboxes. */
const onE2B = { sandbox: { provider: 'e2b' as const } };

/** Sandboxes the double still holds, running or paused. */
async function liveSandboxes(): Promise<number> {
  let count = 0;
  const pages = double.list({ query: { metadata: {} } });
  while (pages.hasNext) count += (await pages.nextItems()).length;
  return count;
}

describe('a run on E2B sandboxes', () => {
  it("pushes the workers' changes, pauses a suspended worker's sandbox, and kills every sandbox", async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const asker = `if [ -n "\${FLOTILLA_RESUME_MESSAGE:-}" ]; then ${writeAgent('two/greeting.txt', 'hello after the answer')}; else echo '::flotilla {"question": "ready?"}'; fi`;
    const handle = await env.start(
      shellRequest(
        remote.url,
        [subTask('one', writeAgent('one/greeting.txt', 'hello from e2b')), subTask('two', asker)],
        {
          ...onE2B,
          testCmd: 'cat one/greeting.txt two/greeting.txt',
        },
      ),
    );
    await waitForStatus(handle, 'the question', (s) => s.workers[1].state === 'suspended');
    await waitFor('the pause', async () => (double.calls.some((c) => c.method === 'pause') ? true : undefined));
    await handle.signal(resumeSignal, { workerId: 'two', message: 'yes' });
    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(end.result?.workers.map((w) => w.isolation)).toEqual(['e2b', 'e2b']);
    expect(await remote.show('main', 'one/greeting.txt')).toBe('hello from e2b\n');
    expect(await remote.show('main', 'two/greeting.txt')).toBe('hello after the answer\n');
    expect(await liveSandboxes()).toBe(0);
  });

  it('seeds the base commit alone, without its history, and the pushed commit still descends from the base', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    await remote.advance('README.md', 'y\n');
    const base = await remote.advance('README.md', 'z\n');
    const look = `echo "depth=$(git rev-list --count HEAD) shallow=$(cat .git/shallow)"; ${writeAgent('one/seen.txt', 'shallow')}`;
    const end = await env.run(
      shellRequest(remote.url, [subTask('one', look)], { ...onE2B, testCmd: 'cat README.md one/seen.txt' }),
    );
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(end.result?.workers[0].tail).toContain(`depth=1 shallow=${base}`);
    expect(await remote.show('main', 'one/seen.txt')).toBe('shallow\n');
    expect(await remote.log('main', base)).toEqual(expect.arrayContaining(['write one/seen.txt']));
    expect(await remote.log(base, 'main')).toEqual([]);
    // Bundles went up and came back as streams, not as buffers.
    expect(double.calls.some((c) => c.method === 'files.write' && c.args[1] === 'stream')).toBe(true);
    expect(double.calls.some((c) => c.method === 'files.read' && c.args[1] === 'stream')).toBe(true);
    expect(await liveSandboxes()).toBe(0);
  });
});
