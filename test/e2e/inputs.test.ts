/**
 * Careless inputs against real runs on the suite's dev server: the longest waits a request may
 * ask for, remotes that cannot work, agents the worker cannot run, requests that refuse
 * themselves, and messages to runs that have ended. Each ends the run at once with a reason a
 * person can act on, or is refused before anything starts.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { awaitRun } from '../../src/client/index';
import { MAX_WAIT_MINUTES } from '../../src/contracts/request';
import { TestEnv } from '../support/env';
import { makeRemote } from '../support/remotes';
import { greet, shellRequest } from '../support/requests';
import { waitForStatus } from '../support/runs';

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

describe('the longest waits', () => {
  it('a gate that waits a year opens, shows when it expires, and is cancellable', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const gate = { mode: 'manual' as const, timeoutMinutes: MAX_WAIT_MINUTES };
    const handle = await env.start(
      shellRequest(remote.url, [greet('one')], {
        gates: { plan: gate },
        limits: { suspendTimeoutMinutes: MAX_WAIT_MINUTES },
      }),
    );
    const s = await waitForStatus(handle, 'the plan gate', (st) => st.phase === 'awaiting-plan-approval');
    expect(s.gate!.expiresAt - s.gate!.openedAt).toBe(MAX_WAIT_MINUTES * 60_000);
    await handle.cancel();
    const end = await awaitRun(handle);
    expect(end.failureType).toBe('cancelled');
  });
});
