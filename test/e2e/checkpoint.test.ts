/**
 * Checkpoints of work in progress, activity by activity in real bubblewrap sandboxes with real
 * git: a checkpoint of an agent's staged, unstaged and untracked changes leaves its HEAD, index
 * and branch as they were (it is taken while the agent runs), and restoring it in a fresh
 * sandbox gives the same files. The workspace is hostile: a filter it defines does not run. The
 * staging repository keeps no more than two checkpoints of a sub-task, and none once its sandbox
 * is destroyed; a file rewritten under a checkpoint, a FIFO and a nested repository do not
 * switch checkpoints off. A real run leaves no checkpoint behind.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createActivities } from '../../src/activities/index';
import { checkpointRef } from '../../src/git/checkpoint';
import { type ActivityDeps, type SandboxRef, defaultDeps, openSandbox } from '../../src/activities/deps';
import { runRef } from '../../src/git/staging';
import { TestEnv } from '../support/env';
import { makeRemote } from '../support/remotes';
import { shellRequest, subTask } from '../support/requests';
import { tempDir } from '../support/temp';

let deps: ActivityDeps;
let acts: ReturnType<typeof createActivities>;
let baseSha: string;
const runKey = `ckpt-${process.pid}`;
const env = new MockActivityEnvironment();
const run = <A extends unknown[], R>(fn: (...args: A) => Promise<R>, ...args: A): Promise<R> => env.run(fn, ...args);

beforeAll(async () => {
  deps = defaultDeps(tempDir('ckpt-data'));
  acts = createActivities(deps);
  const work = tempDir('ckpt-base');
  mkdirSync(path.join(work, 'src'));
  for (const f of ['a.txt', 'b.txt']) writeFileSync(path.join(work, 'src', f), `${f} at the base\n`);
  const git = (...args: string[]) => execFileSync('git', args, { cwd: work, encoding: 'utf8' }).trim();
  git('init', '-q', '-b', 'main');
  git('add', '-A');
  git('-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-qm', 'base');
  baseSha = git('rev-parse', 'HEAD');
  const staging = await deps.staging(runKey);
  await staging.raw(['fetch', '-q', work, `+refs/heads/main:${runRef(runKey, 'base')}`]);
});

afterAll(async () => {
  for (const key of ['agent', 'fresh', 'worker/bounded', 'worker/rewrite', 'worker/odd'])
    await deps.provider({ key, provider: 'local', network: false }).destroy(`${runKey}/${key}`);
});

const sandboxRef = (name: string): SandboxRef => ({ key: `${runKey}/${name}`, provider: 'local', network: false });

async function seeded(name: string) {
  const ref = sandboxRef(name);
  await run(acts.provisionSandbox, ref);
  await run(acts.seedWorkspace, { sandbox: ref, runKey, baseSha, branch: 'flotilla/w', author: 'worker w' });
  return { ref, sb: await openSandbox(deps, ref) };
}

async function sh(sb: Awaited<ReturnType<typeof openSandbox>>, command: string): Promise<string> {
  const r = await sb.exec(command, { timeoutMs: 30_000 });
  expect(r.exitCode, r.output).toBe(0);
  return r.output;
}

/** Everything of the repository an agent could notice changing under it. */
const REPO_STATE =
  'git rev-parse HEAD; git symbolic-ref HEAD; git ls-files -s; git status --porcelain; git stash list; git for-each-ref --format="%(refname) %(objectname)"; cat .git/config';

describe('checkpoints', () => {
  it('saves staged, unstaged and untracked work without touching HEAD, index or branch; a fresh sandbox restores the same files', async () => {
    const { ref, sb } = await seeded('agent');
    // An agent mid-task: one commit, then a staged, an unstaged and an untracked change, and a
    // clean filter that would run a program of its choosing on `git add`.
    await sh(
      sb,
      [
        'echo committed > src/committed.txt && git add -A && git commit -qm "agent commit"',
        'echo staged >> src/a.txt && git add src/a.txt',
        'echo unstaged >> src/b.txt',
        'mkdir -p src/new && echo untracked > src/new/c.txt',
        `git config filter.evil.clean 'touch "$PWD/../filter-ran"; cat' && echo '* filter=evil' > .git/info/attributes`,
      ].join(' && '),
    );
    const before = await sh(sb, REPO_STATE);
    const agentHead = (await sh(sb, 'git rev-parse HEAD')).trim();

    const mark = await run(acts.checkpointWork, { sandbox: ref, runKey, workerId: 'w', baseSha });
    expect(await sh(sb, REPO_STATE)).toBe(before);
    expect(mark.parent).toBe(agentHead);
    expect((await sh(sb, 'ls ..')).includes('filter-ran')).toBe(false);
    const staging = await deps.staging(runKey);
    expect(await staging.revParse(checkpointRef(runKey, 'w'))).toBe(mark.sha);
    const files = (await staging.raw(['ls-tree', '-r', '--name-only', mark.sha])).trim().split('\n');
    expect(files.sort()).toEqual(['src/a.txt', 'src/b.txt', 'src/committed.txt', 'src/new/c.txt']);

    // Nothing changed since: the same checkpoint, nothing new in staging.
    const again = await run(acts.checkpointWork, { sandbox: ref, runKey, workerId: 'w', baseSha, previous: mark });
    expect(again).toEqual(mark);
    // A change: a new checkpoint on the same HEAD.
    await sh(sb, 'echo more >> src/new/c.txt');
    const later = await run(acts.checkpointWork, { sandbox: ref, runKey, workerId: 'w', baseSha, previous: mark });
    expect(later.sha).not.toBe(mark.sha);
    expect(later.parent).toBe(agentHead);

    const fresh = await seeded('fresh');
    await run(acts.restoreCheckpoint, {
      sandbox: fresh.ref,
      runKey,
      workerId: 'w',
      baseSha,
      sha: later.sha,
      branch: 'flotilla/w',
    });
    const contents = 'for f in src/a.txt src/b.txt src/committed.txt src/new/c.txt; do echo "== $f"; cat "$f"; done';
    expect(await sh(fresh.sb, contents)).toBe(await sh(sb, contents));
    expect((await sh(fresh.sb, 'git rev-parse HEAD')).trim()).toBe(agentHead);
    expect((await sh(fresh.sb, 'git symbolic-ref HEAD')).trim()).toBe('refs/heads/flotilla/w');
    // The uncommitted work is uncommitted again, for the agent to go on with.
    expect((await sh(fresh.sb, 'git status --porcelain')).split('\n').filter(Boolean).sort()).toEqual([
      ' M src/a.txt',
      ' M src/b.txt',
      '?? src/new/',
    ]);
  });
});

/** Bytes under `dir`, as `du` counts them. */
const bytesUnder = (dir: string) => Number(execFileSync('du', ['-sb', dir], { encoding: 'utf8' }).split('\t')[0]);

describe('checkpoints in the staging repository', () => {
  it('ten checkpoints of a changing workspace keep it bounded, and none is left once the sandbox is destroyed', async () => {
    const { ref, sb } = await seeded('worker/bounded');
    const staging = await deps.staging(runKey);
    const objects = path.join(staging.dir, 'objects');
    const before = bytesUnder(objects);
    // Incompressible, and different every time: each checkpoint's pack is about 2 MiB.
    const change = 'head -c 2097152 /dev/urandom > src/noise.bin';
    let mark: Awaited<ReturnType<typeof acts.checkpointWork>> | undefined;
    const sizes: number[] = [];
    for (let i = 0; i < 10; i++) {
      await sh(sb, change);
      const next = await run(acts.checkpointWork, {
        sandbox: ref,
        runKey,
        workerId: 'bounded',
        baseSha,
        previous: mark,
      });
      expect(next.sha).not.toBe(mark?.sha);
      mark = next;
      sizes.push(bytesUnder(objects) - before);
    }
    // The newest and the one before it (which the workflow may still hold), never ten.
    expect(Math.max(...sizes)).toBeLessThan(5 * 2097152);
    expect(sizes[9]).toBeGreaterThan(2097152);
    expect(await staging.revParse(checkpointRef(runKey, 'bounded'))).toBe(mark!.sha);

    await run(acts.destroySandbox, ref);
    expect(await staging.revParse(checkpointRef(runKey, 'bounded'))).toBeNull();
    expect(bytesUnder(objects) - before).toBeLessThan(64 * 1024);
    expect(existsSync(path.join(staging.dir, 'flotilla', 'checkpoints', runKey, 'bounded.json'))).toBe(false);
  });

  it('a file rewritten while the checkpoint reads it costs at most that checkpoint: no bus error, no lock left', async () => {
    const { ref, sb } = await seeded('worker/rewrite');
    await sh(sb, 'head -c 8388608 /dev/urandom > src/big.bin');
    // An agent that rewrites the file in place, again and again, while checkpoints are taken.
    const stop = new AbortController();
    const writer = sb.exec('while :; do : > src/big.bin; head -c 8388608 /dev/urandom > src/big.bin; done', {
      timeoutMs: 120_000,
      signal: stop.signal,
    });
    const failures: string[] = [];
    try {
      for (let i = 0; i < 6; i++) {
        await run(acts.checkpointWork, { sandbox: ref, runKey, workerId: 'rewrite', baseSha }).catch((err: Error) =>
          failures.push(err.message),
        );
      }
    } finally {
      stop.abort();
      await writer;
    }
    expect(failures.filter((f) => /Bus error|index\.lock/.test(f))).toEqual([]);
    expect(await sh(sb, 'ls -a "$HOME"')).not.toContain('checkpoint.index.lock');
    const mark = await run(acts.checkpointWork, { sandbox: ref, runKey, workerId: 'rewrite', baseSha });
    const staging = await deps.staging(runKey);
    expect((await staging.raw(['ls-tree', '-r', '--name-only', mark.sha])).split('\n')).toContain('src/big.bin');
  });

  it('a FIFO where a file was and a nested repository without a commit are left out, and the checkpoint says so', async () => {
    const { ref, sb } = await seeded('worker/odd');
    await sh(
      sb,
      [
        'echo data > src/pipe && git add -A && git commit -qm pipe && rm src/pipe && mkfifo src/pipe',
        'mkdir -p vendor/lib && git -C vendor/lib init -q && echo x > vendor/lib/x.txt',
        'echo kept > src/kept.txt',
      ].join(' && '),
    );
    const mark = await run(acts.checkpointWork, { sandbox: ref, runKey, workerId: 'odd', baseSha });
    expect(mark.skipped).toMatch(/^left out 2 path\(s\) git cannot take or that are repositories of their own: /);
    expect(mark.skipped).toContain('src/pipe');
    expect(mark.skipped).toContain('vendor/lib');
    const staging = await deps.staging(runKey);
    const files = (await staging.raw(['ls-tree', '-r', '--name-only', mark.sha])).trim().split('\n');
    expect(files).toContain('src/kept.txt');
    expect(files.filter((f) => f.startsWith('vendor'))).toEqual([]);
    // The FIFO's path keeps what was committed there: the checkpoint leaves it as git had it.
    expect(await staging.raw(['show', `${mark.sha}:src/pipe`])).toBe('data\n');
  });
});

describe('a run', () => {
  it('checkpoints its running agent and leaves no checkpoint behind when it ends', async () => {
    const testEnv = await TestEnv.start();
    const remote = await makeRemote({ 'README.md': 'checkpoints\n' });
    const agent = 'mkdir -p w && for i in 1 2 3 4 5 6; do echo "$i" > w/progress.txt; sleep 0.7; done';
    const end = await testEnv.run(
      shellRequest(remote.url, [subTask('w', agent)], { limits: { checkpointIntervalSeconds: 1 } }),
    );
    expect(end.result?.outcome, end.failureMessage).toBe('pushed');
    expect(end.result!.workers[0].checkpoint, 'a checkpoint was made while the agent ran').toBeDefined();
    const stagingDir = path.join(testEnv.dataDir, 'staging.git');
    const refs = execFileSync('git', ['for-each-ref', '--format=%(refname)', 'refs/flotilla/'], {
      cwd: stagingDir,
      encoding: 'utf8',
    });
    expect(refs).not.toMatch(/\/checkpoints\//);
    expect(
      readdirSync(path.join(stagingDir, 'flotilla', 'checkpoints')).flatMap((k) =>
        readdirSync(path.join(stagingDir, 'flotilla', 'checkpoints', k)),
      ),
    ).toEqual([]);
  });
});
