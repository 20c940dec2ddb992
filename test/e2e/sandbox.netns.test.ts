/**
 * A worker started with `ip netns exec` (one way to give a "host" its own network) sees a fresh
 * sysfs with an empty /sys/fs/cgroup. Its sandboxes must still run, on rlimits, instead of
 * hanging in a mkdir that never returns there.
 */
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { releaseAtEnd } from '../support/cleanup';
import { run } from '../support/processes';
import { machineHas } from '../support/requirements';
import { tempDir } from '../support/temp';

const ns = `flotilla-netns-${process.pid}`;

describe.runIf(machineHas('netns'))('a worker in a network namespace of its own', () => {
  it('runs sandbox commands although /sys/fs/cgroup is empty there', async () => {
    execFileSync('ip', ['netns', 'add', ns]);
    releaseAtEnd(() => execFileSync('ip', ['netns', 'delete', ns], { stdio: 'ignore' }));
    const tsx = createRequire(__filename).resolve('tsx/cjs');
    const r = await run('timeout', [
      '60',
      'ip',
      'netns',
      'exec',
      ns,
      process.execPath,
      '--require',
      tsx,
      path.join(__dirname, '../support/sandbox-echo.ts'),
      tempDir('netns-sandboxes'),
    ]);
    expect(r.err).toBe('');
    expect(r.out.trim()).toBe('exit 0: sandbox says hi');
    expect(r.code).toBe(0);
  }, 90_000);
});
