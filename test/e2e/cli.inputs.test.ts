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

describe('settings it cannot use', () => {
  /** Stderr holds exactly one line, which names the variable. */
  const oneLineNaming = (err: string, name: string) => {
    expect(err.trim().split('\n'), err).toHaveLength(1);
    expect(err).toContain(name);
  };
  // A closed port: a process that got past its settings would fail on the connection instead.
  const closed = { TEMPORAL_ADDRESS: '127.0.0.1:1' };

  it.each([
    ['FLOTILLA_EGRESS_ALLOW', '*'],
    ['FLOTILLA_EGRESS_ALLOW', '10.0.0.0/8'],
    ['FLOTILLA_EGRESS_ALLOW', 'https://mirror.example.com/'],
    ['FLOTILLA_GIT_TOKEN_HOSTS', 'https://github.com'],
    ['FLOTILLA_ISOLATION', 'garbage'],
    ['FLOTILLA_HOME', '/dev/null'],
    ['FLOTILLA_TASK_QUEUE', ''],
  ])('the worker refuses %s=%j at start: one line naming it, exit 2', async (name, value) => {
    const r = await flotilla(['worker'], { ...closed, [name]: value });
    expect(r.code).toBe(2);
    oneLineNaming(r.err, name);
  });

  it('the worker run without the CLI (npm run worker) refuses them the same way', async () => {
    const entry = path.join(__dirname, '../../src/worker.ts');
    const worker = spawnTracked(CLI[0], [CLI[1], CLI[2], entry], {
      ...process.env,
      ...closed,
      FLOTILLA_ISOLATION: 'off',
    });
    expect(await worker.exited).toBe(2);
    oneLineNaming(worker.stderr(), 'FLOTILLA_ISOLATION');
  });

  it.each([
    ['TEMPORAL_UI_URL', 'javascript:alert(1)'],
    ['FLOTILLA_HOME', '/dev/null'],
    ['FLOTILLA_TASK_QUEUE', ''],
  ])('the CLI refuses %s=%j before any command runs: one line naming it, exit 2', async (name, value) => {
    for (const args of [
      ['status', 'some-run'],
      ['validate', '/nonexistent.yaml'],
    ]) {
      const r = await flotilla(args, { ...closed, [name]: value });
      expect(r.code, args[0]).toBe(2);
      expect(r.err).toMatch(new RegExp(`^flotilla: ${name}`));
      oneLineNaming(r.err, name);
    }
  });
});
