/**
 * A worker installed under a private directory, as /root (0700) makes every checkout in it, Node
 * from nvm under /root/.nvm, or a clone under `mktemp -d`: its sandboxes, which run as uids of
 * their own, still reach Node and the agent CLIs, and a run pushes; an install they could not
 * read stops the worker at start, naming the path and the fix.
 */
import { randomUUID } from 'node:crypto';
import { chmodSync, statSync } from 'node:fs';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { describe, expect, inject, it } from 'vitest';
import { awaitRun } from '../../src/client/index';
import { leaderWorkflow } from '../../src/workflows/index';
import { checkoutCli, copyCheckout, copyNode } from '../support/checkout';
import { releaseAtEnd } from '../support/cleanup';
import { run, spawnWorker } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { shellRequest, subTask } from '../support/requests';
import { machineHas } from '../support/requirements';
import { tempDir } from '../support/temp';

/**
 * A checkout of this tree and a Node installation (`node/bin/node`) in `dir`, a directory only
 * root may enter: what a worker started from /root/flotilla with Node from nvm runs.
 */
function privateInstall(dir: string): { checkout: string; node: string } {
  expect(statSync(dir).mode & 0o777).toBe(0o700);
  return { checkout: copyCheckout(dir), node: copyNode(dir) };
}

/** `flotilla worker` of that checkout, run by that Node, found first on the PATH its sandboxes get too. */
function startPrivateWorker(install: { checkout: string; node: string }, taskQueue: string) {
  return spawnWorker(
    {
      ...process.env,
      PATH: `${path.dirname(install.node)}:${process.env.PATH}`,
      TEMPORAL_ADDRESS: inject('temporalAddress'),
      FLOTILLA_TASK_QUEUE: taskQueue,
      FLOTILLA_HOME: tempDir('private-install-data'),
    },
    [],
    [],
    checkoutCli(install.checkout, install.node),
  );
}

describe.runIf(machineHas('root') && machineHas('bwrap'))('a worker installed under a 0700 directory', () => {
  it('runs sandboxes, as uids of their own, on its Node and its agent CLIs, and the run pushes', async () => {
    const install = privateInstall(tempDir('private-install'));
    const taskQueue = `private-install-${randomUUID()}`;
    const worker = startPrivateWorker(install, taskQueue);
    await worker.polling();

    const remote = await makeRemote({ 'README.md': 'x\n' });
    const codex = path.join(install.checkout, 'node_modules/@openai/codex/package.json');
    const agent = [
      'mkdir -p one',
      'command -v node > one/node.txt',
      'node --version >> one/node.txt',
      `node -p 'require(process.argv[1]).name' ${codex} > one/cli.txt`,
      'id -u > one/uid.txt',
      "git add -A && git commit -qm 'what the sandbox reached'",
    ].join(' && ');
    const connection = await Connection.connect({ address: inject('temporalAddress') });
    releaseAtEnd(() => connection.close());
    const handle = await new Client({ connection }).workflow.start(leaderWorkflow, {
      taskQueue,
      workflowId: `private-install-${randomUUID()}`,
      args: [shellRequest(remote.url, [subTask('one', agent)])],
    });
    releaseAtEnd(() => handle.terminate('test over').catch(() => undefined));
    // A sandbox that cannot reach them fails every seed and is retried for many minutes.
    const end = await Promise.race([
      awaitRun(handle),
      new Promise<never>((_, fail) =>
        setTimeout(() => fail(new Error(`no end in 3 minutes:\n${worker.output()}`)), 180_000),
      ),
    ]);
    expect(end.result).toMatchObject({ outcome: 'pushed', pushedSha: await remote.head() });
    expect(await remote.show('main', 'one/node.txt')).toBe(`${install.node}\n${process.version}\n`);
    expect(await remote.show('main', 'one/cli.txt')).toBe('@openai/codex\n');
    expect(Number(await remote.show('main', 'one/uid.txt'))).toBeGreaterThanOrEqual(200_000);
  }, 300_000);

  it('refuses to start when the sandboxes could not read its agent CLIs, naming the path and the fix', async () => {
    const install = privateInstall(tempDir('private-install'));
    // The directory only, a copy of its own: its files are hard links shared with this checkout.
    const modules = path.join(install.checkout, 'node_modules');
    chmodSync(modules, 0o700);
    const worker = startPrivateWorker(install, `private-install-${randomUUID()}`);
    expect(await worker.exited).not.toBe(0);
    expect(worker.stderr()).toContain(
      `refusing to start: sandboxes run as uids of their own (FLOTILLA_SANDBOX_UIDS), which cannot read ${modules} (mode 0700); they need it for the agent CLIs (${modules}). Make it readable by all (chmod -R o+rX ${modules})`,
    );
    expect(worker.output()).not.toContain('polling task queue');
    // The fix it names is enough.
    const fixed = await run('chmod', ['-R', 'o+rX', modules]);
    expect(fixed.code).toBe(0);
    await startPrivateWorker(install, `private-install-${randomUUID()}`).polling();
  }, 300_000);
});
