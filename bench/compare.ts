/**
 * What a change buys: two builds' workers on the same runs, interleaved, one at a time. For each
 * round and build: a worker process of its own, a warm-up run, then one measured run; its wall
 * time, its integration (the last sub-task's end to the push being scheduled: merge, test
 * sandbox, test), the worker's CPU, its children's, peak RSS and (with --strace) the processes it
 * made. Each round also times bench/baseline.sh's merge + test + push of as many sub-tasks on
 * the same repository.
 *
 *   npx tsx bench/compare.ts OTHER/dist/worker.js [--files 20000] [--sub-tasks 4] [--rounds 2] [--agent-s 0] [--parallel N] [--strace] [--steps]
 *
 * --agent-s: each agent sleeps that long first (by default its work takes no time, so the
 * sub-tasks' phase is all Flotilla's own). --steps also prints the leader's activities while the
 * sub-tasks ran, and those of its integration: when each was scheduled (from the run's start, and
 * from the last sub-task's end) and how long it took to complete.
 *
 * OTHER is another checkout, built (`git archive <commit> | tar -x -C OTHER`, node_modules linked,
 * `npm run build`); this checkout's dist/worker.js is built by `npm run build` first.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import { awaitRun, newRunId } from '../src/client/index';
import type { LeaderRequestInput } from '../src/contracts/request';
import { ensureTemporal } from '../src/temporal/server';
import { countProcesses, startWorkerProcess } from './worker-process';
import { runBench } from './main';
import { phases } from './phases';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    files: { type: 'string', default: '10' },
    'sub-tasks': { type: 'string', default: '4' },
    rounds: { type: 'string', default: '2' },
    strace: { type: 'boolean' },
    steps: { type: 'boolean' },
    'agent-s': { type: 'string', default: '0' },
    // Sub-tasks at once (limits.maxParallel); the request's default when not given.
    parallel: { type: 'string' },
  },
});
if (positionals.length !== 1)
  throw new Error(
    'usage: npx tsx bench/compare.ts OTHER/dist/worker.js [--files N] [--sub-tasks N] [--rounds N] [--agent-s S] [--parallel N] [--strace] [--steps]',
  );
const builds: Record<string, string> = {
  other: path.resolve(positionals[0]),
  this: path.join(__dirname, '..', 'dist', 'worker.js'),
};
const [files, subTasks, rounds, agentS] = [values.files, values['sub-tasks'], values.rounds, values['agent-s']].map(
  Number,
);

const root = mkdtempSync(path.join(os.tmpdir(), 'flotilla-compare-'));
const git = (cwd: string, ...args: string[]) =>
  execFileSync('git', ['-c', 'user.name=bench', '-c', 'user.email=bench@localhost', ...args], { cwd });

/** A bare remote of `n` files of 2.7 KB (incompressible). */
function remote(name: string, n: number): string {
  const work = path.join(root, name);
  git(root, 'init', '-q', '-b', 'main', work);
  for (let i = 0; i < n; i++) {
    mkdirSync(path.join(work, `d${i % 100}`), { recursive: true });
    writeFileSync(path.join(work, `d${i % 100}`, `f${i}`), randomBytes(2000).toString('base64'));
  }
  git(work, 'add', '-A');
  git(work, 'commit', '-qm', 'initial');
  git(root, 'clone', '-q', '--bare', work, `${work}.git`);
  rmSync(work, { recursive: true, force: true });
  return `${work}.git`;
}

/**
 * The request as a user writes it, not parsed here: each build's leader parses it with its own
 * defaults, and an older build refuses the fields a newer parser would fill in.
 */
const request = (url: string, n: number): LeaderRequestInput => ({
  objective: 'compare',
  repo: { url, baseRef: 'main', targetRef: `compare-${newRunId()}` },
  testCmd: 'true',
  ...(values.parallel && { limits: { maxParallel: Number(values.parallel) } }),
  subTasks: Array.from({ length: n }, (_, i) => ({
    id: `t${i}`,
    prompt: 'compare',
    ownedPaths: [`t${i}`],
    agent: {
      kind: 'shell',
      command: `${agentS > 0 ? `sleep ${agentS} && ` : ''}mkdir -p t${i} && echo ${i} > t${i}/o && git add -A && git commit -qm t${i}`,
    },
  })),
});

/** bench/baseline.sh's merge of `subTasks` branches, its test and its push, on `url`, in seconds. */
function scriptIntegration(url: string): number {
  const work = mkdtempSync(path.join(root, 'script-'));
  const out = execFileSync(path.join(__dirname, 'baseline.sh'), [url, work, String(subTasks), '0'], {
    encoding: 'utf8',
  });
  rmSync(work, { recursive: true, force: true });
  const phase = (name: string) => Number(new RegExp(`^phase ${name} ([\\d.]+)$`, 'm').exec(out)?.[1] ?? NaN);
  return phase('integrate') + phase('test') + phase('push');
}

async function main(): Promise<void> {
  execFileSync('npm', ['run', '--silent', 'build'], { cwd: path.join(__dirname, '..'), stdio: 'pipe' });
  const measured = remote('measured', files);
  const warm = remote('warm', 2);
  const temporal = await ensureTemporal({ dataDir: path.join(root, 'temporal'), port: 18233 + (process.pid % 1000) });
  const client = new Client({
    connection: await Connection.connect({ address: temporal.address }),
    namespace: temporal.namespace,
  });
  console.log(
    `# ${files} files, ${subTasks} sub-tasks${agentS > 0 ? ` of a ${agentS} s agent` : ''}, ${rounds} rounds; load average ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  let queue = 0;
  for (let round = 0; round < rounds; round++) {
    for (const build of round % 2 ? ['this', 'other'] : ['other', 'this']) {
      const taskQueue = `compare-${++queue}`;
      const straceFile = values.strace ? path.join(root, `${taskQueue}.strace`) : undefined;
      const w = await startWorkerProcess({
        client,
        address: temporal.address,
        namespace: temporal.namespace,
        dataDir: path.join(root, build),
        taskQueue,
        logFile: path.join(root, 'worker.log'),
        workerJs: builds[build],
        straceFile,
      });
      let steps: string[] = [];
      let before: string[] = [];
      let collect: number | undefined;
      let starts: { perChild: number; leaderWait: number } | undefined;
      const run = async (url: string, n: number): Promise<number | undefined> => {
        const handle = await client.workflow.start('leaderWorkflow', {
          taskQueue,
          workflowId: newRunId(),
          args: [request(url, n)],
        });
        const end = await awaitRun(handle);
        if (end.result?.outcome !== 'pushed')
          throw new Error(`a run on the ${build} build did not push: ${end.failureMessage}`);
        const taken = await phases(client, handle);
        steps = [...(taken.span ? [taken.span] : []), ...taken.steps];
        before = taken.before;
        collect = taken.collect;
        starts = taken.starts;
        return taken.integrate;
      };
      await run(warm, 2);
      const from = straceFile ? statSync(straceFile).size : 0;
      const [cpu0, t0] = [w.cpu(), performance.now()];
      const integrate = await run(measured, subTasks);
      const [cpu1, secs, rss] = [w.cpu(), (performance.now() - t0) / 1000, w.peakRss()];
      await w.stop();
      const p = straceFile ? countProcesses(straceFile, from) : undefined;
      console.log(
        `${build.padEnd(5)} wall ${secs.toFixed(2)} s, integration ${integrate?.toFixed(2) ?? '-'} s, collectWork ${collect?.toFixed(2) ?? '-'} s, worker CPU ${(cpu1.self - cpu0.self).toFixed(2)} s, its children ${(cpu1.children - cpu0.children).toFixed(2)} s, ` +
          `peak RSS ${(rss / 1e6).toFixed(0)} MB${p ? `, ${p.execs} execs / ${p.forks} forks (${(p.execs / subTasks).toFixed(1)} programs per sub-task)` : ''}`,
      );
      if (starts)
        console.log(
          `      sub-task workflows started ${(starts.perChild * 1000).toFixed(0)} ms apart; the leader waited up to ${starts.leaderWait.toFixed(2)} s for a workflow task meanwhile`,
        );
      if (p) console.log(`      programs: ${p.programs.map(([name, n]) => `${name} ${n}`).join(', ')}`);
      if (values.steps) {
        console.log(`      while the sub-tasks ran: ${before.join(', ')}`);
        console.log(`      integration steps: ${steps.join(', ')}`);
      }
    }
    console.log(`script integration (merge + test + push) ${scriptIntegration(measured).toFixed(2)} s`);
  }
  await client.connection.close();
  await temporal.stop();
  rmSync(root, { recursive: true, force: true });
}

runBench('compare', root, main);
