/**
 * Many hosts: two real `flotilla worker` processes, each in a network namespace of its own (a
 * bridge and veth pairs on a private /24), with separate data directories, host ids and sandbox
 * uid ranges, serve one task queue of a Temporal dev server that listens on the bridge. The
 * staging store is the one thing they share.
 *
 * Runs spread over both hosts and all push. Then the host holding a long agent is killed -9 and
 * its data directory deleted, after the agent's work was checkpointed: the sandbox is
 * re-provisioned on the other host from the checkpoint, the agent is told it was interrupted,
 * and the run pushes once, with the work from before the kill.
 */
import { execFileSync } from 'node:child_process';
import { appendFileSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { beforeAll, describe, expect, it } from 'vitest';
import { awaitRun, startRun } from '../../src/client/index';
import { parseLeaderRequest } from '../../src/contracts/request';
import { type TemporalTarget, ensureTemporal } from '../../src/temporal/server';
import { statusQuery } from '../../src/contracts/messages';
import { releaseAtEnd } from '../support/cleanup';
import { type ServedStore, serveStore } from '../support/git-daemon';
import { freeServerPort } from '../support/ports';
import { CLI, type WorkerProcess, processesMatching, run, spawnWorker, waitFor } from '../support/processes';
import { countingRemote } from '../support/remotes';
import { shellRequest, subTask } from '../support/requests';
import { tempDir } from '../support/temp';

const id = process.pid % 10_000;
const subnet = `10.231.${process.pid % 250}`;
const bridge = `flbr${id}`;
const serverIp = `${subnet}.1`;
const taskQueue = `hosts-${process.pid}`;
const hosts = ['host-a', 'host-b'] as const;
type Host = (typeof hosts)[number];
const netns = (h: Host) => `fl${id}-${h}`;

let root: string;
let store: ServedStore;
let address: string;
let client: Client;
const workers = new Map<Host, WorkerProcess>();
const homes = new Map<Host, string>();

const ip = (...args: string[]) => execFileSync('ip', args, { stdio: 'pipe' });

/** The bridge on the host side and, per worker host, a namespace with one end of a veth pair on it. */
function makeNetwork(): void {
  removeNetwork();
  releaseAtEnd(removeNetwork);
  ip('link', 'add', bridge, 'type', 'bridge');
  ip('addr', 'add', `${serverIp}/24`, 'dev', bridge);
  ip('link', 'set', bridge, 'up');
  hosts.forEach((h, i) => {
    const outside = `flv${id}${i}`;
    const inside = `fli${id}${i}`;
    ip('netns', 'add', netns(h));
    ip('link', 'add', outside, 'type', 'veth', 'peer', 'name', inside);
    ip('link', 'set', outside, 'master', bridge);
    ip('link', 'set', outside, 'up');
    ip('link', 'set', inside, 'netns', netns(h));
    ip('-n', netns(h), 'addr', 'add', `${subnet}.${10 + i}/24`, 'dev', inside);
    ip('-n', netns(h), 'link', 'set', inside, 'up');
    ip('-n', netns(h), 'link', 'set', 'lo', 'up');
  });
}

function removeNetwork(): void {
  for (const h of hosts) {
    try {
      ip('netns', 'del', netns(h)); // takes its veth end, and so the pair, with it
    } catch {
      // Never made.
    }
  }
  try {
    ip('link', 'del', bridge);
  } catch {
    // Never made.
  }
}

/**
 * A Temporal dev server of this test's own, reached on the bridge address. The dev server's
 * services dial each other on loopback whatever `--ip` says, so it listens there and a TCP
 * relay on the bridge address forwards to it.
 */
async function startServer(): Promise<void> {
  const port = await freeServerPort();
  const server: TemporalTarget = await ensureTemporal({ dataDir: path.join(root, 'temporal'), port });
  releaseAtEnd(() => server.stop());
  const relay = net.createServer((inbound) => {
    const outbound = net.connect({ host: '127.0.0.1', port });
    inbound.pipe(outbound).pipe(inbound);
    const close = () => {
      inbound.destroy();
      outbound.destroy();
    };
    inbound.on('error', close);
    outbound.on('error', close);
  });
  await new Promise<void>((resolve) => relay.listen(port, serverIp, resolve));
  releaseAtEnd(() => relay.close());
  address = `${serverIp}:${port}`;
  client = await waitFor(
    'the dev server on the bridge',
    async () => {
      const connection = await Connection.connect({ address, connectTimeout: 1000 });
      await connection.workflowService.getSystemInfo({});
      return new Client({ connection });
    },
    60_000,
  );
  releaseAtEnd(() => client.connection.close());
}

/** A real worker process in `host`'s namespace, with a data directory of its own; the store is shared over the network. */
async function startWorker(h: Host): Promise<void> {
  const home = path.join(root, `home-${h}`);
  mkdirSync(home, { recursive: true });
  homes.set(h, home);
  const uids = h === 'host-a' ? '300000-309999' : '310000-319999';
  // nsenter, not `ip netns exec`: that also remounts /sys for the namespace, which hides the
  // cgroup hierarchy the sandboxes' limits live in.
  const worker = spawnWorker(
    {
      ...process.env,
      TEMPORAL_ADDRESS: address,
      FLOTILLA_HOME: home,
      FLOTILLA_HOST_ID: h,
      FLOTILLA_SANDBOX_UIDS: uids,
      FLOTILLA_TASK_QUEUE: taskQueue,
      FLOTILLA_STAGING_URL: store.url,
    },
    ['nsenter', `--net=/var/run/netns/${netns(h)}`, '--'],
    process.env.HOSTS_VERBOSE ? ['--verbose'] : [],
  );
  workers.set(h, worker);
  // Kept outside the test's directory, for a failure to be read afterwards.
  const log = path.join(os.tmpdir(), `flotilla-hosts-${h}.log`);
  writeFileSync(log, '');
  worker.child.stdout!.on('data', (b: Buffer) => appendFileSync(log, b));
  worker.child.stderr!.on('data', (b: Buffer) => appendFileSync(log, b));
  await worker.polling(90_000);
}

/** Kills the processes a dead host's agents left (a host that dies takes them with it). */
async function killMatching(marker: string): Promise<void> {
  for (const pid of await processesMatching(marker)) {
    try {
      process.kill(Number(pid), 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
}

const LIMITS = { heartbeatTimeoutSeconds: 3, hostTimeoutSeconds: 5, checkpointIntervalSeconds: 1 };

beforeAll(async () => {
  root = tempDir('hosts');
  makeNetwork();
  store = await serveStore(serverIp);
  await startServer();
  releaseAtEnd(() => killMatching(`hosts-${process.pid}-agent`));
  await Promise.all(hosts.map(startWorker));
}, 180_000);

describe('many hosts', () => {
  it('two hosts in their own network namespaces serve one queue: 6 runs of 3 sub-tasks all push, on both hosts', async () => {
    const remotes = await Promise.all(
      Array.from({ length: Number(process.env.HOSTS_RUNS ?? 6) }, () => countingRemote({ 'README.md': 'hosts\n' })),
    );
    const handles = await Promise.all(
      remotes.map((remote, r) =>
        startRun(
          client,
          parseLeaderRequest(
            shellRequest(
              remote.url,
              [0, 1, 2].map((t) =>
                subTask(
                  `t${t}`,
                  `mkdir -p t${t} && echo "run ${r} task ${t}" > t${t}/out.txt && sleep 0.5 && git add -A && git commit -qm t${t}`,
                ),
              ),
              { testCmd: 'test -f t0/out.txt && test -f t1/out.txt && test -f t2/out.txt', limits: LIMITS },
            ),
          ),
          { taskQueue },
        ),
      ),
    );
    const ends = await Promise.all(handles.map((h) => awaitRun(h)));
    for (const [r, end] of ends.entries()) {
      expect(end.result?.outcome, `${end.failureType}: ${end.failureMessage}`).toBe('pushed');
      expect((await remotes[r].files()).sort()).toEqual(['README.md', 't0/out.txt', 't1/out.txt', 't2/out.txt']);
      expect(remotes[r].pushes()).toBe(1);
    }
    const used = new Set(ends.flatMap((e) => e.result!.workers.map((w) => w.host)));
    expect([...used].sort()).toEqual([...hosts]);
  }, 300_000);

  it('kill -9 of the host holding an agent, and its data directory gone: the sandbox moves to the other host from its checkpoint, one push', async () => {
    const remote = await countingRemote({ 'README.md': 'hosts\n' });
    const marker = `sleep 300.${process.pid}`;
    // The agent writes its partial result and works on; told of an interruption, it checks that
    // the partial result is there, finishes, and says so in a file of its own.
    const agent =
      'mkdir -p slow; if [ -n "${FLOTILLA_INTERRUPTED:-}" ]; then test -f slow/partial.txt && echo "picked up after the host was lost" > slow/resumed.txt; ' +
      `else echo "written before the kill" > slow/partial.txt; exec -a hosts-${process.pid}-agent ${marker}; fi`;
    const handle = await startRun(
      client,
      parseLeaderRequest(
        shellRequest(remote.url, [subTask('slow', agent)], {
          testCmd: 'test -f slow/partial.txt && test -f slow/resumed.txt',
          limits: LIMITS,
        }),
      ),
      { taskQueue },
    );

    // Awaited, not slept: a checkpoint in the shared store that holds the partial file.
    const placed = await waitFor(
      'a checkpoint holding the partial file',
      async () => {
        const w = (await handle.query(statusQuery)).workers.find((x) => x.id === 'slow');
        if (!w?.host || !w.checkpoint) return undefined;
        const tree = execFileSync('git', ['ls-tree', '-r', '--name-only', w.checkpoint.sha], {
          cwd: store!.dir,
          encoding: 'utf8',
        });
        return tree.includes('slow/partial.txt') ? { host: w.host as Host, checkpoint: w.checkpoint } : undefined;
      },
      120_000,
    );
    const survivor = hosts.find((h) => h !== placed.host)!;
    const shown = await run(CLI[0], [...CLI.slice(1), 'status', handle.workflowId], {
      TEMPORAL_ADDRESS: address,
      FLOTILLA_TASK_QUEUE: taskQueue,
    });
    expect(shown.out).toContain(`on ${placed.host}, checkpoint `);

    // The host dies: its worker, the agent it ran, and its disk.
    await workers.get(placed.host)!.stop('SIGKILL');
    await killMatching(`hosts-${process.pid}-agent`);
    rmSync(homes.get(placed.host)!, { recursive: true, force: true });

    const end = await awaitRun(handle);
    expect(end.result?.outcome, `${end.failureType}: ${end.failureMessage}`).toBe('pushed');
    expect(await remote.show('main', 'slow/partial.txt')).toBe('written before the kill\n');
    expect(await remote.show('main', 'slow/resumed.txt')).toBe('picked up after the host was lost\n');
    expect(remote.pushes()).toBe(1);
    const w = end.result!.workers[0];
    expect(w.host).toBe(survivor);
    expect(w.reprovisions).toHaveLength(1);
    expect(w.reprovisions![0]).toMatchObject({ from: placed.host, to: survivor });
    expect(w.reprovisions![0].fromCheckpoint).toBeDefined();
    expect(w.reprovisions![0].reason).toMatch(/did not pick up|no longer has the sandbox/);
  }, 300_000);
});
