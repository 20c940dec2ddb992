/**
 * The ways users start and inspect runs: our CLI and the Temporal CLI binary, against the
 * suite's real server, with a real worker behind them.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { awaitRun } from '../../src/client/index';
import { TestEnv } from '../support/env';
import { flotilla as runFlotilla, flotillaOnTerminal, temporalCli } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { greet, shellRequest, subTask, writeAgent } from '../support/requests';
import { tempDir } from '../support/temp';

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

function flotilla(args: string[], extraEnv: Record<string, string> = {}) {
  return runFlotilla(env.taskQueue, args, extraEnv);
}

/** Greetings by sub-tasks `ids`; the test command prints them. */
const requestFor = (url: string, ids: string[]) => shellRequest(url, ids.map(greet), { testCmd: 'cat */greeting.txt' });

describe('flotilla CLI', () => {
  it('refuses a bad request before contacting Temporal, naming each bad field', async () => {
    const dir = tempDir('cli');
    const file = path.join(dir, 'bad.yaml');
    const req = requestFor('ext::sh -c evil', ['one', 'one']);
    writeFileSync(file, YAML.stringify(req));
    // A closed port: if the CLI tried to connect, the error would be about the connection.
    const r = await flotilla(['start', file], { TEMPORAL_ADDRESS: '127.0.0.1:1' });
    expect(r.code).toBe(2);
    expect(r.err).toContain('repo.url: repository uses the transport helper "ext::"');
    expect(r.err).toContain('subTasks[1].id: duplicate id "one"');
    expect(r.err).not.toContain('connect');
  });

  it('validate reports a missing field and a relative local repository is resolved against the request file', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const file = path.join(remote.root, 'req.json');
    const req: Record<string, unknown> = requestFor('./remote.git', ['one']);
    writeFileSync(file, JSON.stringify(req));
    expect((await flotilla(['validate', file])).out).toContain(`on ${remote.url}`);
    delete req.objective;
    writeFileSync(file, JSON.stringify(req));
    const bad = await flotilla(['validate', file]);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('objective: is required');
  });

  it('start --wait, status and result show a pushed run', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const file = path.join(remote.root, 'req.yaml');
    writeFileSync(file, YAML.stringify(requestFor(remote.url, ['one', 'two'])));
    const started = await flotilla(['start', file, '--id', 'cli-run-1', '--wait']);
    expect(started.err).toBe('');
    expect(started.code).toBe(0);
    expect(started.out).toContain('Started run cli-run-1');
    expect(started.out).toMatch(/Run cli-run-1: pushed/);
    const head = await remote.head();
    expect(started.out).toContain(`pushed ${head} to main`);
    const status = await flotilla(['status', 'cli-run-1']);
    expect(status.out).toMatch(/phase:\s+done \(pushed\)/);
    expect(status.out).toMatch(/one\s+done/);
    expect(status.out).not.toContain('\x1b[');
    expect((await flotillaOnTerminal(env.taskQueue, ['status', 'cli-run-1'])).out).toMatch(
      /phase:\s+\x1b\[32mdone\x1b\[39m \(pushed\)/,
    );
    expect((await flotillaOnTerminal(env.taskQueue, ['status', 'cli-run-1'], { NO_COLOR: '1' })).out).not.toContain(
      '\x1b[',
    );
    const result = await flotilla(['result', 'cli-run-1']);
    expect(result.code).toBe(0);
    expect(result.out).toContain(head);
    const missing = await flotilla(['status', 'no-such-run']);
    expect(missing.code).toBe(2);
    expect(missing.err).toContain('no run with id no-such-run');
  });

  it('a run that does not push exits 1 from start --wait, result and watch, with the reason', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const file = path.join(remote.root, 'req.yaml');
    writeFileSync(file, YAML.stringify({ ...requestFor(remote.url, ['one']), testCmd: 'echo the tests fail; exit 1' }));
    const before = await remote.head();
    const started = await flotilla(['start', file, '--id', 'cli-fails', '--wait', '--json']);
    expect(started.code).toBe(1);
    expect(JSON.parse(started.out).end).toMatchObject({ workflowId: 'cli-fails', failureType: 'tests-failed' });
    for (const verb of ['result', 'watch']) {
      const r = await flotilla([verb, 'cli-fails']);
      expect(r.code, verb).toBe(1);
      expect(r.out, verb).toContain('Run cli-fails did not push (tests-failed)');
    }
    expect(await remote.head()).toBe(before);
  });
});

describe('flotilla watch', () => {
  it('on a terminal, redraws in place (no screen clears) with live agent progress, and exits with the result', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const slow = `echo thinking; sleep 4; ${writeAgent('slow/greeting.txt', 'hello from slow')}`;
    const handle = await env.start(shellRequest(remote.url, [subTask('slow', slow)]), 'cli-watch-tty');
    const watched = await flotillaOnTerminal(env.taskQueue, ['watch', handle.workflowId]);
    expect(watched.code).toBe(0);
    expect(watched.out).toContain('Run cli-watch-tty: pushed');
    expect(watched.out).toMatch(/\x1b\[\d+A\r/);
    expect(watched.out).not.toContain('\x1b[2J');
    // The first frame may still say "working"; the agent's progress arrives as a redrawn line.
    expect(watched.out).toContain('live:');
    expect(watched.out).toMatch(/\x1b\[2K {2}slow: agent slow 0 turns/);
  });
});

describe('the Temporal CLI', () => {
  it('starts a run with `temporal workflow start` and queries its status', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const file = path.join(remote.root, 'input.json');
    writeFileSync(file, JSON.stringify(requestFor(remote.url, ['solo'])));
    const started = await temporalCli(
      'workflow',
      'start',
      '--type',
      'leaderWorkflow',
      '--task-queue',
      env.taskQueue,
      '--workflow-id',
      'tcli-run',
      '--input-file',
      file,
    );
    expect(started.err).toBe('');
    expect(started.code).toBe(0);
    const end = await awaitRun(env.client.workflow.getHandle('tcli-run'));
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'solo/greeting.txt')).toBe('hello from solo\n');
    const query = await temporalCli(
      'workflow',
      'query',
      '--workflow-id',
      'tcli-run',
      '--type',
      'status',
      '--output',
      'json',
    );
    expect(query.code).toBe(0);
    expect(JSON.parse(query.out).queryResult[0]).toMatchObject({ phase: 'done', outcome: 'pushed' });
  });
});
