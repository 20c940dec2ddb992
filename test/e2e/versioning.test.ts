/**
 * Safe deploys: with worker deployment versioning a run stays pinned to the build that started it.
 * Two real versioned workers on the suite's dev server, versions made current with the real
 * `temporal` CLI exactly as the README's rainbow deploy says.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { awaitRun } from '../../src/client/index';
import type { DeploymentVersion } from '../../src/config/settings';
import { createFlotillaWorker, defaultBuildId } from '../../src/worker';
import { leaderWorkflow } from '../../src/workflows/index';
import { approveSignal } from '../../src/contracts/messages';
import type { LeaderRequestInput } from '../../src/contracts/request';
import { workflowBundle } from '../support/bundle';
import { releaseAtEnd } from '../support/cleanup';
import { installQuietRuntime } from '../support/env';
import { CLI, run, startWorkerProcess, temporalCli, waitFor } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { greet, shellRequest, withGates } from '../support/requests';
import { waitForStatus } from '../support/runs';
import { tempDir } from '../support/temp';

const address = () => inject('temporalAddress');
const deploymentName = `flotilla-${randomUUID().slice(0, 8)}`;
const taskQueue = `test-${randomUUID()}`;

let client: Client;
let connection: NativeConnection;
/** The suite's workflow code, whose hash names a build. */
let workflowCode: string;
const dataDir = tempDir('data');

beforeAll(async () => {
  installQuietRuntime();
  connection = await NativeConnection.connect({ address: address() });
  releaseAtEnd(() => connection.close());
  client = new Client({ connection: await Connection.connect({ address: address() }) });
  releaseAtEnd(() => client.connection.close());
  workflowCode = readFileSync(workflowBundle().codePath, 'utf8');
});

/**
 * A worker of `deployment` (none: unversioned), sharing one data directory as a deployment's
 * workers do; it runs until the file ends, as old builds do through a deploy.
 */
async function startWorker(deployment: DeploymentVersion | undefined, queue = taskQueue): Promise<void> {
  const worker = await createFlotillaWorker({
    connection,
    namespace: 'default',
    taskQueue: queue,
    dataDir,
    workflowBundle: workflowBundle(),
    deployment,
  });
  const done = worker.run();
  releaseAtEnd(async () => {
    worker.shutdown();
    await done;
  });
}

/** The README's step: make a version current with the Temporal CLI, once its workers have polled. */
async function setCurrent(buildId: string, name = deploymentName): Promise<void> {
  await waitFor(`version ${buildId} to be set current`, async () => {
    const r = await temporalCli(
      'worker',
      'deployment',
      'set-current-version',
      '--deployment-name',
      name,
      '--build-id',
      buildId,
      '--yes',
    );
    return r.code === 0 ? true : undefined;
  });
}

/** The build IDs that completed any workflow task of this run, its workers' included. */
async function buildsThatRan(handle: WorkflowHandle): Promise<string[]> {
  const ids = new Set<string>();
  const histories = [await handle.fetchHistory()];
  for (const e of histories[0].events ?? []) {
    const child = e.childWorkflowExecutionStartedEventAttributes?.workflowExecution?.workflowId;
    if (child) histories.push(await client.workflow.getHandle(child).fetchHistory());
  }
  for (const h of histories) {
    for (const e of h.events ?? []) {
      const done = e.workflowTaskCompletedEventAttributes;
      if (done)
        ids.add(
          done.deploymentVersion
            ? `${done.deploymentVersion.deploymentName}:${done.deploymentVersion.buildId}`
            : 'unversioned',
        );
    }
  }
  return [...ids].sort();
}

const request = (url: string, id: string, fields: Partial<LeaderRequestInput> = {}) =>
  shellRequest(url, [greet(id)], fields);

describe('worker deployment versioning', () => {
  it('a run waiting at a gate through a deploy finishes on the build that started it; new runs go to the new build', async () => {
    const remote = await makeRemote({ 'README.md': 'hi\n' });
    // The first build as the worker names it by default; its successor by hand (FLOTILLA_BUILD_ID).
    const a = defaultBuildId(workflowCode);
    await startWorker({ deploymentName, buildId: a });
    await setCurrent(a);

    const old = await client.workflow.start(leaderWorkflow, {
      taskQueue,
      workflowId: `run-${randomUUID()}`,
      args: [request(remote.url, 'one', withGates('plan'))],
    });
    await waitForStatus(old, 'the plan gate', (s) => s.phase === 'awaiting-plan-approval');

    // Deploy: build "b" starts polling and becomes current while the old run waits at its gate.
    await startWorker({ deploymentName, buildId: 'b' });
    await setCurrent('b');

    // The operator's view from the README: which runs still hold the old version.
    const pinnedToOld = await temporalCli(
      'workflow',
      'list',
      '--query',
      `TemporalWorkerDeploymentVersion = '${deploymentName}:${a}' AND ExecutionStatus = 'Running'`,
    );
    expect(pinnedToOld.code).toBe(0);
    expect(pinnedToOld.out).toContain(old.workflowId);
    const described = await old.describe();
    expect(described.raw.workflowExecutionInfo?.versioningInfo?.deploymentVersion).toMatchObject({
      deploymentName,
      buildId: a,
    });

    await old.signal(approveSignal, { gate: 'plan', by: 'ana' });
    const oldEnd = await awaitRun(old);
    expect(oldEnd.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'one/greeting.txt')).toBe('hello from one\n');
    expect(await buildsThatRan(old)).toEqual([`${deploymentName}:${a}`]);

    const fresh = await client.workflow.start(leaderWorkflow, {
      taskQueue,
      workflowId: `run-${randomUUID()}`,
      args: [request(remote.url, 'two')],
    });
    const freshEnd = await awaitRun(fresh);
    expect(freshEnd.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'two/greeting.txt')).toBe('hello from two\n');
    expect(await buildsThatRan(fresh)).toEqual([`${deploymentName}:b`]);
  });

  it('adopting versioning: a run an unversioned worker started moves to the first current version and is pinned there', async () => {
    const queue = `adopt-${randomUUID()}`;
    const name = `flotilla-${randomUUID().slice(0, 8)}`;
    const remote = await makeRemote({ 'README.md': 'hi\n' });
    await startWorker(undefined, queue);
    const before = await client.workflow.start(leaderWorkflow, {
      taskQueue: queue,
      workflowId: `run-${randomUUID()}`,
      args: [request(remote.url, 'three', withGates('plan'))],
    });
    await waitForStatus(before, 'the plan gate', (s) => s.phase === 'awaiting-plan-approval');

    // The old, unversioned workers keep polling while the first versioned build takes over.
    await startWorker({ deploymentName: name, buildId: 'first' }, queue);
    await setCurrent('first', name);
    await before.signal(approveSignal, { gate: 'plan', by: 'ana' });
    expect((await awaitRun(before)).result?.outcome).toBe('pushed');
    expect(await buildsThatRan(before)).toEqual([`${name}:first`, 'unversioned']);
    expect((await before.describe()).raw.workflowExecutionInfo?.versioningInfo?.deploymentVersion).toMatchObject({
      deploymentName: name,
      buildId: 'first',
    });
  });
});

describe('the default build ID', () => {
  it('the default build ID is the package version and changes with the workflow code', () => {
    expect(defaultBuildId(workflowCode)).toMatch(/^0\.1\.0-[0-9a-f]{12}$/);
    expect(defaultBuildId(workflowCode)).toBe(defaultBuildId(workflowCode));
    expect(defaultBuildId(`${workflowCode}\n// changed`)).not.toBe(defaultBuildId(workflowCode));
  });
});

describe('flotilla worker with FLOTILLA_DEPLOYMENT', () => {
  it('polls as <deployment>:<package version>-<hash of its workflow code>, the same ID a bundle of the same sources gets', async () => {
    const name = `flotilla-${randomUUID().slice(0, 8)}`;
    const worker = await startWorkerProcess(`cli-${randomUUID()}`, {
      FLOTILLA_HOME: tempDir('cli'),
      FLOTILLA_DEPLOYMENT: name,
      FLOTILLA_BUILD_ID: '',
    });
    const buildId = defaultBuildId(workflowCode);
    expect(await worker.polling()).toContain(` as ${name}:${buildId} (runs pinned)`);
    const version = await waitFor('the version to be registered', async () => {
      const r = await temporalCli(
        'worker',
        'deployment',
        'describe-version',
        '--deployment-name',
        name,
        '--build-id',
        buildId,
      );
      return r.code === 0 ? r.out : undefined;
    });
    expect(version).toContain(buildId);
  });

  it('refuses a bad deployment name before it connects, naming the variable (exit 2)', async () => {
    const r = await run(CLI[0], [...CLI.slice(1), 'worker'], {
      TEMPORAL_ADDRESS: address(),
      FLOTILLA_DEPLOYMENT: 'prod.v2',
    });
    expect(r.code).toBe(2);
    expect(r.err).toContain(
      'FLOTILLA_DEPLOYMENT must be 1-100 letters, digits, "-" or "_" (starting with a letter or digit), not "prod.v2"',
    );
  });
});
