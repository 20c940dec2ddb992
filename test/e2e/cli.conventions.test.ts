/**
 * The command line's manners: help on every verb, --version, refusals with suggestions, exit
 * codes by class, colours only on a terminal, the request's JSON Schema and its JSON form.
 * These need no worker; where Temporal is involved, it is the suite's real server.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { describe, expect, inject, it } from 'vitest';
import YAML from 'yaml';
import { loadRequestFile } from '../../src/client/request-file';
import { CLI, flotilla as runFlotilla, flotillaOnTerminal, startWorkerProcess } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { shellRequest, subTask } from '../support/requests';
import { tempDir } from '../support/temp';

const queue = `nobody-${randomUUID()}`;
const flotilla = (args: string[], env: Record<string, string> = {}) => runFlotilla(queue, args, env);
const root = path.join(__dirname, '../..');
const example = path.join(root, 'examples/request.yaml');

/** Each verb, and an option only its own help shows. */
const VERBS: [string, string][] = [
  ['start', '--wait'],
  ['validate', '<request>'],
  ['request', '--json'],
  ['schema', 'schema/request.schema.json'],
  ['init', '--agent <kind>'],
  ['status', '--json'],
  ['watch', '<id>'],
  ['result', '--json'],
  ['list', '--awaiting'],
  ['approve', '--sha <sha>'],
  ['reject', '--reason <text>'],
  ['pause', '--subtask <id>'],
  ['resume', '--add-budget <usd>'],
  ['revise', '--comment <text>'],
  ['finish', '--reason <text>'],
  ['cancel', '<id>'],
  ['gc', '--older-than <age>'],
  ['setup-cluster', 'TEMPORAL_PROFILE=onprem'],
  ['worker', 'TEMPORAL_ADDRESS'],
];

describe('help and version', () => {
  it('--help, -h and help print the commands, the variables and the exit codes', async () => {
    for (const args of [['--help'], ['-h'], ['help'], []]) {
      const r = await flotilla(args);
      expect(r.code, args.join(' ')).toBe(0);
      expect(r.out).toContain('Usage: flotilla');
      for (const [verb] of VERBS) expect(r.out).toMatch(new RegExp(`^  ${verb} `, 'm'));
      expect(r.out).toContain('FLOTILLA_TEMPORAL_PORT');
      expect(r.out).toContain('3  cannot reach Temporal, or no worker polls');
    }
  });

  it('every verb has its own help, with its options and an example', async () => {
    const helps = await Promise.all(VERBS.map(([verb]) => flotilla([verb, '--help'])));
    VERBS.forEach(([verb, own], i) => {
      const r = helps[i];
      expect(r.code, verb).toBe(0);
      expect(r.out, verb).toContain(`Usage: flotilla ${verb}`);
      expect(r.out, verb).toContain(own);
      expect(r.out, verb).toMatch(new RegExp(`Example:\\n  \\$ flotilla ${verb}`));
      expect(r.out, verb).not.toContain('Commands:');
    });
    expect((await flotilla(['help', 'resume'])).out).toBe(helps[VERBS.findIndex(([v]) => v === 'resume')].out);
  });

  it('help read by a reader that stops early (| head -1) ends quietly, exit 0', async () => {
    const child = spawn(CLI[0], [...CLI.slice(1), 'status', '--help'], { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.destroy();
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const code = await new Promise((resolve) => child.once('close', resolve));
    expect(stderr).toBe('');
    expect(code).toBe(0);
  });

  it('--version prints the package version', async () => {
    const { version } = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
    for (const flag of ['--version', '-v']) {
      const r = await flotilla([flag]);
      expect(r.code).toBe(0);
      expect(r.out.trim()).toBe(version);
    }
  });
});

describe('refusals and exit codes', () => {
  it('an unknown option or command is refused with a suggestion (exit 2)', async () => {
    const option = await flotilla(['start', example, '--wiat']);
    expect(option.code).toBe(2);
    expect(option.err).toContain("unknown option '--wiat'");
    expect(option.err).toContain('Did you mean --wait?');
    const command = await flotilla(['stauts', 'x']);
    expect(command.code).toBe(2);
    expect(command.err).toContain("unknown command 'stauts'");
    expect(command.err).toContain('Did you mean status?');
    const choice = await flotilla(['approve', 'x', '--gate', 'merge']);
    expect(choice.code).toBe(2);
    expect(choice.err).toContain('Allowed choices are plan, push');
    const money = await flotilla(['resume', 'x', '--subtask', 'a', '--add-budget', 'lots']);
    expect(money.code).toBe(2);
    expect(money.err).toContain('--add-budget must be a positive number of dollars');
  });

  it('pause and resume take --subtask; --worker, its old name, still works, hidden from help and saying so on stderr', async () => {
    for (const verb of ['pause', 'resume']) {
      const help = await flotilla([verb, '--help']);
      expect(help.out, verb).toContain('--subtask <id>');
      expect(help.out, verb).not.toContain('--worker');
    }
    const old = await flotilla(['pause', 'no-such-run', '--worker', 'a']);
    expect(old.code).toBe(2);
    expect(old.err).toContain('flotilla: warning: --worker is deprecated; use --subtask\n');
    expect(old.err).toContain('no run with id no-such-run');
    const current = await flotilla(['resume', 'no-such-run', '--subtask', 'a']);
    expect(current.code).toBe(2);
    expect(current.err).not.toContain('deprecated');
    const both = await flotilla(['resume', 'x', '--worker', 'a', '--subtask', 'a']);
    expect(both.code).toBe(2);
    expect(both.err).toContain('--worker is the old name of --subtask; give --subtask only');
    const neither = await flotilla(['pause', 'x']);
    expect(neither.code).toBe(2);
    expect(neither.err).toContain("required option '--subtask <id>' not specified");
  });

  it('a request with an old limit name is valid, and validate says what to call it now', async () => {
    const file = path.join(tempDir('cli'), 'old.yaml');
    writeFileSync(
      file,
      'objective: x\nrepo: { url: /tmp/r }\ntestCmd: "true"\nlimits: { workerTimeoutMinutes: 5, workerBudgetUsd: 1 }\n' +
        'subTasks: [{ id: a, prompt: p, ownedPaths: [a], agent: { kind: shell, command: "true" } }]\n',
    );
    const r = await flotilla(['validate', file]);
    expect(r.code).toBe(0);
    expect(r.err).toContain(
      'flotilla: warning: limits.workerTimeoutMinutes is deprecated; use limits.agentTimeoutMinutes',
    );
    expect(r.err).toContain('flotilla: warning: limits.workerBudgetUsd is deprecated; use limits.subTaskBudgetUsd');
    const printed = await flotilla(['request', file, '--json']);
    expect(JSON.parse(printed.out).limits).toMatchObject({ agentTimeoutMinutes: 5, subTaskBudgetUsd: 1 });
  });

  it('a bad request exits 2 naming the field', async () => {
    const file = path.join(tempDir('cli'), 'bad.yaml');
    writeFileSync(
      file,
      'objective: x\nrepo: { url: /tmp/r }\ntestCmd: true\nsubTasks: [{ id: a, prompt: p, ownedPaths: [a], agent: { kind: shell } }]\n',
    );
    const r = await flotilla(['validate', file]);
    expect(r.code).toBe(2);
    expect(r.err).toContain('subTasks[0].agent.command');
  });

  it('a variable Flotilla cannot use exits 2 naming it', async () => {
    const r = await flotilla(['list'], { TEMPORAL_ADDRESS: '', FLOTILLA_TEMPORAL_PORT: '70000' });
    expect(r.code).toBe(2);
    expect(r.err).toContain(
      'FLOTILLA_TEMPORAL_PORT must be a port number from 1 to 64535 (the Web UI uses port + 1000), not "70000"',
    );
  });

  it('exits 3 when Temporal cannot be reached, configured or embedded', async () => {
    const configured = await flotilla(['status', 'x'], { TEMPORAL_ADDRESS: '127.0.0.1:1' });
    expect(configured.code).toBe(3);
    expect(configured.err).toContain('cannot reach Temporal at 127.0.0.1:1');
    const embedded = await flotilla(['list'], { TEMPORAL_ADDRESS: '', FLOTILLA_TEMPORAL_PORT: '1' });
    expect(embedded.code).toBe(3);
    expect(embedded.err).toContain('no Temporal server at 127.0.0.1:1');
  });

  it('a run on a task queue nobody polls: start warns, status exits 3 within 5 s naming the queue and the command; so after its worker is killed', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const file = path.join(remote.root, 'req.yaml');
    writeFileSync(file, YAML.stringify(shellRequest(remote.url, [subTask('a', 'true')])));
    const id = `unserved-${randomUUID()}`;
    const started = await flotilla(['start', file, '--id', id, '--json']);
    expect(started.code).toBe(0);
    expect(JSON.parse(started.out)).toMatchObject({ workflowId: id, taskQueue: queue });
    expect(started.err).toContain(
      `no worker is polling task queue "${queue}"; start one with: FLOTILLA_TASK_QUEUE=${queue} flotilla worker`,
    );
    const noWorker = `no worker is polling task queue "${queue}"; start one with: FLOTILLA_TASK_QUEUE=${queue} flotilla worker`;
    for (const args of [
      ['status', id],
      ['status', id, '--json'],
    ]) {
      const t0 = Date.now();
      const status = await flotilla(args);
      expect(Date.now() - t0).toBeLessThan(5_000);
      expect(status.code).toBe(3);
      // With --json the error is JSON on stdout, for the script that asked for it.
      if (args.includes('--json'))
        expect(JSON.parse(status.out)).toEqual({ error: { message: noWorker, exitCode: 3 } });
      else expect([status.out, status.err]).toEqual(['', expect.stringContaining(noWorker)]);
    }

    // A worker that polls, then is killed: it stays listed as a poller for minutes, so the
    // query itself must be bounded and say what is wrong.
    const worker = await startWorkerProcess(queue, { FLOTILLA_HOME: tempDir('cli-home') });
    expect((await flotilla(['status', id])).code).toBe(0);
    await worker.stop('SIGKILL');
    const t0 = Date.now();
    const stale = await flotilla(['status', id]);
    expect(Date.now() - t0).toBeLessThan(25_000);
    expect(stale.code, stale.err).toBe(3);
    expect(stale.err).toContain(
      `no worker on task queue "${queue}" answers (a worker may have stopped); start one with: FLOTILLA_TASK_QUEUE=${queue} flotilla worker`,
    );

    const connection = await Connection.connect({ address: inject('temporalAddress') });
    await new Client({ connection }).workflow.getHandle(id).terminate('test over');
    await connection.close();
  }, 240_000);
});

describe('colours', () => {
  const onTerminal = (args: string[], env: Record<string, string> = {}) => flotillaOnTerminal(queue, args, env);

  it('are used on a terminal, never with NO_COLOR, and never in a pipe', async () => {
    const tty = await onTerminal(['--help']);
    expect(tty.code).toBe(0);
    expect(tty.out).toContain('\x1b[1mUsage:');
    const noColor = await onTerminal(['--help'], { NO_COLOR: '1' });
    expect(noColor.out).toContain('Usage:');
    expect(noColor.out).not.toContain('\x1b[');
    const piped = await flotilla(['--help']);
    expect(piped.out).not.toContain('\x1b[');
  });
});

describe('the request as JSON Schema and as Temporal CLI input', () => {
  it('the committed schema file is what `flotilla schema` prints', async () => {
    const r = await flotilla(['schema']);
    expect(r.code).toBe(0);
    expect(readFileSync(path.join(root, 'schema/request.schema.json'), 'utf8')).toBe(r.out);
  });

  it('request --json prints the validated request with its defaults; without --json, the same as YAML', async () => {
    const json = await flotilla(['request', example, '--json']);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.out)).toEqual(loadRequestFile(example));
    expect(JSON.parse(json.out).limits.heartbeatTimeoutSeconds).toBe(30);
    const yaml = await flotilla(['request', example]);
    expect(YAML.parse(yaml.out)).toEqual(JSON.parse(json.out));
  });
});
