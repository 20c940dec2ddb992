/**
 * Seeding a workspace from a repository with deep history and many files (through a bundle of
 * the base), and a stale index.lock left by a killed git does not lose work.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestEnv, tempDir } from './helpers';

const FILES = 3000;
const COMMITS = 400;

let env: TestEnv;
let remote: string;
beforeAll(async () => {
  env = await TestEnv.start();
  remote = deepRemote();
});
afterAll(async () => {
  await env?.stop();
});

/** A bare remote of FILES files over COMMITS commits, built with fast-import (seconds, not minutes). */
function deepRemote(): string {
  const root = tempDir('deep');
  const work = path.join(root, 'work');
  mkdirSync(work);
  execFileSync('git', ['init', '-q', '-b', 'main', work]);
  const lines: string[] = [];
  for (let c = 0; c < COMMITS; c++) {
    lines.push('commit refs/heads/main', `committer Test <test@example.com> ${1700000000 + c} +0000`, `data <<EOM\nrevision ${c}\nEOM`);
    const files = c === 0 ? Array.from({ length: FILES }, (_, i) => i) : [c % FILES, (c * 7) % FILES];
    for (const i of files) lines.push(`M 644 inline d${i % 50}/f${i}.txt`, `data <<EOM\nfile ${i} at revision ${c}\nEOM`);
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

function request(id: string, command = inspect(id)) {
  return { objective: 'seed', repo: { url: remote, baseRef: 'main' }, testCmd: 'true', subTasks: [{ id, prompt: 'p', ownedPaths: [id], agent: { kind: 'shell' as const, command } }] };
}

function reported(tail: string | undefined): Record<string, number> {
  const line = /commits=.*$/m.exec(tail ?? '')?.[0] ?? '';
  return Object.fromEntries(line.split(' ').map((kv) => kv.split('=')).map(([k, v]) => [k, Number(v)]));
}

function remoteCommits(): number {
  return Number(execFileSync('git', ['rev-list', '--count', 'main'], { cwd: remote, encoding: 'utf8' }).trim());
}

describe('seeding', () => {
  it('deep history, many files: a bundle seeds the full history and the work lands', async () => {
    const before = remoteCommits();
    const end = await env.run(request('bundled'));
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    const seen = reported(end.result?.workers[0].tail);
    expect(seen).toMatchObject({ commits: before, alternates: 0 });
    expect(seen.files).toBeGreaterThanOrEqual(FILES);
    expect(seen.packs).toBeGreaterThan(0);
    expect(remoteCommits()).toBeGreaterThan(before);
    expect(execFileSync('git', ['show', 'main:bundled/out.txt'], { cwd: remote, encoding: 'utf8' })).toBe('seen\n');
  });

  it('a git the agent killed leaves index.lock behind: its staged work is still collected and pushed', async () => {
    // `git commit -a` holds index.lock while its editor runs; killing it there leaves the lock.
    const killed =
      'mkdir -p locked && echo staged > locked/a.txt && git add -A && ' +
      "(GIT_EDITOR='sleep 60 #' git commit -qa & echo $! > /tmp/git.pid; wait) & " +
      'for i in $(seq 200); do [ -f .git/index.lock ] && break; sleep 0.05; done; kill -9 $(cat /tmp/git.pid); sleep 0.2; ' +
      'test -f .git/index.lock && echo "stale lock left"';
    const end = await env.run(request('locked', killed));
    expect(end.result?.workers[0].tail).toContain('stale lock left');
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(execFileSync('git', ['show', 'main:locked/a.txt'], { cwd: remote, encoding: 'utf8' })).toBe('staged\n');
  });
});
