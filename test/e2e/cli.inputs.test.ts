/**
 * Careless input to the CLI itself: request files that never end, settings it cannot use, and
 * how its errors read. Each is refused at once, in one line that names what is wrong.
 */
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { CLI, spawnTracked } from '../support/processes';
import { tempDir } from '../support/temp';

/** Our CLI with `env` added; a CLI still running after `ms` is killed and reported as such. */
async function flotilla(args: string[], env: Record<string, string> = {}, ms = 20_000) {
  const cli = spawnTracked(CLI[0], [...CLI.slice(1), ...args], {
    ...process.env,
    TEMPORAL_ADDRESS: inject('temporalAddress'),
    ...env,
  });
  const timedOut = new Promise<'timed out'>((resolve) => setTimeout(() => resolve('timed out'), ms).unref());
  const code = await Promise.race([cli.exited, timedOut]);
  await cli.stop('SIGKILL');
  return { code, err: cli.stderr(), out: cli.output().slice(cli.stderr().length) };
}

describe('request files that never end', () => {
  it('a FIFO is refused at once, not waited on for a writer', async () => {
    const fifo = path.join(tempDir('fifo'), 'request.yaml');
    execFileSync('mkfifo', [fifo]);
    const r = await flotilla(['validate', fifo]);
    expect(r.code).toBe(2);
    expect(r.err).toContain(`cannot read request file ${fifo}: it is a FIFO, not a regular file`);
  });

  it('/dev/zero is refused at once, not read without end', async () => {
    const r = await flotilla(['validate', '/dev/zero']);
    expect(r.code).toBe(2);
    expect(r.err).toContain('cannot read request file /dev/zero: it is a device, not a regular file');
  });
});
