import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestEnv, makeRemote, writeAgent } from './helpers';

const CHECK = `#!/bin/bash
# Passes when every greeting file present says hello.
for f in $(ls */greeting.txt 2>/dev/null); do grep -q hello "$f" || { echo "FAIL: $f does not greet"; exit 1; }; done
echo "all greetings ok"
`;

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});
afterAll(async () => {
  await env?.stop();
});

describe('a run with three disjoint workers', () => {
  it('pushes all three changes and the tests pass on them', async () => {
    const remote = await makeRemote({ 'README.md': '# sample\n', 'check.sh': CHECK });
    const base = await remote.head();
    const end = await env.run({
      objective: 'add three greetings',
      repo: { url: remote.url, baseRef: 'main' },
      testCmd: './check.sh',
      subTasks: ['alpha', 'beta', 'gamma'].map((id) => ({
        id,
        prompt: `write ${id}/greeting.txt`,
        ownedPaths: [id],
        agent: { kind: 'shell', command: writeAgent(`${id}/greeting.txt`, `hello from ${id}`) },
      })),
    });
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
    remote.cleanup();
  });
});
