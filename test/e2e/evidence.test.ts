/**
 * Evidence a reviewer can weigh (issue 18 item 5), in real runs with shell agents: tests lost
 * against the base, flagged at the push gate and refused under policy.testCount: refuse; the
 * base tested once per commit; a flaky test run retried in the test sandbox reset as new; a measured
 * regression holding the push; the evidence tier in the status, the result and the Web UI.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { awaitRun } from '../../src/client/index';
import { TestEnv } from '../support/env';
import { flotilla } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { shellRequest, subTask, withGates } from '../support/requests';
import { waitForStatus } from '../support/runs';

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

/**
 * A test runner printing TAP: one test per file in tests/, skipped when the file says "skip".
 * It fails its first run (FLOTILLA_TEST_ATTEMPT 1) when the tree has a file `flaky`.
 */
const RUNNER = [
  'n=0; echo "TAP version 13"',
  'if [ -f flaky ] && [ "$FLOTILLA_TEST_ATTEMPT" = 1 ]; then echo "not ok 1 - timing out on a busy machine"; echo "1..1"; exit 1; fi',
  'for f in tests/*.t; do n=$((n+1)); t=$(basename "$f" .t); if grep -q skip "$f"; then echo "ok $n - $t # SKIP"; else echo "ok $n - $t"; fi; done',
  'echo "1..$n"',
  '',
].join('\n');

const library = (extra: Record<string, string> = {}) =>
  makeRemote({
    'test.sh': RUNNER,
    'measure.sh': 'echo "bench: warming up"; echo "time_ms $(cat perf.txt)"\n',
    'perf.txt': '100\n',
    'tests/adds.t': 'x\n',
    'tests/subtracts.t': 'x\n',
    'tests/divides.t': 'x\n',
    ...extra,
  });

/** A sub-task that deletes one test and skips another, as a worker cutting corners would. */
const cutTests = subTask(
  'cut',
  "git rm -q tests/subtracts.t && echo skip > tests/divides.t && echo x > tests/multiplies.t && git add -A && git commit -qm 'fewer tests'",
  { ownedPaths: ['tests'] },
);

const metadata = (workflowId: string) =>
  env.client.workflow.getHandle(workflowId).query<{ currentDetails?: string }>('__temporal_workflow_metadata');

describe('evidence', () => {
  it('a sub-task that deletes tests is refused under testCount: refuse, and flagged at the gate of the next run, which reuses the base', async () => {
    const remote = await library();
    const base = await remote.head();
    const refused = await env.run(
      shellRequest(remote.url, [cutTests], { testCmd: 'sh test.sh', policy: { testCount: 'refuse' } }),
    );
    expect(refused.failureType).toBe('tests-removed');
    expect(refused.failureMessage).toBe(
      'the integrated tree lost tests against the base (policy.testCount: refuse): passed on the base, now missing: subtracts; passed on the base, now skipped: divides',
    );
    expect(refused.result?.evidence?.base).toMatchObject({ sha: base, cached: false, counts: { passed: 3, total: 3 } });
    expect(await remote.head()).toBe(base);

    const handle = await env.start(
      shellRequest(remote.url, [cutTests], { testCmd: 'sh test.sh', ...withGates('push') }),
    );
    const s = await waitForStatus(handle, 'the push gate', (x) => x.phase === 'awaiting-push-approval');
    expect(s.gate?.evidence?.lost).toEqual({ fewer: 0, missing: ['subtracts'], skipped: ['divides'], more: false });
    const shown = await flotilla(env.taskQueue, ['status', handle.workflowId]);
    expect(shown.out).toContain('  evidence: repository tests passed: 2 passed, 0 failed, 1 skipped (TAP)');
    expect(shown.out).toContain('(cached from an earlier run)');
    expect(shown.out).toContain(
      '  LOST TESTS: passed on the base, now missing: subtracts; passed on the base, now skipped: divides',
    );
    expect((await metadata(handle.workflowId)).currentDetails).toContain('- LOST TESTS: passed on the base');
    await flotilla(env.taskQueue, ['approve', handle.workflowId, '--gate', 'push', '--sha', s.gate!.sha!]);
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    // The second run on the same base did not test it again: it reused the first run's test.
    expect(end.result?.evidence).toMatchObject({ tier: 'repository', base: { sha: base, cached: true } });
    expect(end.result?.evidence?.base?.logRef).toBe(refused.result?.evidence?.base?.logRef);
  });

  it('a test run that fails once passes when retried in the test sandbox reset as new: marked flaky, its failing output kept, pushed', async () => {
    const remote = await library();
    const task = subTask('flaky', "echo yes > flaky && git add -A && git commit -qm 'a flaky suite'", {
      ownedPaths: ['flaky'],
    });
    const end = await env.run(shellRequest(remote.url, [task], { testCmd: 'sh test.sh', limits: { flakyRetries: 1 } }));
    expect(end.result?.outcome).toBe('pushed');
    const evidence = end.result?.evidence;
    expect(evidence?.tier).toBe('repository');
    expect(evidence?.flaky).toHaveLength(1);
    expect(evidence?.flaky?.[0]).toMatchObject({ exitCode: 1, timedOut: false });
    expect(env.artifact(evidence!.flaky![0].logRef)).toContain('not ok 1 - timing out on a busy machine');
    expect(await remote.show('main', 'flaky')).toBe('yes\n');
  });

  it('without flaky retries the same run fails at once', async () => {
    const remote = await library();
    const task = subTask('flaky', "echo yes > flaky && git add -A && git commit -qm 'a flaky suite'", {
      ownedPaths: ['flaky'],
    });
    const end = await env.run(shellRequest(remote.url, [task], { testCmd: 'sh test.sh' }));
    expect(end.failureType).toBe('tests-failed');
  });

  it('with hidden tests the tier is hidden, and their counts (never their names) are compared with the base', async () => {
    const remote = await library();
    const hidden = await makeRemote({ 'tests/oracle.t': 'x\n' });
    const task = subTask('docs', "mkdir docs && echo hi > docs/a.md && git add -A && git commit -qm 'docs'", {
      ownedPaths: ['docs'],
    });
    const handle = await env.start(
      shellRequest(remote.url, [task], {
        testCmd: 'sh test.sh',
        oracle: { repo: hidden.url, ref: 'main' },
        ...withGates('push'),
      }),
    );
    const s = await waitForStatus(handle, 'the push gate', (x) => x.phase === 'awaiting-push-approval');
    expect(s.gate?.evidence).toMatchObject({
      tier: 'hidden',
      counts: { passed: 4, total: 4 },
      base: { counts: { passed: 4, total: 4 }, cached: false },
    });
    expect(s.gate?.evidence?.lost).toBeUndefined();
    expect(JSON.stringify(s.gate?.evidence)).not.toContain('oracle');
    const shown = await flotilla(env.taskQueue, ['status', handle.workflowId]);
    expect(shown.out).toContain('  evidence: hidden tests passed: 4 passed, 0 failed (TAP)');
    await flotilla(env.taskQueue, ['reject', handle.workflowId, '--gate', 'push', '--reason', 'seen']);
    expect((await awaitRun(handle)).failureType).toBe('rejected');
  });

  it('a measured regression holds the push although the gate is auto; the tier and the comparison are shown', async () => {
    const remote = await library();
    const task = subTask('slow', "echo 250 > perf.txt && git commit -qam 'slower'", { ownedPaths: ['perf.txt'] });
    const handle = await env.start(
      shellRequest(remote.url, [task], {
        testCmd: 'sh test.sh',
        measure: { cmd: 'sh measure.sh', holdOnRegression: { metric: 'time_ms', maxPercent: 20 } },
      }),
    );
    const s = await waitForStatus(handle, 'the held push', (x) => x.phase === 'awaiting-push-approval');
    expect(s.gate?.held).toBe('time_ms regressed 150% (100 → 250; at most 20% allowed, lower-is-better)');
    const shown = await flotilla(env.taskQueue, ['status', handle.workflowId]);
    expect(shown.out).toContain('  held:    time_ms regressed 150%');
    expect(shown.out).toContain('  evidence: repository tests passed: 3 passed, 0 failed (TAP)');
    expect(shown.out).toContain('  measure:  time_ms 100 → 250 (+150%)');
    const details = (await metadata(handle.workflowId)).currentDetails;
    expect(details).toContain('**Held for a person:** time_ms regressed 150%');
    expect(details).toContain('- measure:  time_ms 100 → 250 (+150%)');
    await flotilla(env.taskQueue, ['approve', handle.workflowId, '--gate', 'push', '--sha', s.gate!.sha!]);
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(end.result?.evidence?.measure?.metrics).toEqual([
      { name: 'time_ms', base: 100, result: 250, changePercent: 150 },
    ]);
  });
});
