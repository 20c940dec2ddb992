/**
 * Checkpoints of work in progress, activity by activity in real bubblewrap sandboxes with real
 * git: a checkpoint of an agent's staged, unstaged and untracked changes leaves its HEAD, index
 * and branch as they were (it is taken while the agent runs), and restoring it in a fresh
 * sandbox gives the same files. The workspace is hostile: a filter it defines does not run.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createActivities } from '../../src/activities/index';
import { checkpointRef } from '../../src/git/checkpoint';
import { type ActivityDeps, type SandboxRef, defaultDeps, openSandbox } from '../../src/activities/deps';
import { runRef } from '../../src/git/staging';
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
  for (const key of ['agent', 'fresh'])
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
