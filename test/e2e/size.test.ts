/**
 * Bounded results: at the limit of 100 sub-tasks, with agents that print a lot (multi-byte and
 * control characters included), the RunResult and every payload of the leader's history stay
 * under 64 KiB; each worker's full output stays in its artifact.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultPayloadConverter } from '@temporalio/common';
import { TestEnv, makeRemote } from '../support/helpers';

const LIMIT = 64 * 1024;
const N = 100;

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});
afterAll(async () => {
  await env?.stop();
});

/** A chatty agent: ~20 KB of output, then its change, then a last line that names it. */
function chatty(id: string, exit = 0): string {
  return (
    `for i in $(seq 1 300); do printf 'línea %d — ünïcödé\\t\\x01 output of a chatty agent ${id}\\n' "$i"; done; ` +
    `mkdir -p ${id} && echo ok > ${id}/ok.txt && git add -A && git commit -qm ${id}; echo "last line of ${id}"; exit ${exit}`
  );
}

function request(url: string, exit = 0) {
  return {
    objective: 'a hundred chatty workers',
    repo: { url, baseRef: 'main' },
    testCmd: 'ls',
    subTasks: Array.from({ length: N }, (_, i) => ({
      id: `w${i}`,
      prompt: 'p',
      ownedPaths: [`w${i}`],
      agent: { kind: 'shell' as const, command: chatty(`w${i}`, exit) },
    })),
    limits: { maxParallel: 20 },
  };
}

/** Sizes of every payload in a workflow's history, found wherever the event keeps them. */
async function payloadSizes(workflowId: string): Promise<number[]> {
  const history = await env.client.workflow.getHandle(workflowId).fetchHistory();
  const sizes: number[] = [];
  const visit = (v: unknown): void => {
    if (!v || typeof v !== 'object') return;
    if (v instanceof Uint8Array) return;
    const p = v as { data?: unknown; metadata?: unknown };
    if (p.data instanceof Uint8Array && p.metadata && typeof p.metadata === 'object') {
      sizes.push(p.data.length);
      return;
    }
    for (const value of Object.values(v)) visit(value);
  };
  for (const e of history.events ?? []) visit(e);
  return sizes;
}

describe('result size at 100 sub-tasks', () => {
  it('100 chatty workers that push: the result and every history payload stay under 64 KiB', async () => {
    const remote = await makeRemote({ 'README.md': '# many\n' });
    const end = await env.run(request(remote.url));
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect((await remote.files()).filter((f) => f.endsWith('/ok.txt'))).toHaveLength(N);

    const result = end.result!;
    const bytes = Buffer.byteLength(JSON.stringify(result));
    expect(bytes, `RunResult of ${N} workers is ${bytes} bytes`).toBeLessThan(LIMIT);
    // The same measure Temporal applies: the payload as encoded.
    expect(defaultPayloadConverter.toPayload(result)!.data!.length).toBeLessThan(LIMIT);
    const sizes = await payloadSizes(end.workflowId);
    expect(sizes.length).toBeGreaterThan(N);
    expect(Math.max(...sizes)).toBeLessThan(LIMIT);

    // Short inline, whole in the artifact: the tail still ends with what the agent said last.
    for (const w of result.workers) {
      expect(w.tail).toContain(`last line of ${w.workerId}`);
      const log = readFileSync(path.join(env.dataDir, 'artifacts', `${w.logRef!.slice('sha256:'.length)}.log`), 'utf8');
      expect(log).toContain(`300 — ünïcödé`);
      expect(log).toContain(`last line of ${w.workerId}`);
    }
    remote.cleanup();
  }, 900_000);

  it('100 failing chatty workers: the failure and its result stay under 64 KiB and say how many failed', async () => {
    const remote = await makeRemote({ 'README.md': '# many\n' });
    const base = await remote.head();
    const end = await env.run(request(remote.url, 3));
    expect(end.failureType).toBe('failed');
    expect(end.failureMessage).toMatch(
      /^100 of 100 workers failed: w\d+: the agent exited with code 3; .* 97 more in the result$/,
    );
    expect(
      end.result?.workers.every((w) => w.status === 'failed' && w.tail?.includes(`last line of ${w.workerId}`)),
    ).toBe(true);
    expect(Buffer.byteLength(JSON.stringify(end.result))).toBeLessThan(LIMIT);
    expect(Math.max(...(await payloadSizes(end.workflowId)))).toBeLessThan(LIMIT);
    expect(await remote.head()).toBe(base);
    remote.cleanup();
  }, 900_000);
});
