/**
 * `npm run bench`: what Flotilla's orchestration costs next to the agents, as a table. Flotilla
 * is the worker as users run it (`node dist/worker.js`, built first, its own process) on an
 * embedded Temporal dev server, driven through the client; the baseline is bench/baseline.sh
 * doing the same job with `git worktree add`. Rounds interleave the two so a change of load hits
 * both; the table shows min/median, the physical limit of a fan-out (the script's longest agent,
 * one merge, one test and one push, measured in the same run) and the ratios against the targets
 * of issues #12 and #19.
 *
 *   npm run bench               full sizes (a 20,000-file / 150 MB repository, 5 s agents, 8 and 32 sub-tasks, 10 runs at once)
 *   npm run bench -- --quick    a smoke run of every figure at tiny sizes (CI: it only has to complete)
 *   npm run bench -- --cpu-prof DIR   also writes the measured worker's CPU profiles (node --cpu-prof) to DIR
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { awaitRun, newRunId, startRun } from '../src/client/index';
import { parseLeaderRequest } from '../src/contracts/request';
import { ensureTemporal } from '../src/temporal/server';
import { type WorkerProcess, countProcesses, startWorkerProcess } from './worker-process';
import { buildUnlessBuilt } from './build';
import { runBench } from './main';
import { phases } from './phases';

const quick = process.argv.includes('--quick');
const cpuProfDir = process.argv.includes('--cpu-prof')
  ? path.resolve(process.argv[process.argv.indexOf('--cpu-prof') + 1] ?? 'bench-profiles')
  : undefined;
const P = quick
  ? { rounds: 1, agentS: 0.5, fanout: 2, more: 4, files: 200, mb: 1, history: 5, concurrent: 2, perRun: 2, starts: 1 }
  : {
      rounds: 3,
      agentS: 5,
      fanout: 8,
      more: 32,
      files: 20000,
      mb: 150,
      history: 50,
      concurrent: 10,
      perRun: 4,
      starts: 3,
    };

const root = mkdtempSync(path.join(os.tmpdir(), 'flotilla-bench-'));
const git = (cwd: string, ...args: string[]) =>
  execFileSync('git', ['-c', 'user.name=bench', '-c', 'user.email=bench@localhost', ...args], {
    cwd,
    encoding: 'utf8',
  }).trim();

/** A bare remote with `files` files of `mb` megabytes in all (incompressible) and `history` commits. */
function makeRemote(name: string, files: number, mb: number, history: number): { url: string; checkoutBytes: number } {
  const work = path.join(root, `${name}-src`);
  mkdirSync(work, { recursive: true });
  git(work, 'init', '-q', '-b', 'main');
  const size = Math.max(16, Math.floor((mb * 1024 * 1024) / files / 1.34));
  for (let i = 0; i < files; i++) {
    const dir = path.join(work, `d${i % 100}`);
    mkdirSync(dir, { recursive: true });
    writeFileSync(path.join(dir, `f${i}.txt`), randomBytes(size).toString('base64'));
  }
  git(work, 'add', '-A');
  git(work, 'commit', '-qm', 'initial');
  for (let c = 1; c < history; c++) {
    const k = c % files;
    writeFileSync(path.join(work, `d${k % 100}`, `f${k}.txt`), `revision ${c}\n`);
    git(work, 'commit', '-qam', `revision ${c}`);
  }
  const url = path.join(root, `${name}.git`);
  git(root, 'clone', '-q', '--bare', work, url);
  const checkoutBytes = Number(
    execFileSync('du', ['-sb', '--exclude=.git', work], { encoding: 'utf8' }).split('\t')[0],
  );
  rmSync(work, { recursive: true, force: true });
  return { url, checkoutBytes };
}

const agent = (i: number, secs: number) =>
  `sleep ${secs} && mkdir -p t${i} && echo "hello from ${i}" > t${i}/out.txt && git add -A && git commit -qm "task ${i}"`;

function request(url: string, n: number, secs: number) {
  return parseLeaderRequest({
    objective: 'bench',
    repo: { url, baseRef: 'main', targetRef: `bench-${newRunId()}` },
    testCmd: 'true',
    subTasks: Array.from({ length: n }, (_, i) => ({
      id: `t${i}`,
      prompt: 'bench',
      ownedPaths: [`t${i}`],
      agent: { kind: 'shell', command: agent(i, secs) },
    })),
    limits: { maxParallel: Math.min(n, 64) },
  });
}

/** Seconds the baseline script took, per phase. */
function baseline(url: string, n: number, secs: number): Record<string, number> {
  const work = mkdtempSync(path.join(root, 'script-'));
  const r = spawnSync(path.join(__dirname, 'baseline.sh'), [url, work, String(n), String(secs)], { encoding: 'utf8' });
  rmSync(work, { recursive: true, force: true });
  if (r.status !== 0) throw new Error(`baseline.sh failed: ${r.stderr}`);
  return Object.fromEntries([...r.stdout.matchAll(/^phase (\w+) ([\d.]+)$/gm)].map((m) => [m[1], Number(m[2])]));
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return (s[Math.floor((s.length - 1) / 2)] + s[Math.ceil((s.length - 1) / 2)]) / 2;
};
const min = (xs: number[]) => Math.min(...xs);
const fmt = (x: number | undefined, unit = 's') =>
  x === undefined || Number.isNaN(x) ? '-' : `${x.toFixed(x < 10 ? 3 : 1)}${unit}`;

async function main(): Promise<void> {
  const load = () =>
    os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ');
  console.log(`# Flotilla bench (${quick ? 'quick' : 'full'}), ${os.cpus().length} cores, load average ${load()}`);
  buildUnlessBuilt();
  const small = makeRemote('small', 10, 0.01, 1);
  const big = makeRemote('big', P.files, P.mb, P.history);
  console.log(
    `repositories ready: big = ${P.files} files, ${(big.checkoutBytes / 1e6).toFixed(0)} MB checkout, ${P.history} commits`,
  );

  const dataDir = path.join(root, 'data');
  const port = 17233 + (process.pid % 1000);
  const temporal = await ensureTemporal({ dataDir, port });
  const client = new Client({
    connection: await Connection.connect({ address: temporal.address }),
    namespace: temporal.namespace,
  });
  let queues = 0;
  const startWorker = (straceFile?: string, nodeArgs?: string[]) =>
    startWorkerProcess({
      client,
      address: temporal.address,
      namespace: temporal.namespace,
      dataDir,
      // A queue of its own each time: Temporal lists an earlier worker's pollers for a while after it stops.
      taskQueue: `bench-${process.pid}-${++queues}`,
      logFile: path.join(root, 'worker.log'),
      straceFile,
      nodeArgs,
    });

  // Start-up alone, a few times (the embedded server is already up); the last one stays.
  const readies: number[] = [];
  let worker: WorkerProcess | undefined;
  // A profiled start is not counted: with a profile, one more.
  const starts = P.starts + (cpuProfDir ? 1 : 0);
  for (let i = 0; i < starts; i++) {
    await worker?.stop();
    const last = i === starts - 1;
    worker = await startWorker(
      undefined,
      last && cpuProfDir ? ['--cpu-prof', `--cpu-prof-dir=${cpuProfDir}`] : undefined,
    );
    // Profiling slows the start it would measure.
    if (!(last && cpuProfDir)) readies.push(worker.readyS);
  }
  const { taskQueue } = worker!;

  const flotilla = async (url: string, n: number, secs: number, queue = taskQueue) => {
    const started = performance.now();
    const handle = await startRun(client, request(url, n, secs), { taskQueue: queue });
    const end = await awaitRun(handle);
    const seconds = (performance.now() - started) / 1000;
    if (end.result?.outcome !== 'pushed')
      throw new Error(`run ${handle.workflowId} did not push: ${end.failureMessage}`);
    return { seconds, bytes: JSON.stringify(end.result).length, ...(await phases(client, handle)) };
  };
  /** Peak bytes under the sandboxes directory while `work` runs, and how much of it was .git. */
  const diskDuring = async <T>(work: Promise<T>): Promise<{ value: T; peak: number; git: number }> => {
    let peak = 0;
    let git = 0;
    let done = false;
    const value = work.finally(() => (done = true));
    const du = (pattern: string) => {
      const r = spawnSync('bash', ['-c', `du -sbc ${pattern} 2>/dev/null | tail -1`], { encoding: 'utf8' });
      return Number(r.stdout.split('\t')[0]) || 0;
    };
    while (!done) {
      const all = du(path.join(dataDir, 'sandboxes'));
      if (all > peak) [peak, git] = [all, du(`${path.join(dataDir, 'sandboxes')}/*/workspace/.git`)];
      await new Promise((r) => setTimeout(r, 500));
    }
    return { value: await value, peak, git };
  };

  // The first run pays for caches and connections that every later run finds warm.
  await flotilla(small.url, 2, 0);
  const m: Record<string, { f: number[]; b: number[]; limit: number[] }> = {};
  const add = (k: string, f?: number, b?: number) => {
    m[k] ??= { f: [], b: [], limit: [] };
    if (f !== undefined) m[k].f.push(f);
    if (b !== undefined) m[k].b.push(b);
  };
  /** The script's total, and the physical limit measured in the same run: longest agent + one merge + one test + one push. */
  const script = (k: string, n: number) => {
    const b = baseline(small.url, n, P.agentS);
    add(k, undefined, b.total);
    m[k].limit.push(b.agent + b.merge + b.test + b.push);
  };
  let resultBytesPerWorker = 0;
  let diskPerSandbox = 0;
  let gitPerSandbox = 0;
  for (let round = 0; round < P.rounds; round++) {
    console.log(`round ${round + 1}/${P.rounds}, load average ${load()}`);
    // Alternate which side goes first, so neither always meets the other's leftovers.
    const pairs: [() => Promise<void>, () => Promise<void>][] = [
      [
        async () => {
          const r = await flotilla(small.url, P.fanout, P.agentS);
          add('fanout', r.seconds);
          add('collect', r.collect);
          add('starts', r.starts?.perChild, r.starts?.leaderWait);
          resultBytesPerWorker = r.bytes / P.fanout;
        },
        async () => script('fanout', P.fanout),
      ],
      [
        async () => {
          const r = await flotilla(small.url, P.more, P.agentS);
          add('more', r.seconds);
          add('startsMore', r.starts?.perChild, r.starts?.leaderWait);
        },
        async () => script('more', P.more),
      ],
      [
        async () => {
          const { value: r, peak, git } = await diskDuring(flotilla(big.url, 4, P.agentS));
          add('seed', r.seed);
          add('integrate', r.integrate);
          if (peak / 4 > diskPerSandbox) [diskPerSandbox, gitPerSandbox] = [peak / 4, git / 4];
        },
        async () => {
          const b = baseline(big.url, 4, P.agentS);
          add('seed', undefined, b.seed);
          // The issue's yardstick: what the script does after its agents, the merge, the test and the push.
          add('integrate', undefined, b.integrate + b.test + b.push);
        },
      ],
    ];
    for (const [f, b] of pairs) {
      if (round % 2 === 0) {
        await f();
        await b();
      } else {
        await b();
        await f();
      }
    }
  }

  // Many runs at once on one worker, against one run alone (same worker, same sizes).
  const alone = (await flotilla(small.url, P.perRun, P.agentS)).seconds;
  const cpu0 = worker!.cpu();
  const many = await Promise.all(Array.from({ length: P.concurrent }, () => flotilla(small.url, P.perRun, P.agentS)));
  const cpu1 = worker!.cpu();
  const peakRss = worker!.peakRss();
  await worker!.stop();

  // Processes per run: a worker of its own under strace, warmed up, then one run of perRun sub-tasks.
  const straceFile = path.join(root, 'strace.out');
  const traced = existsSync('/usr/bin/strace') ? await startWorker(straceFile) : undefined;
  let spawned: { execs: number; forks: number } | undefined;
  if (traced) {
    const tq = traced.taskQueue;
    await flotilla(small.url, 2, 0, tq);
    const before = countProcesses(straceFile);
    const from = statSync(straceFile).size;
    await flotilla(small.url, P.perRun, 0, tq);
    await traced.stop();
    const during = countProcesses(straceFile, from);
    spawned = during;
    console.log(`(strace: ${before.execs} execs and ${before.forks} forks until after the warm-up run)`);
  }

  let limitColumn = '-';
  const row = (what: string, f: string, b: string, ratio: string, target: string, ok: boolean | undefined) =>
    console.log(
      `| ${what} | ${f} | ${b} | ${limitColumn} | ${ratio} | ${target} | ${ok === undefined ? '-' : ok ? 'met' : 'MISSED'} |`,
    );
  console.log(`\nload average at the end ${load()}\n`);
  console.log(
    '| measure | Flotilla (min / median) | baseline (min / median) | physical limit (median; Flotilla above it) | ratio of medians | target | |',
  );
  console.log('|---|---|---|---|---|---|---|');
  const pair = (k: string, label: string, limit: number, aboveLimit?: number) => {
    const { f, b } = m[k];
    const ratio = median(f) / median(b);
    const above = m[k].limit.length ? median(f) - median(m[k].limit) : undefined;
    limitColumn = above === undefined ? '-' : `${fmt(median(m[k].limit))} (+${fmt(above)})`;
    const within = aboveLimit === undefined || (above !== undefined && above <= aboveLimit);
    row(
      label,
      `${fmt(min(f))} / ${fmt(median(f))}`,
      `${fmt(min(b))} / ${fmt(median(b))}`,
      `${ratio.toFixed(2)}x`,
      `<= ${limit}x${aboveLimit === undefined ? '' : `, <= ${aboveLimit} s above the limit`}`,
      ratio <= limit && within,
    );
    limitColumn = '-';
  };
  pair('fanout', `${P.fanout} sub-tasks of a ${P.agentS} s agent`, 1.25, 1.5);
  pair('more', `${P.more} sub-tasks of a ${P.agentS} s agent`, 1.4);
  const extraF = (median(m.more.f) - median(m.fanout.f)) / (P.more - P.fanout);
  const extraB = (median(m.more.b) - median(m.fanout.b)) / (P.more - P.fanout);
  row(`each extra sub-task (${P.fanout} -> ${P.more})`, fmt(extraF), fmt(extraB), '-', '<= 0.1 s', extraF <= 0.1);
  pair('seed', `seeding one sandbox (${P.files} files) vs \`git worktree add\``, 1.1);
  pair('integrate', "integration of 4 workers vs the script's merge + test + push", 3);
  // Item 3: the per-child cost of starting the sub-tasks' workflows must not grow with N ("b" holds
  // the leader's longest wait for a workflow task while they started).
  const [atFew, atMore] = [m.starts, m.startsMore];
  row(
    `sub-task workflows started, per sub-task, at ${P.fanout} / ${P.more} (the leader's longest wait meanwhile)`,
    atFew?.f.length && atMore?.f.length ? `${fmt(median(atFew.f))} / ${fmt(median(atMore.f))}` : '-',
    atFew?.b.length && atMore?.b.length ? `(${fmt(median(atFew.b))} / ${fmt(median(atMore.b))})` : '-',
    '-',
    'no growth with N',
    atFew?.f.length && atMore?.f.length ? median(atMore.f) <= median(atFew.f) * 1.1 : undefined,
  );
  const collect = m.collect?.f ?? [];
  row(
    `collectWork of a one-file commit (the first of ${P.fanout} sub-tasks to end)`,
    collect.length ? `${fmt(min(collect))} / ${fmt(median(collect))}` : '-',
    '-',
    '-',
    '<= 0.2 s',
    collect.length ? median(collect) <= 0.2 : undefined,
  );
  row(
    'worker memory (peak RSS of the worker process, VmHWM)',
    fmt(peakRss / 1e6, ' MB'),
    '-',
    '-',
    '<= 350 MB',
    peakRss <= 350e6,
  );
  row(
    `sandbox disk, per sandbox, vs checkout (of which .git ${fmt(gitPerSandbox / 1e6, ' MB')})`,
    fmt(diskPerSandbox / 1e6, ' MB'),
    fmt(big.checkoutBytes / 1e6, ' MB'),
    `${(diskPerSandbox / big.checkoutBytes).toFixed(2)}x`,
    '<= 1.1x',
    diskPerSandbox <= big.checkoutBytes * 1.1,
  );
  const manyMedian = median(many.map((r) => r.seconds));
  row(
    `${P.concurrent} runs x ${P.perRun} at once: median latency vs one alone`,
    fmt(manyMedian),
    fmt(alone),
    `${(manyMedian / alone).toFixed(2)}x`,
    '<= 2.5x',
    manyMedian / alone <= 2.5,
  );
  const cpuPerRun = (cpu1.self - cpu0.self) / P.concurrent;
  const childCpuPerRun = (cpu1.children - cpu0.children) / P.concurrent;
  row(
    'worker CPU per run (the worker process; git and sandboxes excluded)',
    fmt(cpuPerRun),
    '-',
    '-',
    '<= 0.4 s',
    cpuPerRun <= 0.4,
  );
  row(
    'CPU per run of what the worker started (git, sandbox set-up, agents)',
    fmt(childCpuPerRun),
    '-',
    '-',
    '-',
    undefined,
  );
  if (spawned)
    row(
      `processes per run of ${P.perRun} sub-tasks (strace: execs / forks; programs per sub-task)`,
      `${spawned.execs} / ${spawned.forks}; ${(spawned.execs / P.perRun).toFixed(1)}`,
      '-',
      '-',
      '<= 20 programs per sub-task',
      spawned.execs / P.perRun <= 20,
    );
  row(
    'worker ready (`node dist/worker.js` until its queue is polled)',
    `${fmt(min(readies))} / ${fmt(median(readies))}`,
    '-',
    '-',
    '<= 1.5 s',
    median(readies) <= 1.5,
  );
  if (cpuProfDir) console.log(`\n(CPU profiles of the measured worker, main and workflow threads: ${cpuProfDir})`);
  row(
    'RunResult bytes per worker (x100 must stay < 64 KiB)',
    `${resultBytesPerWorker.toFixed(0)} B`,
    '-',
    '-',
    '<= 655 B',
    resultBytesPerWorker <= 655,
  );

  await client.connection.close();
  await temporal.stop();
  rmSync(root, { recursive: true, force: true });
}

runBench('bench', root, main);
