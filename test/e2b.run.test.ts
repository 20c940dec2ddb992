/**
 * A whole run on E2B sandboxes: the leader and its workers with sandbox.provider "e2b", the
 * provider talking to the in-process double of the E2B API (no cloud here). Proves the flow
 * end to end on that provider: seeding by bundle, agents, commits back as bytes, integration,
 * pause while suspended, and every sandbox killed at the end.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { awaitRun } from '../src/client';
import { type RunStatus, resumeSignal, statusQuery } from '../src/workflows/messages';
import { TestEnv, makeRemote, writeAgent } from './helpers';
import { waitFor } from './processes';
import { E2BDouble } from './support/e2b-double';

let double: E2BDouble;
let env: TestEnv;
beforeAll(async () => {
  double = await E2BDouble.start();
  env = await TestEnv.start({ e2bApi: double });
});
afterAll(async () => {
  await env?.stop();
  await double?.cleanup();
});

/** Sandboxes the double still holds, running or paused. */
async function liveSandboxes(): Promise<number> {
  let count = 0;
  const pages = await double.list({ query: { metadata: {} } });
  while (pages.hasNext) count += (await pages.nextItems()).length;
  return count;
}

describe('a run on E2B sandboxes', () => {
  it('pushes the workers\' changes, pauses a suspended worker\'s sandbox, and kills every sandbox', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const asker = `if [ -n "\${FLOTILLA_RESUME_MESSAGE:-}" ]; then ${writeAgent('two/greeting.txt', 'hello after the answer')}; else echo '::flotilla {"question": "ready?"}'; fi`;
    const handle = await env.start({
      objective: 'greetings in the cloud',
      repo: { url: remote.url, baseRef: 'main' },
      testCmd: 'cat one/greeting.txt two/greeting.txt',
      sandbox: { provider: 'e2b' },
      subTasks: [
        { id: 'one', prompt: 'p', ownedPaths: ['one'], agent: { kind: 'shell', command: writeAgent('one/greeting.txt', 'hello from e2b') } },
        { id: 'two', prompt: 'p', ownedPaths: ['two'], agent: { kind: 'shell', command: asker } },
      ],
    });
    await waitFor('the question', async () => {
      const s: RunStatus = await handle.query(statusQuery);
      return s.workers[1].state === 'suspended' ? s : undefined;
    });
    await waitFor('the pause', async () => (double.calls.some((c) => c.method === 'pause') ? true : undefined));
    await handle.signal(resumeSignal, { workerId: 'two', message: 'yes' });
    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(end.result?.workers.map((w) => w.isolation)).toEqual(['e2b', 'e2b']);
    expect(await remote.show('main', 'one/greeting.txt')).toBe('hello from e2b\n');
    expect(await remote.show('main', 'two/greeting.txt')).toBe('hello after the answer\n');
    expect(await liveSandboxes()).toBe(0);
    remote.cleanup();
  });
});
