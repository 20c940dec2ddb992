/**
 * The deployment files, checked with the tools that read them (Debian's docker-compose, hadolint)
 * where they are installed; there is no Docker engine here, so no image is built or run. And the
 * worker's refusal to run agents bare where the image asks for isolation.
 */
import { randomUUID } from 'node:crypto';
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { describe, expect, inject, it } from 'vitest';
import YAML from 'yaml';
import { leaderWorkflow } from '../../src/workflows/index';
import { releaseAtEnd } from '../support/cleanup';
import { CLI, processesMatching, run, startWorkerProcess, waitFor } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { shellRequest, subTask } from '../support/requests';
import { machineHas } from '../support/requirements';
import { tempDir } from '../support/temp';

const ROOT = path.join(__dirname, '../..');

describe('docker-compose.yml', () => {
  it.runIf(machineHas('docker-compose'))(
    'validates, publishes only on 127.0.0.1, and runs N workers from the image with no checkout mounted',
    async () => {
      const file = path.join(ROOT, 'docker-compose.yml');
      const quiet = await run('docker-compose', ['-f', file, 'config', '-q']);
      expect(quiet.err).toBe('');
      expect(quiet.code).toBe(0);

      const resolved = await run('docker-compose', ['-f', file, 'config'], { FLOTILLA_WORKERS: '3' });
      const services = YAML.parse(resolved.out).services;
      expect(Object.keys(services).sort()).toEqual(['postgresql', 'temporal', 'temporal-ui', 'worker']);
      const published = Object.values<{ ports?: string[] }>(services).flatMap((s) => s.ports ?? []);
      expect(published).toEqual(['127.0.0.1:7233:7233/tcp', '127.0.0.1:8080:8080/tcp']);
      expect(services.temporal.environment.DB).toBe('postgres12');

      const worker = services.worker;
      expect(worker.deploy.replicas).toBe(3);
      expect(worker.build.context).toBe(ROOT);
      expect(worker.command).toBeUndefined();
      // Only the named data volume: the checkout is not mounted, nothing is installed at start.
      expect(worker.volumes).toEqual(['flotilla-data:/data:rw']);
      expect(worker.environment.TEMPORAL_ADDRESS).toBe('temporal:7233');
    },
  );
});

describe('Dockerfile', () => {
  const dockerfile = readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');

  it.runIf(machineHas('hadolint'))('passes hadolint', async () => {
    const r = await run('hadolint', [path.join(ROOT, 'Dockerfile')]);
    expect(r.out + r.err).toBe('');
    expect(r.code).toBe(0);
  });

  it('copies files that exist, installs dependencies at build time and runs as a non-root user', () => {
    const instructions = dockerfile
      .replace(/\\\n/g, ' ')
      .split('\n')
      .filter((l) => /^[A-Z]+ /.test(l));
    const copied = instructions.filter((l) => l.startsWith('COPY ')).flatMap((l) => l.split(/\s+/).slice(1, -1));
    expect(copied.filter((p) => !existsSync(path.join(ROOT, p)))).toEqual([]);
    expect(instructions.some((l) => l.startsWith('RUN npm ci '))).toBe(true);
    const user = instructions.filter((l) => l.startsWith('USER ')).at(-1);
    expect(user).toMatch(/^USER [1-9]\d*:[1-9]\d*$/);
    expect(instructions.at(-1)).toContain('"/app/bin/flotilla", "worker"');
    expect(dockerfile).toContain('FLOTILLA_REQUIRE_ISOLATION=1');
  });
});

describe('FLOTILLA_REQUIRE_ISOLATION', () => {
  const worker = (env: Record<string, string>) =>
    run(CLI[0], [...CLI.slice(1), 'worker'], {
      TEMPORAL_ADDRESS: '127.0.0.1:1',
      FLOTILLA_HOME: tempDir('isolation'),
      FLOTILLA_REQUIRE_ISOLATION: '1',
      ...env,
    });

  it('a worker whose bubblewrap cannot create namespaces (as in a default container) refuses to start', async () => {
    // What bwrap says under Docker's default seccomp profile.
    const bin = tempDir('fake-bwrap');
    writeFileSync(
      path.join(bin, 'bwrap'),
      '#!/bin/sh\necho "bwrap: No permissions to creating new namespace" >&2\nexit 1\n',
    );
    chmodSync(path.join(bin, 'bwrap'), 0o755);
    // Sandboxes start bwrap as their own uid, which must reach it.
    chmodSync(bin, 0o755);
    const r = await worker({ PATH: `${bin}:${process.env.PATH}` });
    expect(r.code).not.toBe(0);
    expect(r.err).toContain('refusing to start: FLOTILLA_REQUIRE_ISOLATION=1, but sandboxes would not be isolated');
    expect(r.err).toContain('No permissions to creating new namespace');
    expect(r.err).not.toContain('cannot reach Temporal');
  });

  it('with a working bubblewrap the same worker goes on to connect', async () => {
    const r = await worker({});
    expect(r.code).not.toBe(0);
    expect(r.err).not.toContain('refusing to start');
    expect(r.err).toContain('cannot reach Temporal at 127.0.0.1:1');
  });
});

describe('a worker process', () => {
  it('refuses a bad log setting, naming the variable and the values it takes', async () => {
    const r = await run(CLI[0], [...CLI.slice(1), 'worker'], {
      TEMPORAL_ADDRESS: '127.0.0.1:1',
      FLOTILLA_LOG_FORMAT: 'xml',
    });
    expect(r.code).not.toBe(0);
    expect(r.err).toContain('FLOTILLA_LOG_FORMAT: must be one of text, json, not "xml"');
  });

  it('on SIGTERM cancels a running agent within its grace time and exits 0, leaving the run to another worker; FLOTILLA_LOG_FORMAT=json', async () => {
    const taskQueue = `stop-${randomUUID()}`;
    const worker = await startWorkerProcess(taskQueue, {
      FLOTILLA_HOME: tempDir('stop'),
      FLOTILLA_LOG_FORMAT: 'json',
      FLOTILLA_LOG_LEVEL: 'debug',
    });
    const connection = await Connection.connect({ address: inject('temporalAddress') });
    releaseAtEnd(() => connection.close());
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const marker = `agent-${randomUUID()}`;
    const handle = await new Client({ connection }).workflow.start(leaderWorkflow, {
      taskQueue,
      workflowId: `stop-${randomUUID()}`,
      args: [shellRequest(remote.url, [subTask('one', `sleep 600; : ${marker}`)])],
    });
    releaseAtEnd(() => handle.terminate('test over').catch(() => undefined));
    await waitFor(
      'the agent to run',
      async () => ((await processesMatching(marker)).length ? true : undefined),
      60_000,
    );

    const stopping = Date.now();
    expect(await worker.stop('SIGTERM')).toBe(0);
    // The agent gets the 10 s grace time to finish; then it is cancelled and the worker ends.
    const took = Date.now() - stopping;
    expect(took).toBeGreaterThanOrEqual(9_000);
    expect(took).toBeLessThan(25_000);
    expect(await processesMatching(marker)).toEqual([]);
    expect((await handle.describe()).status.name).toBe('RUNNING');
    const lines = worker
      .stderr()
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(lines.map((l) => l.msg)).toEqual(
      expect.arrayContaining([
        expect.stringContaining('polling task queue'),
        'Worker state changed',
        'Flotilla worker stopped',
      ]),
    );
    expect(lines.every((l) => typeof l.level === 'number' && typeof l.time === 'number')).toBe(true);
  });
});
