/**
 * Seeding a workspace from a repository with deep history and many files: a local sandbox
 * borrows its run's objects, read-only, through git alternates (src/git/run-mirror.ts), gets only a
 * work tree and an index, cannot change that store nor reach another run's objects, and the store
 * is made once for the whole run on a host and goes when the run ends. A stale index.lock left by
 * a killed git does not lose work.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { awaitRun } from '../../src/client/index';
import { acquireRunObjects, removeRunObjects } from '../../src/git/run-mirror';
import { runKeyOf } from '../../src/contracts/names';
import { TestEnv } from '../support/env';
import { waitFor } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { shellRequest, subTask, writeAgent } from '../support/requests';
import { waitForStatus } from '../support/runs';
import { tempDir } from '../support/temp';

const FILES = 3000;
const COMMITS = 400;

let env: TestEnv;
let remote: string;
beforeAll(async () => {
  env = await TestEnv.start();
  remote = deepRemote();
});

/** A bare remote of FILES files over COMMITS commits, built with fast-import (seconds, not minutes). */
function deepRemote(): string {
  const root = tempDir('deep');
  const work = path.join(root, 'work');
  mkdirSync(work);
  execFileSync('git', ['init', '-q', '-b', 'main', work]);
  const lines: string[] = [];
  for (let c = 0; c < COMMITS; c++) {
    lines.push(
      'commit refs/heads/main',
      `committer Test <test@example.com> ${1700000000 + c} +0000`,
      `data <<EOM\nrevision ${c}\nEOM`,
    );
    const files = c === 0 ? Array.from({ length: FILES }, (_, i) => i) : [c % FILES, (c * 7) % FILES];
    for (const i of files)
      lines.push(`M 644 inline d${i % 50}/f${i}.txt`, `data <<EOM\nfile ${i} at revision ${c}\nEOM`);
    lines.push('');
  }
  execFileSync('git', ['fast-import', '--quiet'], { cwd: work, input: lines.join('\n') + '\n' });
  const url = path.join(root, 'remote.git');
  execFileSync('git', ['clone', '-q', '--bare', work, url]);
  return url;
}

/** What the agent reports of its workspace, then its change. */
const inspect = (id: string) =>
  'echo "commits=$(git rev-list --count HEAD) files=$(git ls-files | wc -l) packs=$(find .git/objects/pack -name "*.pack" | wc -l) ' +
  'gitkb=$(du -sk .git | cut -f1) alternates=$(cat .git/objects/info/alternates 2>/dev/null | wc -l)"; ' +
  `mkdir -p ${id} && echo seen > ${id}/out.txt && git add -A && git commit -qm ${id}`;

/** A run of one sub-task, `id`, on the deep remote unless told otherwise. */
const request = (id: string, command = inspect(id), url = remote, testCmd = 'true') =>
  shellRequest(url, [subTask(id, command)], { testCmd });

/** What the data directory holds of run object stores (stores and leftovers). */
function storesLeft(): string[] {
  const dir = path.join(env.dataDir, 'run-objects');
  return existsSync(dir) ? readdirSync(dir).sort() : [];
}

function reported(tail: string | undefined): Record<string, number> {
  const line = /commits=.*$/m.exec(tail ?? '')?.[0] ?? '';
  return Object.fromEntries(
    line
      .split(' ')
      .map((kv) => kv.split('='))
      .map(([k, v]) => [k, Number(v)]),
  );
}

function remoteCommits(): number {
  return Number(execFileSync('git', ['rev-list', '--count', 'main'], { cwd: remote, encoding: 'utf8' }).trim());
}

describe('seeding', () => {
  it('deep history, many files: a checkout through the run store, no history copied into the sandbox, the store gone after', async () => {
    const before = remoteCommits();
    // The test sandbox's checkout of the integrated commit borrows the same store: its own
    // objects are only what the run added (the bundle of the merge, kept as a small pack).
    const testCmd =
      'echo "commits=$(git rev-list --count HEAD) objkb=$(du -sk .git/objects | cut -f1) alternates=$(cat .git/objects/info/alternates | wc -l)"';
    const end = await env.run(request('shared', inspect('shared'), remote, testCmd));
    expect(end.failureMessage, end.result?.workers[0].tail).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    const seen = reported(end.result?.workers[0].tail);
    // The whole history is readable (through alternates), none of it is in the sandbox's .git.
    expect(seen).toMatchObject({ commits: before, alternates: 1, packs: 0 });
    expect(seen.files).toBeGreaterThanOrEqual(FILES);
    // The index and the agent's own commit: far less than the history's pack.
    expect(seen.gitkb).toBeLessThan(1024);
    const tested = reported(end.result?.test?.tail);
    expect(tested).toMatchObject({ alternates: 1 });
    const historyKb = Number(
      execFileSync('du', ['-sk', path.join(remote, 'objects')], { encoding: 'utf8' }).split('\t')[0],
    );
    expect(tested.objkb * 4, `history ${historyKb} KiB`).toBeLessThan(historyKb);
    expect(tested.commits).toBeGreaterThan(before);
    expect(remoteCommits()).toBeGreaterThan(before);
    expect(execFileSync('git', ['show', 'main:shared/out.txt'], { cwd: remote, encoding: 'utf8' })).toBe('seen\n');
    expect(storesLeft()).toEqual([]);
    expect(env.sandboxesLeft()).toEqual([]);
  });

  it('an agent cannot change its run store: writing objects, packs or alternates there fails, and its work still lands', async () => {
    const attack = [
      'mounted=$(ls /flotilla/objects/pack | grep -c "\\.pack$")',
      'echo "mounted=$mounted"',
      'blob=$(echo planted | git hash-object --stdin)',
      // A new object straight into the store, through git and by hand.
      'GIT_OBJECT_DIRECTORY=/flotilla/objects git hash-object -w --stdin <<< planted >/dev/null 2>&1 && echo "WROTE object via git"',
      'mkdir -p /flotilla/objects/${blob:0:2} 2>/dev/null && echo x > /flotilla/objects/${blob:0:2}/${blob:2} 2>/dev/null && echo "WROTE object file"',
      'echo x > /flotilla/objects/pack/evil.pack 2>/dev/null && echo "WROTE pack"',
      'rm -f /flotilla/objects/pack/*.pack 2>/dev/null; [ "$(ls /flotilla/objects/pack | grep -c "\\.pack$")" = "$mounted" ] || echo "REMOVED pack"',
      'echo /tmp > /flotilla/objects/info/alternates 2>/dev/null && echo "WROTE store alternates"',
      'chmod -R a+w /flotilla/objects 2>/dev/null && echo "CHMOD store"',
      'mount -o remount,rw /flotilla/objects 2>/dev/null && echo "REMOUNTED store"',
      // And its own alternates, which collectWork puts back.
      'echo /nowhere > .git/objects/info/alternates',
      'mkdir -p ro && echo done > ro/out.txt && git add -A && git commit -qm ro 2>/dev/null; echo attack-over',
    ].join('\n');
    const end = await env.run(request('ro', attack));
    const tail = end.result?.workers[0].tail ?? '';
    expect(tail).toContain('attack-over');
    expect(Number(/mounted=(\d+)/.exec(tail)?.[1])).toBeGreaterThan(0);
    expect(tail).not.toMatch(/WROTE|REMOVED|CHMOD|REMOUNTED/);
    expect(end.failureMessage, tail).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(execFileSync('git', ['show', 'main:ro/out.txt'], { cwd: remote, encoding: 'utf8' })).toBe('done\n');
    expect(storesLeft()).toEqual([]);
  });

  it("another run's objects are out of reach: neither its live store nor the staging repository", async () => {
    // Run A, on its own repository, stops at a question: its sandbox and its store stay.
    const other = await makeRemote({ 'secret.txt': 'only run A may read this\n' });
    const otherBase = (await other.head())!;
    const a = await env.start(request('waiting', `echo '::flotilla {"question": "hold on?"}'`, other.url));
    await waitForStatus(a, 'run A to wait for an answer', (s) => s.workers[0]?.state === 'suspended');
    const runKeyA = runKeyOf(a.workflowId, (await a.describe()).runId);
    const storeA = path.join(env.dataDir, 'run-objects', `${runKeyA}.git`);
    expect(existsSync(path.join(storeA, 'objects'))).toBe(true);
    execFileSync('git', ['-C', storeA, 'cat-file', '-e', otherBase]);

    const tries = [
      `git cat-file -e ${otherBase} 2>/dev/null && echo "REACHED through its own alternates"`,
      ...[path.join(storeA, 'objects'), path.join(env.dataDir, 'staging.git', 'objects'), '/flotilla/objects'].map(
        (dir) =>
          `echo ${dir} > .git/objects/info/alternates; git cat-file -e ${otherBase} 2>/dev/null && echo "REACHED through ${dir}"`,
      ),
      `ls ${env.dataDir} >/dev/null 2>&1 && echo "LISTED the data directory"`,
      'mkdir -p b && echo mine > b/out.txt && git add -A && git commit -qm b; echo tries-over',
    ].join('\n');
    try {
      const end = await env.run(request('b', tries));
      const tail = end.result?.workers[0].tail ?? '';
      expect(tail).toContain('tries-over');
      expect(tail).not.toMatch(/REACHED|LISTED/);
      expect(end.result?.outcome, tail).toBe('pushed');
      // Run A's store is still there for run A: B's run ending took only its own.
      expect(existsSync(path.join(storeA, 'objects'))).toBe(true);
      expect(storesLeft()).toEqual([`${runKeyA}.git`]);
    } finally {
      await a.cancel();
      await awaitRun(a).catch(() => undefined);
    }
    // Cancelled: its sandboxes are destroyed, and its store goes as the run ends.
    await waitFor('run A to close', async () => ((await a.describe()).status.name !== 'RUNNING' ? true : undefined));
    expect(storesLeft()).toEqual([]);
  });

  it('the store is made once for workers seeding at once, readable by all and writable by none, and goes when removed', async () => {
    const dataDir = tempDir('stores');
    const staging = path.join(dataDir, 'staging.git');
    const runKey = 'concurrent-1234abcd';
    const baseRef = `refs/flotilla/${runKey}/base`;
    // Private, as StagingRepo makes it: the store must be readable all the same.
    execFileSync('git', ['init', '-q', '--bare', '--shared=0600', staging]);
    execFileSync('git', ['-C', staging, 'fetch', '-q', remote, `main:${baseRef}`]);
    const base = execFileSync('git', ['-C', staging, 'rev-parse', baseRef], { encoding: 'utf8' }).trim();
    // What a worker killed while making the store leaves behind, and the user list an earlier release kept.
    mkdirSync(path.join(dataDir, 'run-objects', `${runKey}.git.new-x1y2z3`), { recursive: true });
    const keys = Array.from({ length: 6 }, (_, i) => `${runKey}/worker/w${i}`);
    const dirs = await Promise.all(keys.map((k) => acquireRunObjects(dataDir, k, staging, baseRef)));
    expect(new Set(dirs).size).toBe(1);
    const left = () => readdirSync(path.join(dataDir, 'run-objects')).sort();
    expect(left()).toEqual([`${runKey}.git`]);
    const store = path.dirname(dirs[0]);
    expect(execFileSync('git', ['-C', store, 'rev-list', '--count', base], { encoding: 'utf8' }).trim()).toBe(
      String(remoteCommits()),
    );
    for (const sub of ['', 'pack']) {
      const dir = path.join(dirs[0], sub);
      expect(statSync(dir).mode & 0o777, dir).toBe(0o755);
      for (const f of readdirSync(dir).filter((n) => statSync(path.join(dir, n)).isFile())) {
        const mode = statSync(path.join(dir, f)).mode & 0o777;
        expect(mode & 0o004, f).toBe(0o004);
        expect(mode & 0o022, f).toBe(0);
      }
    }
    // A later sandbox of the run finds it as it is: not made again.
    const pack = readdirSync(path.join(dirs[0], 'pack')).find((f) => f.endsWith('.pack'))!;
    const inode = statSync(path.join(dirs[0], 'pack', pack)).ino;
    await acquireRunObjects(dataDir, `${runKey}/integration`, staging, baseRef);
    expect(statSync(path.join(dirs[0], 'pack', pack)).ino).toBe(inode);
    mkdirSync(path.join(dataDir, 'run-objects', `${runKey}.users`));
    await Promise.all([removeRunObjects(dataDir, runKey), removeRunObjects(dataDir, 'never-made-1234abcd')]);
    expect(left()).toEqual([]);
  });

  it('one store for the whole run on a host: a sub-task that starts after another has ended reads the same one', async () => {
    // The agent reports which pack it reads: its sandbox's own link to the store's pack, whose
    // inode and time of writing are the store file's (a store made again has a pack of its own).
    const packInode = 'echo "pack=$(stat -c %i@%Y.%y /flotilla/objects/pack/*.pack | tr " " _)"';
    const end = await env.run(
      shellRequest(remote, [
        subTask('first', `${packInode}; ${writeAgent('first/a.txt', 'a')}`),
        subTask('then', `${packInode}; ${writeAgent('then/b.txt', 'b')}`, { dependsOn: ['first'] }),
      ]),
    );
    expect(end.failureMessage).toBeUndefined();
    const packs = end.result!.workers.map((w) => /pack=(\S+)/.exec(w.tail ?? '')?.[1]);
    expect(packs[0]).toMatch(/^\d+@\d+\./);
    expect(packs[1]).toBe(packs[0]);
    expect(storesLeft()).toEqual([]);
  });

  it('a git the agent killed leaves index.lock behind: its staged work is still collected and pushed', async () => {
    // `git commit -a` holds index.lock while its editor runs; killing it there leaves the lock.
    const killed =
      'mkdir -p locked && echo staged > locked/a.txt && git add -A && ' +
      "(GIT_EDITOR='sleep 60 #' git commit -qa & echo $! > /tmp/git.pid; wait) & " +
      // Both the lock and the pid file: git may take the lock before the subshell has written its pid.
      'for i in $(seq 200); do [ -f .git/index.lock ] && [ -s /tmp/git.pid ] && break; sleep 0.05; done; kill -9 $(cat /tmp/git.pid); sleep 0.2; ' +
      'test -f .git/index.lock && echo "stale lock left"';
    const end = await env.run(request('locked', killed));
    expect(end.result?.workers[0].tail).toContain('stale lock left');
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(execFileSync('git', ['show', 'main:locked/a.txt'], { cwd: remote, encoding: 'utf8' })).toBe('staged\n');
  });
});
