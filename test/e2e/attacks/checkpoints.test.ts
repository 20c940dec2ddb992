/**
 * A forged checkpoint, for real: two `flotilla worker` processes (host-a, host-b) with their own
 * data directories share a store. A first run with hidden tests runs on host-a, so its staging
 * repository holds their commit. A second run's agent, on host-a too, then replaces the
 * checkpoint bundle it leaves for the host, again and again, with one whose header names that
 * commit over an empty pack. The host refuses it, saying so for the checkpoint and never showing
 * the hidden tests. Host-a is then killed with its disk: the sandbox moves to host-b from its last
 * good checkpoint, and nothing of the first run reaches the push.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { awaitRun } from '../../../src/client/index';
import { statusQuery } from '../../../src/contracts/messages';
import { runKeyOf } from '../../../src/contracts/names';
import type { LeaderRequestInput } from '../../../src/contracts/request';
import { leaderWorkflow } from '../../../src/workflows/index';
import { releaseAtEnd } from '../../support/cleanup';
import { type ServedStore, fileStore } from '../../support/git-daemon';
import { type WorkerProcess, processesMatching, startWorkerProcess, waitFor } from '../../support/processes';
import { makeRemote } from '../../support/remotes';
import { shellRequest, subTask } from '../../support/requests';
import { tempDir } from '../../support/temp';

const HIDDEN = 'THE-HIDDEN-ANSWER-4711';
const taskQueue = `forged-${process.pid}`;
const marker = `forger-${process.pid}`;
const LIMITS = { heartbeatTimeoutSeconds: 3, hostTimeoutSeconds: 5, checkpointIntervalSeconds: 1 };

let client: Client;
let store: ServedStore;
let root: string;

beforeAll(async () => {
  client = new Client({ connection: await Connection.connect({ address: inject('temporalAddress') }) });
  releaseAtEnd(() => client.connection.close());
  store = await fileStore();
  root = tempDir('forged');
});

function worker(host: string): Promise<WorkerProcess> {
  return startWorkerProcess(taskQueue, {
    FLOTILLA_HOME: path.join(root, host),
    FLOTILLA_HOST_ID: host,
    FLOTILLA_STAGING_URL: store.url,
  });
}

const start = (id: string, req: LeaderRequestInput) =>
  client.workflow.start(leaderWorkflow, { taskQueue, workflowId: `${id}-${process.pid}`, args: [req] });

/** Why Temporal recorded each failed checkpointWork of the sub-task workflow `workflowId`. */
async function checkpointFailures(workflowId: string): Promise<string[]> {
  const history = await client.workflow.getHandle(workflowId).fetchHistory();
  const checkpoints = new Set<string>();
  const failures: string[] = [];
  for (const e of history.events ?? []) {
    if (e.activityTaskScheduledEventAttributes?.activityType?.name === 'checkpointWork')
      checkpoints.add(String(e.eventId));
    const failed = e.activityTaskFailedEventAttributes;
    if (failed && checkpoints.has(String(failed.scheduledEventId))) failures.push(failed.failure?.message ?? '');
  }
  return failures;
}

/** Kills the attacker's processes (a host that dies takes them with it). */
async function killForger(): Promise<void> {
  for (const pid of await processesMatching(marker)) {
    try {
      process.kill(Number(pid), 'SIGKILL');
    } catch {
      // Gone already.
    }
  }
}

/**
 * The attacker: writes its partial work, waits for the test's go, then replaces the checkpoint
 * bundle in its scratch directory ($HOME) with the forged one as fast as it can, touching a file
 * now and then so that every checkpoint has something new to bundle. Moved after its host was
 * lost, it looks for the hidden tests' commit in the repository it was given.
 */
function forger(hidden: string): string {
  return `mkdir -p a
if [ -n "\${FLOTILLA_INTERRUPTED:-}" ]; then
  test -f a/partial.txt && echo "picked up after the host was lost" > a/resumed.txt
  if git cat-file -e ${hidden} 2>/dev/null; then git show ${hidden}:hidden/answer.test.sh > a/stolen.txt; else echo "not here" > a/stolen.txt; fi
  exit 0
fi
echo "before the forgery" > a/partial.txt
while [ ! -f "$HOME/go" ]; do sleep 0.2; done
{ printf '# v2 git bundle\\n%s refs/flotilla/export\\n\\n' ${hidden}; git pack-objects --stdout -q < /dev/null; } > "$HOME/forged.bundle"
exec -a ${marker} bash -c 'i=0; while :; do cp "$HOME/forged.bundle" "$HOME/forged.tmp"; mv -f "$HOME/forged.tmp" "$HOME/checkpoint.bundle"; i=$((i+1)); if [ $((i % 200)) = 0 ]; then date +%s%N >> a/noise.txt; fi; done'`;
}

describe('a forged checkpoint', () => {
  it("naming another run's hidden tests over an empty pack is refused; after its host is lost the sub-task restores from its last good checkpoint, and nothing of the other run is pushed", async () => {
    const hostA = await worker('host-a');
    releaseAtEnd(killForger);

    // The victim: a run with hidden tests, on host-a (the only host so far).
    const oracle = await makeRemote({ 'hidden/answer.test.sh': `#!/bin/bash\n# ${HIDDEN}\ntrue\n` });
    const victimRepo = await makeRemote({ 'README.md': 'victim\n' });
    const victim = await awaitRun(
      await start('victim', {
        ...shellRequest(victimRepo.url, [subTask('v', 'mkdir -p v && echo v > v/v.txt')]),
        oracle: { repo: oracle.url, ref: 'main' },
        testCmd: 'bash hidden/answer.test.sh',
      }),
    );
    expect(victim.result?.outcome, victim.failureMessage).toBe('pushed');
    const hidden = (await oracle.head())!;

    // The attacker, placed on host-a as well.
    const remote = await makeRemote({ 'README.md': 'attacker\n' });
    const run = await start('attacker', shellRequest(remote.url, [subTask('a', forger(hidden))], { limits: LIMITS }));
    const subTaskId = `${run.workflowId}/a`;
    const good = await waitFor(
      'a good checkpoint holding the partial work',
      async () => {
        const w = (await run.query(statusQuery)).workers.find((x) => x.id === 'a');
        if (w?.host !== 'host-a' || !w.checkpoint) return undefined;
        return w.checkpoint.sha;
      },
      90_000,
    );
    const sandboxes = path.join(root, 'host-a', 'sandboxes');
    const sandbox = readdirSync(sandboxes).find((d) => d.includes('_worker_a-'))!;
    writeFileSync(path.join(sandboxes, sandbox, 'scratch', 'go'), '');

    const refusal = await waitFor(
      'a forged checkpoint refused',
      async () => (await checkpointFailures(subTaskId)).find((m) => m.includes('does not carry')),
      90_000,
    );
    expect(refusal).toMatch(
      /^the checkpoint of a: the bundle does not carry object [0-9a-f]{12}, which its commits need/,
    );
    for (const message of await checkpointFailures(subTaskId)) expect(message).not.toContain(HIDDEN);
    const held = (await run.query(statusQuery)).workers.find((x) => x.id === 'a')!.checkpoint!.sha;
    expect(held).not.toBe(hidden);

    // Host-a dies, with its agent and its disk; host-b takes over.
    await worker('host-b');
    await hostA.stop('SIGKILL');
    await killForger();
    // Its sandboxes die with its spawner, which goes a few milliseconds after the worker: a copy
    // of the forger's in flight may still land in a directory being removed.
    rmSync(path.join(root, 'host-a'), { recursive: true, force: true, maxRetries: 10, retryDelay: 50 });

    const end = await awaitRun(run);
    expect(end.result?.outcome, `${end.failureType}: ${end.failureMessage}`).toBe('pushed');
    const w = end.result!.workers[0];
    expect(w.host).toBe('host-b');
    expect(w.reprovisions?.[0]?.fromCheckpoint).toBeDefined();
    expect(w.reprovisions![0].fromCheckpoint).not.toBe(hidden);
    expect(good).not.toBe(hidden);
    expect(await remote.show('main', 'a/partial.txt')).toBe('before the forgery\n');
    expect(await remote.show('main', 'a/resumed.txt')).toBe('picked up after the host was lost\n');
    expect(await remote.show('main', 'a/stolen.txt')).toBe('not here\n');
    for (const file of await remote.files()) expect(await remote.show('main', file)).not.toContain(HIDDEN);
    const attackerRefs = await store.refs(`refs/flotilla/${runKeyOf(run.workflowId, run.firstExecutionRunId)}/`);
    expect(attackerRefs.length).toBeGreaterThan(0);
    const pointing = execFileSync('git', ['for-each-ref', '--points-at', hidden, '--format=%(refname)'], {
      cwd: store.dir,
      encoding: 'utf8',
    });
    expect(pointing.split('\n').filter((r) => r.includes(runKeyOf(run.workflowId, run.firstExecutionRunId)))).toEqual(
      [],
    );
  }, 300_000);
});
