/**
 * A full FLOTILLA_HOME: the data directory on a small tmpfs of its own, filled to the last page
 * while an agent runs. The worker process stays up, the agent's activity fails saying that
 * FLOTILLA_HOME is full and is retried, and once space is freed the run goes on and pushes, and
 * so does the next. The git setup before every in-sandbox script survives the full disk too: the
 * commit identity is still there afterwards.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { Client, Connection } from '@temporalio/client';
import { describe, expect, inject, it } from 'vitest';
import { createActivities } from '../../src/activities/index';
import { defaultDeps, openSandbox } from '../../src/activities/deps';
import { awaitRun } from '../../src/client/index';
import { runRef } from '../../src/git/staging';
import { Workspace } from '../../src/git/workspace';
import { leaderWorkflow } from '../../src/workflows/index';
import { releaseAtEnd } from '../support/cleanup';
import { startWorkerProcess, waitFor } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { shellRequest, subTask, writeAgent } from '../support/requests';
import { tempDir } from '../support/temp';

/** A tmpfs of `mib` MiB of its own, unmounted when the test ends. */
function smallDisk(mib: number): string {
  const dir = tempDir('small-disk');
  execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${mib}m,mode=0700`, 'tmpfs', dir]);
  releaseAtEnd(() => execFileSync('umount', ['-l', dir]));
  return dir;
}

/** Fills the file system of `dir` to its last page; returns the file that holds the space. */
function fill(dir: string): string {
  const file = path.join(dir, 'filler');
  try {
    execFileSync('dd', ['if=/dev/zero', `of=${file}`, 'bs=4k'], { stdio: 'ignore' });
  } catch {
    // dd stops at ENOSPC: the disk is full.
  }
  return file;
}

describe('a full FLOTILLA_HOME', () => {
  it('a rewrite of the workspace git config that fails leaves the old one, and the commit identity, in place', async () => {
    const home = smallDisk(32);
    const dataDir = path.join(home, 'data');
    mkdirSync(dataDir, { mode: 0o700 });
    const deps = defaultDeps(dataDir);
    const acts = createActivities(deps);
    const env = new MockActivityEnvironment();
    const remote = await makeRemote({ 'README.md': 'full\n' });
    const baseSha = (await remote.head())!;
    const runKey = `full-${process.pid}`;
    const staging = await deps.staging(runKey);
    await staging.raw(['fetch', '-q', remote.url, `+refs/heads/main:${runRef(runKey, 'base')}`]);
    const ref = { key: `${runKey}/worker/w`, provider: 'local' as const, network: false };
    releaseAtEnd(() => deps.provider(ref).destroy(ref.key));
    await env.run(acts.provisionSandbox, ref);
    await env.run(acts.seedWorkspace, { sandbox: ref, runKey, baseSha, branch: 'b', author: 'Flotilla worker w' });
    const ws = new Workspace(await openSandbox(deps, ref));
    const identity = () => ws.run('git var GIT_AUTHOR_IDENT | cut -d" " -f1-4');
    // The agent changed the config, so the next script rewrites it (one left as Flotilla wrote it is kept as it is).
    const agentConfig = await ws.run('git config --file .git/config core.editor vi', { beside: true });
    expect(agentConfig.exitCode).toBe(0);

    const filler = fill(home);
    const full = await identity();
    expect(full.exitCode, 'nothing can be written').not.toBe(0);
    rmSync(filler);
    const after = await identity();
    expect(after.output.trim()).toBe('Flotilla worker w <flotilla@localhost>');
  });

  it('mid-agent: the worker stays up, the agent fails saying FLOTILLA_HOME is full and is retried; once space is freed the run pushes, and so does the next', async () => {
    const home = smallDisk(96);
    const dataDir = path.join(home, 'data');
    const taskQueue = `full-disk-${process.pid}`;
    const worker = await startWorkerProcess(taskQueue, { FLOTILLA_HOME: dataDir });
    const client = new Client({ connection: await Connection.connect({ address: inject('temporalAddress') }) });
    releaseAtEnd(() => client.connection.close());
    const remote = await makeRemote({ 'README.md': 'full\n' });
    // The agent waits for the test, then prints one line into its log, which no longer fits,
    // and prints nothing more: only the failed write can stop it (not its next output). Retried,
    // it waits until the test has freed the space, and finishes.
    const agent = [
      'mkdir -p a',
      `if [ -z "\${FLOTILLA_INTERRUPTED:-}" ]; then touch "$HOME/waiting"; while [ -f "$HOME/waiting" ]; do sleep 0.2; done; echo "one line that no longer fits"; sleep 120; fi`,
      'while [ ! -f "$HOME/freed" ]; do sleep 0.2; done',
      writeAgent('a/done.txt', 'done'),
    ].join('\n');
    const start = (id: string, command: string) =>
      client.workflow.start(leaderWorkflow, {
        taskQueue,
        workflowId: `${id}-${process.pid}`,
        args: [
          shellRequest(remote.url, [subTask('a', command)], {
            repo: { url: remote.url, baseRef: 'main', targetRef: id },
          }),
        ],
      });
    const run = await start('full', agent);
    const sandboxes = path.join(dataDir, 'sandboxes');
    const waiting = await waitFor(
      'the agent to wait',
      async () => {
        const dir = readdirSync(sandboxes).find((d) => d.includes('_worker_a-'));
        const marker = dir && path.join(sandboxes, dir, 'scratch', 'waiting');
        return marker && readdirSync(path.dirname(marker)).includes('waiting') ? marker : undefined;
      },
      60_000,
    );
    const filler = fill(home);
    rmSync(waiting);

    const subTaskRun = client.workflow.getHandle(`${run.workflowId}/a`);
    const failure = await waitFor(
      'the agent activity to fail for the full disk',
      async () =>
        (await subTaskRun.describe()).raw.pendingActivities?.find((a) =>
          a.lastFailure?.message?.includes('FLOTILLA_HOME is full'),
        )?.lastFailure?.message ?? undefined,
      60_000,
    );
    expect(failure).toMatch(/^FLOTILLA_HOME is full \(ENOSPC: no space left in .+\) while writing a log/);
    expect(worker.child.exitCode, worker.output()).toBeNull();

    rmSync(filler);
    writeFileSync(path.join(path.dirname(waiting), 'freed'), '');
    const end = await awaitRun(run);
    expect(end.result?.outcome, end.failureMessage).toBe('pushed');
    expect(await remote.show('full', 'a/done.txt')).toBe('done\n');
    expect(readdirSync(path.join(dataDir, 'artifacts')).filter((f) => f.endsWith('.tmp'))).toEqual([]);

    const next = await awaitRun(await start('after', writeAgent('a/done.txt', 'after')));
    expect(next.result?.outcome, next.failureMessage).toBe('pushed');
    expect(await remote.show('after', 'a/done.txt')).toBe('after\n');
    expect(worker.child.exitCode).toBeNull();
  }, 240_000);
});
