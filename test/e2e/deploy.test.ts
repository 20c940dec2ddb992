/**
 * The deployment files, checked with the tools that read them (Debian's docker-compose, hadolint)
 * where they are installed; there is no Docker engine here (test/e2e/image.test.ts assembles the
 * image without one). And the worker's refusal to run agents bare where the image asks for
 * isolation.
 */
import { randomUUID } from 'node:crypto';
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { describe, expect, inject, it } from 'vitest';
import YAML from 'yaml';
import { VARIABLES } from '../../src/config/variables';
import { leaderWorkflow } from '../../src/workflows/index';
import { releaseAtEnd } from '../support/cleanup';
import { dockerIgnored, parseCopy, parseDockerfile, readDockerignore } from '../support/dockerfile';
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
      // Local sandboxes need root (a uid per sandbox: the image's user), mounts and an unmasked
      // /proc (test/e2e/image.test.ts runs the image's worker with exactly these).
      expect(worker.user).toBeUndefined();
      expect(worker.privileged).toBeUndefined();
      expect(worker.cap_add).toEqual(['SYS_ADMIN']);
      expect(worker.security_opt).toEqual(['seccomp=unconfined', 'apparmor=unconfined', 'systempaths=unconfined']);
      expect(services['temporal-ui'].image).toBe('temporalio/ui:2.34.0');
      expect(services.temporal.image).toBe('temporalio/auto-setup:1.27.2');
    },
  );

  it.runIf(machineHas('docker-compose'))(
    "passes the git token and every agent's key and model endpoint through from the shell, to the worker only",
    async () => {
      const agents = Object.entries(VARIABLES)
        .filter(([, v]) => v.group === 'agents')
        .map(([name]) => name);
      expect(agents).toEqual(expect.arrayContaining(['ANTHROPIC_BASE_URL', 'OPENAI_BASE_URL', 'ANTHROPIC_API_KEY']));
      const passed = [...agents, 'FLOTILLA_GIT_TOKEN', 'FLOTILLA_GIT_TOKEN_HOSTS', 'FLOTILLA_EGRESS_ALLOW'];
      const shell = Object.fromEntries(passed.map((name) => [name, `value-of-${name}`]));
      const resolved = await run('docker-compose', ['-f', path.join(ROOT, 'docker-compose.yml'), 'config'], shell);
      const services = YAML.parse(resolved.out).services;
      expect(services.worker.environment).toMatchObject(shell);
      for (const other of ['postgresql', 'temporal', 'temporal-ui']) {
        const values = Object.values(services[other].environment ?? {}).map(String);
        expect(
          values.filter((v) => v.startsWith('value-of-')),
          other,
        ).toEqual([]);
      }
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

  it('builds in stages from files the context holds, and runs the worker as root with isolation required', () => {
    const stages = parseDockerfile(dockerfile);
    const ignored = readDockerignore(path.join(ROOT, '.dockerignore'));
    const fromContext = stages
      .flatMap((stage) => stage.instructions.filter((i) => i.keyword === 'COPY').map((i) => parseCopy(i.args)))
      .filter((c) => c.from === undefined)
      .flatMap((c) => c.sources);
    expect(fromContext.filter((p) => !existsSync(path.join(ROOT, p)) || dockerIgnored(ignored, p))).toEqual([]);
    const image = stages.at(-1)!.instructions;
    const copied = image.filter((i) => i.keyword === 'COPY').map((i) => parseCopy(i.args));
    expect(copied.map((c) => c.from ?? 'context')).toEqual(['context', 'deps', 'build', 'context']);
    expect(copied.flatMap((c) => c.sources)).not.toContain('src');
    expect(image.filter((i) => i.keyword === 'USER')).toEqual([]);
    expect(image.at(-1)).toEqual({
      keyword: 'ENTRYPOINT',
      args: '["/usr/bin/tini", "--", "node", "/app/bin/flotilla", "worker"]',
    });
    expect(image.find((i) => i.keyword === 'ENV')?.args).toContain('FLOTILLA_REQUIRE_ISOLATION=1');
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
