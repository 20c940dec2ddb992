/**
 * The worker as users run it: `node dist/worker.js` (after `npm run build`, so the workflow bundle
 * is loaded from disk), its own process, read through /proc. Ready is from the spawn until both of
 * its task queue's kinds have a poller, as Temporal itself sees it.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { Client } from '@temporalio/client';

const TICKS = 100; // USER_HZ: /proc reports CPU in these on every Linux architecture.

export interface WorkerProcess {
  pid: number;
  taskQueue: string;
  /** Seconds from spawn until workflow and activity tasks of its queue both have a poller. */
  readyS: number;
  /**
   * CPU seconds so far: the worker itself, and what it started (git, sandboxes, agents): the
   * children it reaped, and its spawner with the programs that one reaped.
   */
  cpu(): { self: number; children: number };
  /** Peak resident memory in bytes (VmHWM). */
  peakRss(): number;
  stop(): Promise<void>;
}

export interface WorkerProcessOptions {
  client: Client;
  address: string;
  namespace: string;
  dataDir: string;
  taskQueue: string;
  /** Where its stderr goes (shown when it fails). */
  logFile: string;
  /** Run it under strace, writing process-creating syscalls here. */
  straceFile?: string;
  /** Options for node itself (--cpu-prof, to see where the worker's CPU goes). */
  nodeArgs?: string[];
  /** Another build's worker, to compare with (default: this checkout's dist/worker.js). */
  workerJs?: string;
  /** More of its environment: a host id, sandbox uids, a shared staging store (bench/fleet.ts). */
  env?: Record<string, string>;
}

const WORKER_JS = path.join(__dirname, '..', 'dist', 'worker.js');

export async function startWorkerProcess(o: WorkerProcessOptions): Promise<WorkerProcess> {
  const env = {
    ...process.env,
    FLOTILLA_HOME: o.dataDir,
    FLOTILLA_TASK_QUEUE: o.taskQueue,
    TEMPORAL_ADDRESS: o.address,
    TEMPORAL_NAMESPACE: o.namespace,
    ...o.env,
  };
  const node = [process.execPath, ...(o.nodeArgs ?? []), o.workerJs ?? WORKER_JS];
  const argv = o.straceFile
    ? ['strace', '-f', '-qq', '-o', o.straceFile, '-e', 'trace=clone,clone3,fork,vfork,execve', ...node]
    : node;
  const log = openSync(o.logFile, 'a');
  const started = performance.now();
  const child = spawn(argv[0], argv.slice(1), { env, stdio: ['ignore', log, log] });
  closeSync(log);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  // A bench that fails must not leave a worker polling behind it.
  let pid = child.pid!;
  const kill = () => [pid, child.pid!].forEach((p) => signal(p, 'SIGKILL'));
  process.once('exit', kill);
  await untilPolled(o, child).catch((err) => {
    kill();
    throw err;
  });
  const readyS = (performance.now() - started) / 1000;
  // Under strace the pid is strace's; the worker is its child (by now: strace's own probe child is gone).
  if (o.straceFile) pid = await childOf(child.pid!);
  return {
    pid,
    taskQueue: o.taskQueue,
    readyS,
    cpu: () => workerCpu(pid),
    peakRss: () => Number(/^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024,
    stop: async () => {
      signal(pid, 'SIGTERM');
      await exited;
      process.removeListener('exit', kill);
    },
  };
}

async function untilPolled(o: WorkerProcessOptions, child: ChildProcess): Promise<void> {
  const kinds = [1, 2]; // TASK_QUEUE_TYPE_WORKFLOW, TASK_QUEUE_TYPE_ACTIVITY
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null)
      throw new Error(
        `the worker exited with ${child.exitCode} before polling; see ${o.logFile}:\n${readFileSync(o.logFile, 'utf8').slice(-2000)}`,
      );
    if (Date.now() > deadline)
      throw new Error(`the worker did not poll ${o.taskQueue} within a minute; see ${o.logFile}`);
    const polled = await Promise.all(
      kinds.map(async (taskQueueType) => {
        const r = await o.client.workflowService.describeTaskQueue({
          namespace: o.namespace,
          taskQueue: { name: o.taskQueue },
          taskQueueType,
        });
        return (r.pollers ?? []).length > 0;
      }),
    );
    if (polled.every(Boolean)) return;
    await new Promise((r) => setTimeout(r, 10));
  }
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // Already gone.
  }
}

/** The pids of process `pid`'s live children. */
const childrenOf = (pid: number) =>
  readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);

async function childOf(pid: number): Promise<number> {
  for (let i = 0; i < 100; i++) {
    const kids = childrenOf(pid);
    if (kids.length) return Number(kids[0]);
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`strace (pid ${pid}) started no worker`);
}

/**
 * The worker's CPU and its children's, the spawner's included: the programs the spawner starts
 * (src/spawner/) are its children, not the worker's, and it lives as long as the worker, so what
 * it reaped is counted from its own /proc entry.
 */
function workerCpu(pid: number): { self: number; children: number } {
  const own = cpuOf(pid);
  for (const kid of childrenOf(pid)) {
    try {
      if (!readFileSync(`/proc/${kid}/cmdline`, 'utf8').includes('flotilla-spawner-')) continue;
      const spawner = cpuOf(Number(kid));
      own.children += spawner.self + spawner.children;
    } catch {
      // Gone between the listing and the read.
    }
  }
  return own;
}

/**
 * CPU seconds of process `pid` so far, and of the children it has reaped: utime, stime, cutime,
 * cstime of /proc/<pid>/stat (fields 14 to 17, after the command name).
 */
export function cpuOf(pid: number): { self: number; children: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat
    .slice(stat.lastIndexOf(')') + 2)
    .split(' ')
    .map(Number);
  // f[0] is field 3 (state): field n is f[n - 3].
  return { self: (f[11] + f[12]) / TICKS, children: (f[13] + f[14]) / TICKS };
}

/**
 * Processes a traced worker created after `fromByte` of the strace file: programs started
 * (execve that succeeded), forks (clones that are not threads), and the programs by name (git by
 * its command), most started first.
 */
export function countProcesses(
  straceFile: string,
  fromByte = 0,
): { execs: number; forks: number; programs: [string, number][] } {
  const lines = readFileSync(straceFile, 'utf8').slice(fromByte).split('\n');
  let execs = 0;
  let forks = 0;
  const programs = new Map<string, number>();
  // An interrupted call is split: its arguments on one line, "<... execve resumed>" and the result
  // on another, both starting with the pid.
  const pending = new Map<string, string>();
  for (const line of lines) {
    const pid = /^(\d+)\s/.exec(line)?.[1] ?? '';
    const call = /execve\("([^"]*)", \[(.*)/.exec(line);
    if (call && line.endsWith('<unfinished ...>')) pending.set(pid, programOf(call[1], call[2]));
    if (/execve(\(| resumed>).*= 0$/.test(line)) {
      execs++;
      const name = call ? programOf(call[1], call[2]) : (pending.get(pid) ?? '?');
      programs.set(name, (programs.get(name) ?? 0) + 1);
      pending.delete(pid);
    } else if (/\b(clone3?|v?fork)\(/.test(line) && !line.includes('CLONE_THREAD')) forks++;
  }
  return { execs, forks, programs: [...programs].sort((a, b) => b[1] - a[1]) };
}

/** A program's name as the counts show it: its file's name, and git's command after it. */
function programOf(file: string, args: string): string {
  const name = path.basename(file);
  if (name !== 'git') return name;
  const words = [...args.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((m) => m[1]).slice(1);
  for (let i = 0; i < words.length; i++) {
    if (words[i] === '-c' || words[i] === '-C') i++;
    else if (!words[i].startsWith('-')) return `git ${words[i]}`;
  }
  return 'git';
}
