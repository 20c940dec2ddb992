/**
 * Attacks on the local sandbox, each made by a real shell agent in a real run (real bubblewrap,
 * real git, the suite's Temporal dev server): the agent tries to act as root on the host, to run
 * the host out of disk, memory or processes, and a worker without isolation tries to run it at
 * all. Each test asserts that the attack failed and what the run's report says about it.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { formatStatus } from '../../../src/cli/format/status';
import { beforeAll, describe, expect, it } from 'vitest';
import {} from '../../../src/client/index';
import { statusQuery } from '../../../src/contracts/messages';
import { subTaskWorkflowId } from '../../../src/workflows/subtask/subtask';
import { TestEnv } from '../../support/env';
import { makeRemote } from '../../support/remotes';
import { shellRequest, subTask } from '../../support/requests';

const CHECK = '#!/bin/sh\nexit 0\n';

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

type Limits = {
  tmpMiB?: number;
  workspaceMiB?: number;
  workspaceFiles?: number;
  processes?: number;
  memoryMiB?: number;
};

/** One sub-task whose shell agent runs `command` in a fresh repository, with these sandbox limits. */
async function attack(on: TestEnv, command: string, limits?: Limits) {
  const remote = await makeRemote({ 'README.md': '# target\n', 'check.sh': CHECK });
  const base = await remote.head();
  const end = await on.run(
    shellRequest(remote.url, [subTask('attacker', command, { ownedPaths: ['out'] })], {
      testCmd: './check.sh',
      sandbox: { provider: 'local', network: false, ...(limits ? { limits } : {}) },
      limits: { workerTimeoutMinutes: 1 },
    }),
  );
  return { end, remote, base, worker: end.result?.workers.find((w) => w.workerId === 'attacker') };
}

/** The attempt number of every activity a workflow started: 1 each when nothing was retried. */
async function activityAttempts(on: TestEnv, workflowId: string): Promise<number[]> {
  const history = await on.client.workflow.getHandle(workflowId).fetchHistory();
  return (history.events ?? []).flatMap((e) =>
    e.activityTaskStartedEventAttributes ? [e.activityTaskStartedEventAttributes.attempt ?? 0] : [],
  );
}

/** The agent's commands, run and recorded one per line in out/report.txt, which it commits. */
const recording = (probes: Record<string, string>) =>
  [
    'mkdir -p out',
    ...Object.entries(probes).map(
      ([name, cmd]) =>
        `if (${cmd}) >/dev/null 2>&1; then echo "${name}: succeeded"; else echo "${name}: refused"; fi >> out/report.txt`,
    ),
    'id -u > out/uid.txt',
    'git add -A && git commit -qm attack',
  ].join('\n');

describe('attacks on the local sandbox', () => {
  it('cannot write kernel interfaces or gain root through a setuid binary', async () => {
    const corePattern = readFileSync('/proc/sys/kernel/core_pattern', 'utf8');
    // Each write puts back the current value, so a defence that fails changes nothing.
    const { end, remote } = await attack(
      env,
      recording({
        core_pattern: 'v=$(cat /proc/sys/kernel/core_pattern) && printf "%s\\n" "$v" > /proc/sys/kernel/core_pattern',
        sys: 'v=$(cat /sys/kernel/mm/ksm/run) && echo "$v" > /sys/kernel/mm/ksm/run',
        su: 'su root -c "id -u" </dev/null | grep -qx 0',
        mount: 'mkdir -p /scratch/m && mount -t tmpfs none /scratch/m',
      }),
    );
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'out/report.txt')).toBe(
      'core_pattern: refused\nsys: refused\nsu: refused\nmount: refused\n',
    );
    // Not root, and not an id that could be root's: one from the sandbox range.
    expect(Number((await remote.show('main', 'out/uid.txt'))?.trim())).toBeGreaterThanOrEqual(200_000);
    expect(readFileSync('/proc/sys/kernel/core_pattern', 'utf8')).toBe(corePattern);
    expect(end.result?.workers[0].isolation).toBe('bubblewrap');
    expect(end.result?.isolation).toBe('bubblewrap');
  });

  it("cannot reach the worker's spawner, which starts the host's programs as the worker", async () => {
    // This worker runs in this process, so its spawner is this process's child; the agent is told
    // where its socket is. The control shows the probe itself works: a socket of its own, in its /tmp.
    const ps = execFileSync('ps', ['-o', 'args=', '--ppid', String(process.pid)], { encoding: 'utf8' });
    const socket = ps
      .split('\n')
      .find((l) => l.includes('flotilla-spawner-'))!
      .trim()
      .split(/\s+/)
      .pop()!;
    expect(existsSync(socket)).toBe(true);
    const connect = (to: string) =>
      `node -e "require('net').connect(process.argv[1]).on('connect', () => process.exit(0)).on('error', () => process.exit(1))" ${to}`;
    const { end, remote } = await attack(
      env,
      recording({
        control: `node -e "const net = require('net'); net.createServer().listen('/tmp/own', () => net.connect('/tmp/own').on('connect', () => process.exit(0)).on('error', () => process.exit(1)))"`,
        spawner: connect(socket),
        listing: `ls ${path.dirname(socket)}`,
      }),
    );
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'out/report.txt')).toBe(
      'control: succeeded\nspawner: refused\nlisting: refused\n',
    );
  });

  it.each([
    {
      what: 'more files than the limit',
      command: 'mkdir -p out && cd out && seq 1 700 | xargs touch && git add -A && git commit -qm many',
      limits: { workspaceFiles: 500 },
      reason: /^workspace holds \d{3},?\d* files; the limit is 500$/,
    },
    {
      what: 'more bytes than the limit',
      command: 'mkdir -p out && head -c 40M /dev/zero > out/blob; echo wrote',
      limits: { workspaceMiB: 8 },
      reason: /^workspace holds \d+ MiB; the limit is 8 MiB$/,
    },
    {
      what: 'a file larger than the limit, at once',
      command: 'mkdir -p out && exec head -c 40M /dev/zero > out/blob',
      limits: { workspaceMiB: 8 },
      reason: /^a command in the sandbox wrote a file past the size limit \(8 MiB\)$/,
    },
    {
      what: 'a full /tmp',
      command: 'head -c 100M /dev/zero > /tmp/fill; echo filled',
      limits: { tmpMiB: 16 },
      reason: /^the sandbox's \/tmp is full \(limit 16 MiB\)$/,
    },
    {
      what: 'a fork bomb',
      command: `sh -c 'bomb() { bomb | bomb & }; bomb; sleep 2'`,
      limits: { processes: 32 },
      reason: /^the sandbox reached its process limit \(32 processes at once\)$/,
    },
    {
      what: 'a memory hog',
      command: 'head -c 400M /dev/zero | tail > /dev/null',
      limits: { memoryMiB: 64 },
      reason: /^the sandbox ran out of memory \(limit 64 MiB\) and the kernel killed its process$/,
    },
  ])(
    '$what: the worker fails at once, saying which limit, and nothing is pushed',
    async ({ command, limits, reason }) => {
      const { end, remote, base, worker } = await attack(env, command, limits);
      expect(worker?.status).toBe('failed');
      expect(worker?.reason).toMatch(reason);
      expect(end.failureMessage).toContain(worker!.reason!);
      expect(await remote.head()).toBe(base);
      // Deterministic, so not retried: every activity ran once.
      const attempts = await activityAttempts(env, subTaskWorkflowId(end.workflowId, 'attacker'));
      expect(attempts.length).toBeGreaterThan(0);
      expect(
        attempts.every((n) => n === 1),
        `attempts ${attempts}`,
      ).toBe(true);
      expect(env.sandboxesLeft()).toEqual([]);
    },
  );
});

describe('a worker without working isolation', () => {
  it('refuses to start the run, saying why', async () => {
    const broken = await TestEnv.start({ local: { bwrap: '/bin/false' } });
    const { end, remote, base } = await attack(broken, recording({}));
    expect(end.failureType).toBe('failed');
    expect(end.failureMessage).toMatch(
      /^refusing to run agents without isolation: bubblewrap \(\/bin\/false\) failed to start a sandbox: exit 1\. .*FLOTILLA_ISOLATION=none to run them unisolated$/,
    );
    // Refused before anything started: no worker, no sandbox; the request's parse and the check, once each.
    expect(end.result?.workers).toEqual([]);
    expect(broken.sandboxesLeft()).toEqual([]);
    expect(await activityAttempts(broken, end.workflowId)).toEqual([1, 1]);
    expect(await remote.head()).toBe(base);
  });

  it('runs them with the explicit opt-out, and the result says isolation none', async () => {
    const optedOut = await TestEnv.start({ local: { bwrap: '/bin/false', noIsolation: true } });
    const { end } = await attack(optedOut, recording({}));
    expect(end.result?.outcome).toBe('pushed');
    expect(end.result?.workers[0].isolation).toBe('none');
    expect(end.result?.isolation).toBe('none');
    expect(end.result?.message).toMatch(/\(WARNING: the sandboxes were not isolated: isolation none\)$/);
    const status = await optedOut.client.workflow.getHandle(end.workflowId).query(statusQuery);
    expect(status.isolation).toBe('none');
    expect(formatStatus(status, end.workflowId)).toContain('isolation: NONE: agents run unisolated on the worker');
  });
});
