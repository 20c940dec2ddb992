/**
 * The package as a user gets it: `npm pack`, installed globally into a throwaway prefix, run
 * from a directory outside the checkout against the suite's server and a real worker.
 */
import { existsSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import YAML from 'yaml';
import { TestEnv } from '../support/env';
import { type Ran, run, waitFor } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { shellRequest, subTask, writeAgent } from '../support/requests';
import { tempDir } from '../support/temp';

let env: TestEnv;
let dir: string;
let prefix: string;
let installed: string;
const root = path.join(__dirname, '../..');

beforeAll(async () => {
  env = await TestEnv.start();
  // The installed tree, agents' CLIs included, is over a gigabyte: removed with the file.
  dir = tempDir('pack');
  const packed = await run('npm', ['pack', '--pack-destination', dir, '--loglevel=error'], {}, root);
  expect(packed.code, packed.err).toBe(0);
  const tarballs = readdirSync(dir).filter((f) => f.endsWith('.tgz'));
  expect(tarballs).toEqual([`flotilla-cli-${version()}.tgz`]);
  prefix = path.join(dir, 'prefix');
  // From the npm cache where it can: the only network it may use is the registry.
  const install = await run(
    'npm',
    [
      'install',
      '-g',
      '--prefix',
      prefix,
      '--prefer-offline',
      '--no-audit',
      '--no-fund',
      '--loglevel=error',
      path.join(dir, tarballs[0]),
    ],
    {},
    dir,
  );
  expect(install.code, install.err).toBe(0);
  installed = path.join(prefix, 'lib/node_modules/@flotilla/cli');
}, 600_000);

function version(): string {
  return JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')).version;
}

/** The installed `flotilla`, run from a directory that has nothing to do with the checkout. */
function flotilla(cwd: string, args: string[]): Promise<Ran> {
  return run(
    path.join(prefix, 'bin/flotilla'),
    args,
    { TEMPORAL_ADDRESS: inject('temporalAddress'), FLOTILLA_TASK_QUEUE: env.taskQueue },
    cwd,
  );
}

describe('the installed package', () => {
  it('ships compiled code and the workflow bundle, and no TypeScript toolchain', () => {
    expect(existsSync(path.join(installed, 'dist/cli/index.js'))).toBe(true);
    expect(existsSync(path.join(installed, 'dist/workflow-bundle.js'))).toBe(true);
    expect(
      existsSync(path.join(installed, 'dist/workflow-bundle-traced.js')),
      'the workflow code a worker with tracing on runs',
    ).toBe(true);
    expect(existsSync(path.join(installed, 'schema/request.schema.json'))).toBe(true);
    expect(existsSync(path.join(installed, 'src'))).toBe(false);
    for (const compiler of ['tsx', 'typescript'])
      expect(existsSync(path.join(installed, 'node_modules', compiler)), compiler).toBe(false);
  });

  it('answers --help and --version, validates, starts, and reports a pushed run from any directory', async () => {
    const cwd = tempDir('elsewhere');
    const help = await flotilla(cwd, ['--help']);
    expect(help.code).toBe(0);
    expect(help.out).toContain('Usage: flotilla');
    expect((await flotilla(cwd, ['--version'])).out.trim()).toBe(version());

    const remote = await makeRemote({ 'README.md': 'x\n' });
    writeFileSync(
      path.join(cwd, 'flotilla.yaml'),
      YAML.stringify(
        shellRequest(remote.url, [subTask('one', writeAgent('one/greeting.txt', 'hello'))], {
          testCmd: 'cat one/greeting.txt',
        }),
      ),
    );
    const valid = await flotilla(cwd, ['validate', 'flotilla.yaml']);
    expect(valid.code).toBe(0);
    expect(valid.out).toContain(`1 sub-task(s) on ${remote.url}`);

    const started = await flotilla(cwd, ['start', 'flotilla.yaml', '--id', 'pkg-run', '--json']);
    expect(started.err).toBe('');
    expect(JSON.parse(started.out)).toMatchObject({ workflowId: 'pkg-run', taskQueue: env.taskQueue });

    const result = await flotilla(cwd, ['result', 'pkg-run', '--json']);
    expect(result.code).toBe(0);
    const end = JSON.parse(result.out);
    expect(end.result).toMatchObject({ outcome: 'pushed', pushedSha: await remote.head() });

    const status = await flotilla(cwd, ['status', 'pkg-run', '--json']);
    expect(status.code).toBe(0);
    expect(JSON.parse(status.out)).toMatchObject({
      workflowId: 'pkg-run',
      phase: 'done',
      outcome: 'pushed',
      repo: remote.url,
    });

    // Visibility is eventually consistent: the run shows up in the list shortly after it ends.
    const row = await waitFor('the run in `flotilla list`', async () => {
      const list = await flotilla(cwd, ['list', '--json']);
      return (JSON.parse(list.out) as { id: string; phase?: string }[]).find(
        (r) => r.id === 'pkg-run' && r.phase === 'done',
      );
    });
    expect(row).toMatchObject({ execution: 'COMPLETED', repo: remote.url });
    const ids = async (...filters: string[]) =>
      (JSON.parse((await flotilla(cwd, ['list', '--json', ...filters])).out) as { id: string }[]).map((r) => r.id);
    expect(await ids('--phase', 'done', '--repo', remote.url)).toEqual(['pkg-run']);
    expect(await ids('--awaiting')).not.toContain('pkg-run');
    expect(await ids('--phase', 'running')).not.toContain('pkg-run');
  }, 300_000);
});
