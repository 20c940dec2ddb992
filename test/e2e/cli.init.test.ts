/**
 * `flotilla init` in a real repository writes a request that validates, and that the Temporal
 * CLI runs (through `flotilla request --json`) to a pushed commit.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { simpleGit } from 'simple-git';
import { beforeAll, describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { awaitRun } from '../../src/client/index';
import { TestEnv } from '../support/env';
import { flotilla, temporalCli } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { writeAgent } from '../support/requests';
import { tempDir } from '../support/temp';

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

describe('flotilla init', () => {
  it('writes a starter request for the repository it runs in, which validates and runs', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n', Makefile: 'test:\n\ttest -f one/greeting.txt\n' });
    const checkout = path.join(remote.root, 'checkout');
    await simpleGit().clone(remote.url, checkout);
    const agent = writeAgent('one/greeting.txt', 'hello from init');
    const cli = (args: string[]) => flotilla(env.taskQueue, args, {}, checkout);

    const init = await cli(['init', '--agent', 'shell', '--command', agent]);
    expect(init.err).toBe('');
    expect(init.code).toBe(0);
    const file = path.join(checkout, 'flotilla.yaml');
    const text = readFileSync(file, 'utf8');
    const schemaLine = /^# yaml-language-server: \$schema=(.+)$/m.exec(text);
    expect(schemaLine && existsSync(schemaLine[1])).toBe(true);
    expect(YAML.parse(text)).toMatchObject({
      repo: { url: remote.url, baseRef: 'main' },
      agent: { kind: 'shell', command: agent },
      testCmd: 'make test',
      subTasks: [{ id: 'first', ownedPaths: ['.'] }],
      sandbox: { network: false },
    });
    expect((await cli(['validate', 'flotilla.yaml'])).code).toBe(0);

    const again = await cli(['init', '--agent', 'shell', '--command', agent]);
    expect(again.code).toBe(2);
    expect(again.err).toContain('flotilla.yaml exists; pass --force to overwrite it');

    // The Temporal CLI takes JSON: `flotilla request --json` makes it from the YAML.
    const json = await cli(['request', 'flotilla.yaml', '--json']);
    expect(json.code).toBe(0);
    const input = path.join(remote.root, 'input.json');
    writeFileSync(input, json.out);
    const started = await temporalCli(
      'workflow',
      'start',
      '--type',
      'leaderWorkflow',
      '--task-queue',
      env.taskQueue,
      '--workflow-id',
      'init-run',
      '--input-file',
      input,
    );
    expect(started.err).toBe('');
    const end = await awaitRun(env.client.workflow.getHandle('init-run'));
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'one/greeting.txt')).toBe('hello from init\n');
  });

  it('refuses outside a git repository, and an agent option that does not fit', async () => {
    const outside = await flotilla(env.taskQueue, ['init'], {}, tempDir('no-repo'));
    expect(outside.code).toBe(2);
    expect(outside.err).toContain('not inside a git repository');
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const noCommand = await flotilla(env.taskQueue, ['init', '--agent', 'shell'], {}, path.join(remote.root, 'work'));
    expect(noCommand.code).toBe(2);
    expect(noCommand.err).toContain('--command is required with --agent shell');
  });
});
