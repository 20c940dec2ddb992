/**
 * `npm run bench:fleet`: the simulated fleet of issue 19. One run of 1,000 trivial sub-tasks
 * (each writes one file and commits; `true` as the test), 256 at once, over several worker
 * processes on this machine, each a host of its own (its own data directory, host id and sandbox
 * uids, the staging store shared through `git daemon`, as a fleet shares it). It must end pushed,
 * with every sub-task's file in the pushed tree and exactly one push; the script prints the
 * figures issue 19 asks for: wall time and cost per sub-task against a run of 32 on the same
 * fleet, the leader's history (events, bytes) and the largest payload in it, the result's bytes,
 * and each worker's peak memory.
 *
 *   npm run bench:fleet                                  1,000 sub-tasks, 3 workers
 *   npm run bench:fleet -- --sub-tasks 200 --workers 2   smaller
 *   npm run bench:fleet -- --cpu-prof DIR                also each worker's CPU profiles (node --cpu-prof)
 *   npm run bench:fleet -- --history-events 3000         the runs roll over past 3,000 events (limits.historyEvents)
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { temporal as proto } from '@temporalio/proto';
import { awaitRun, newRunId, startRun } from '../src/client/index';
import { parseLeaderRequest } from '../src/contracts/request';
import { ensureTemporal } from '../src/temporal/server';
import { buildUnlessBuilt } from './build';
import { runBench } from './main';
import { type WorkerProcess, cpuOf, startWorkerProcess } from './worker-process';

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const N = arg('--sub-tasks', 1000);
const WORKERS = arg('--workers', 3);
const profDir = process.argv.includes('--cpu-prof')
  ? path.resolve(process.argv[process.argv.indexOf('--cpu-prof') + 1] ?? 'fleet-profiles')
  : undefined;
const SMALL = 32;
/** limits.historyEvents of every run, when given: the 1,000 then rolls over (the default, 20,000, it does not reach). */
const HISTORY_EVENTS = process.argv.includes('--history-events') ? arg('--history-events', 0) : undefined;

const root = mkdtempSync(path.join(os.tmpdir(), 'flotilla-fleet-'));
const git = (cwd: string, ...args: string[]) =>
  execFileSync('git', ['-c', 'user.name=fleet', '-c', 'user.email=fleet@localhost', ...args], {
    cwd,
    encoding: 'utf8',
    maxBuffer: 64 << 20,
  }).trim();

/** A bare remote with a README, whose post-receive hook counts the pushes it accepts. */
function makeRemote(): { url: string; pushes: () => number } {
  const work = path.join(root, 'remote-src');
  mkdirSync(work);
  writeFileSync(path.join(work, 'README.md'), '# fleet\n');
  git(work, 'init', '-q', '-b', 'main');
  git(work, 'add', '-A');
  git(work, 'commit', '-qm', 'initial');
  const url = path.join(root, 'remote.git');
  git(root, 'clone', '-q', '--bare', work, url);
  const counted = path.join(root, 'pushes');
  writeFileSync(path.join(url, 'hooks', 'post-receive'), `#!/bin/sh\necho push >> "${counted}"\n`, { mode: 0o755 });
  const pushes = () => {
    try {
      return readFileSync(counted, 'utf8').split('\n').filter(Boolean).length;
    } catch {
      return 0;
    }
  };
  return { url, pushes };
}

/** The staging store every host shares, served read-write by git daemon on loopback. */
async function serveStore(): Promise<{ url: string; daemon: ChildProcess }> {
  const base = path.join(root, 'store');
  mkdirSync(base);
  git(base, 'init', '-q', '--bare', 'store.git');
  const port = await freePort();
  const daemon = spawn(
    'git',
    [
      'daemon',
      '--reuseaddr',
      '--export-all',
      '--enable=receive-pack',
      `--base-path=${base}`,
      '--listen=127.0.0.1',
      `--port=${port}`,
      base,
    ],
    { stdio: 'ignore' },
  );
  process.once('exit', () => daemon.kill());
  const url = `git://127.0.0.1:${port}/store.git`;
  for (let i = 0; ; i++) {
    try {
      execFileSync('git', ['ls-remote', url], { stdio: 'ignore' });
      return { url, daemon };
    } catch (err) {
      if (i > 100) throw err;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

function request(url: string, n: number) {
  return parseLeaderRequest({
    objective: `fleet of ${n}`,
    repo: { url, baseRef: 'main', targetRef: `fleet-${newRunId()}` },
    testCmd: 'true',
    subTasks: Array.from({ length: n }, (_, i) => ({
      id: `t${i}`,
      prompt: 'write your file',
      ownedPaths: [`t${i}`],
      agent: {
        kind: 'shell',
        command: `mkdir -p t${i} && echo done > t${i}/out.txt && git add -A && git commit -qm t${i}`,
      },
    })),
    limits: { maxParallel: Math.min(n, 256), ...(HISTORY_EVENTS && { historyEvents: HISTORY_EVENTS }) },
  });
}

const HistoryEvent = proto.api.history.v1.HistoryEvent;

/** Every history of a run, first to last: a run that rolled over has one per rollover more. */
async function chainOf(client: Client, workflowId: string) {
  const chain = [];
  for (let runId: string | undefined; ;) {
    const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
    chain.unshift(history);
    runId = history.events?.[0]?.workflowExecutionStartedEventAttributes?.continuedExecutionRunId || undefined;
    if (!runId) return chain;
  }
}

/** The pid of the process whose command line holds every one of `words` (the dev server, under whatever launcher). */
function pidOf(...words: string[]): number | undefined {
  for (const entry of readdirSync('/proc').filter((e) => /^\d+$/.test(e))) {
    const argv = (() => {
      try {
        return readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      } catch {
        return [];
      }
    })();
    if (argv[0] && !argv[0].endsWith('sh') && words.every((w) => argv.includes(w))) return Number(entry);
  }
  return undefined;
}

/**
 * CPU seconds so far of each part of the fleet: the worker processes, what they ran and reaped
 * (git, the sandboxes' set-up chain, the agents), the Temporal server, the git daemon serving the
 * staging store (with its reaped upload/receive-packs), and this process (the client).
 */
function fleetCpu(workers: WorkerProcess[], serverPid: number | undefined, daemonPid: number) {
  const of = (pid: number | undefined) => (pid ? cpuOf(pid) : { self: 0, children: 0 });
  const server = of(serverPid);
  const daemon = of(daemonPid);
  const me = process.cpuUsage();
  return {
    workers: workers.reduce((a, w) => a + w.cpu().self, 0),
    'their children': workers.reduce((a, w) => a + w.cpu().children, 0),
    'Temporal server': server.self + server.children,
    'staging daemon': daemon.self + daemon.children,
    client: (me.user + me.system) / 1e6,
  };
}

function countBy(keys: string[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const k of keys) counts[k] = (counts[k] ?? 0) + 1;
  return counts;
}

const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MB`;
const kib = (bytes: number) => `${(bytes / 1024).toFixed(1)} KiB`;

async function main(): Promise<void> {
  console.log(
    `# Flotilla fleet: ${N} sub-tasks over ${WORKERS} worker processes, ${os.cpus().length} cores, load ${os.loadavg()[0].toFixed(2)}`,
  );
  buildUnlessBuilt();
  const remote = makeRemote();
  const store = await serveStore();
  const temporal = await ensureTemporal({ dataDir: path.join(root, 'temporal'), port: 18233 + (process.pid % 1000) });
  const client = new Client({
    connection: await Connection.connect({ address: temporal.address }),
    namespace: temporal.namespace,
  });
  const taskQueue = `fleet-${process.pid}`;
  const workers: WorkerProcess[] = [];
  for (let i = 0; i < WORKERS; i++)
    workers.push(
      await startWorkerProcess({
        client,
        address: temporal.address,
        namespace: temporal.namespace,
        dataDir: path.join(root, `host-${i}`),
        taskQueue,
        logFile: path.join(root, `host-${i}.log`),
        ...(profDir && { nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${path.join(profDir, `host-${i}`)}`] }),
        env: {
          FLOTILLA_HOST_ID: `fleet-host-${i}`,
          FLOTILLA_SANDBOX_UIDS: `${400_000 + i * 10_000}-${400_000 + i * 10_000 + 9_999}`,
          FLOTILLA_STAGING_URL: store.url,
        },
      }),
    );
  console.log(`${WORKERS} workers polling ${taskQueue}`);

  const serverPid = pidOf('start-dev', String(temporal.address.split(':').pop()));
  const fleetRun = async (n: number) => {
    const pushesBefore = remote.pushes();
    const cpuBefore = fleetCpu(workers, serverPid, store.daemon.pid!);
    const started = performance.now();
    const req = request(remote.url, n);
    const handle = await startRun(client, req, { taskQueue });
    const end = await awaitRun(handle);
    const seconds = (performance.now() - started) / 1000;
    const cpuAfter = fleetCpu(workers, serverPid, store.daemon.pid!);
    const cpu = Object.fromEntries(
      Object.entries(cpuAfter).map(([part, s]) => [part, s - cpuBefore[part as keyof typeof cpuBefore]]),
    );
    if (end.result?.outcome !== 'pushed')
      throw new Error(`run ${handle.workflowId} did not push: ${end.failureMessage}`);
    const files = git(remote.url, 'ls-tree', '-r', '--name-only', req.repo.targetRef!).split('\n');
    const missing = Array.from({ length: n }, (_, i) => `t${i}/out.txt`).filter((f) => !files.includes(f));
    if (missing.length)
      throw new Error(`the pushed tree lacks ${missing.length} sub-tasks' files: ${missing.slice(0, 5).join(', ')}`);
    const pushes = remote.pushes() - pushesBefore;
    if (pushes !== 1) throw new Error(`run ${handle.workflowId} pushed ${pushes} times, not once`);
    if (end.result.workers.length !== n)
      throw new Error(`the result has ${end.result.workers.length} reports, not ${n}`);
    const histories = await chainOf(client, handle.workflowId);
    // An event's size bounds its payloads' from above: the largest event is the figure to keep under 64 KiB.
    const sizes = histories.map((h) => (h.events ?? []).map((e) => HistoryEvent.encode(e).finish().length));
    const bytes = histories.map((h) => proto.api.history.v1.History.encode(h).finish().length);
    return {
      seconds,
      cpu,
      histories: histories.length,
      events: Math.max(...sizes.map((s) => s.length)),
      historyBytes: Math.max(...bytes),
      largestEvent: Math.max(...sizes.flatMap((s) => s.slice(1))),
      inputBytes: Math.max(...sizes.map((s) => s[0])),
      omitted: (await handle.result().catch(() => undefined))?.workersOmitted?.count ?? 0,
      byHost: countBy(end.result.workers.map((w) => w.host ?? '?')),
    };
  };

  await fleetRun(2); // caches and connections warm
  const small = await fleetRun(SMALL);
  console.log(`${SMALL} sub-tasks: ${small.seconds.toFixed(1)} s, ${small.events} history events`);
  const big = await fleetRun(N);
  console.log(`${N} sub-tasks: ${big.seconds.toFixed(1)} s, pushed once, every sub-task's file in the pushed tree`);

  const perSubTask = (r: typeof small, n: number) => r.seconds / n;
  const rows: [string, string][] = [
    [`wall time, ${SMALL} / ${N} sub-tasks`, `${small.seconds.toFixed(1)} s / ${big.seconds.toFixed(1)} s`],
    [
      'per sub-task',
      `${(perSubTask(small, SMALL) * 1000).toFixed(0)} ms at ${SMALL}, ${(perSubTask(big, N) * 1000).toFixed(0)} ms at ${N} (${(perSubTask(big, N) / perSubTask(small, SMALL)).toFixed(2)}x)`,
    ],
    [
      "leader's history (the largest, when it rolled over)",
      `${big.events} events, ${mb(big.historyBytes)} (server limits: 51,200 events, 50 MB)` +
        (big.histories > 1 ? `; ${big.histories} histories: it rolled over ${big.histories - 1} time(s)` : ''),
    ],
    ['largest event after the first', kib(big.largestEvent)],
    ["the first event (the request: the caller's input, and after a rollover what it carried)", kib(big.inputBytes)],
    [
      'every event under 64 KiB',
      Math.max(big.largestEvent, big.inputBytes) < 64 * 1024 ? 'yes' : 'NO: see the two rows above',
    ],
    ['result', `${big.omitted} of ${N} reports left out of the payload, read back by the reports query`],
    [
      'sub-tasks per host',
      Object.entries(big.byHost)
        .map(([h, n]) => `${h} ${n}`)
        .join(', '),
    ],
    ['peak RSS per worker', workers.map((w) => mb(w.peakRss())).join(', ')],
    ...Object.keys(big.cpu).map((part): [string, string] => {
      const at = (r: typeof small, n: number) => (r.cpu[part] / n) * 1000;
      const [s, b] = [at(small, SMALL), at(big, N)];
      return [
        `CPU per sub-task: ${part}`,
        `${s.toFixed(0)} ms at ${SMALL}, ${b.toFixed(0)} ms at ${N}` + (s > 0 ? ` (${(b / s).toFixed(2)}x)` : ''),
      ];
    }),
  ];
  for (const [what, value] of rows) console.log(`| ${what} | ${value} |`);
  for (const w of workers) await w.stop();
  if (profDir) console.log(`\n(CPU profiles of each worker, main and workflow threads: ${profDir}/host-N)`);
  store.daemon.kill();
  await client.connection.close();
  await temporal.stop();
}

runBench('fleet', root, main);
