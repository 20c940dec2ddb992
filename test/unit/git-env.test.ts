/**
 * The environment policies of src/git/env.ts, against real git: what the worker's own
 * environment (a user's ~/.gitconfig, GIT_* variables) can and cannot do to the git Flotilla starts.
 */
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type GitEnv, hostGitEnv, remoteGitEnv, sandboxGitEnv, tokenOrigin } from '../../src/git/env';
import { commitTree, mergeTrees, readBlob } from '../../src/git/merge';
import { git, gitText, runGit } from '../../src/git/spawn';

const saved = { ...process.env };
let dir: string;
beforeEach(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'flotilla-env-'));
});
afterEach(() => {
  for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
  Object.assign(process.env, saved);
  rmSync(dir, { recursive: true, force: true });
});

/**
 * A worker started by a user whose configuration would change merges (a union merge driver for
 * every file, diff3 conflict markers), name another identity, rewrite URLs, and whose
 * environment points git at other repositories and settings.
 */
function hostileUser(): void {
  const home = path.join(dir, 'home');
  const xdg = path.join(home, '.config');
  mkdirSync(path.join(xdg, 'git'), { recursive: true });
  writeFileSync(path.join(home, 'attributes'), '* merge=union\n');
  writeFileSync(
    path.join(home, '.gitconfig'),
    `[user]\n\tname = Hostile\n[merge]\n\tconflictStyle = diff3\n[core]\n\tattributesFile = ${home}/attributes\n` +
      `[url "file:///hostile/"]\n\tinsteadOf = https://github.com/\n`,
  );
  writeFileSync(path.join(xdg, 'git', 'config'), '[alias]\n\tshow = !touch /tmp/flotilla-pwned\n');
  writeFileSync(path.join(xdg, 'git', 'attributes'), '* merge=union\n');
  writeFileSync(path.join(dir, 'system'), '[user]\n\temail = system@hostile\n');
  Object.assign(process.env, {
    HOME: home,
    XDG_CONFIG_HOME: xdg,
    GIT_CONFIG_SYSTEM: path.join(dir, 'system'),
    GIT_CONFIG_PARAMETERS: "'user.name'='Parameters'",
    GIT_CONFIG_COUNT: '1',
    GIT_CONFIG_KEY_0: 'merge.conflictStyle',
    GIT_CONFIG_VALUE_0: 'zdiff3',
    GIT_DIR: path.join(dir, 'elsewhere.git'),
    GIT_ALTERNATE_OBJECT_DIRECTORIES: path.join(dir, 'objects'),
  });
}

async function bareRepo(env: GitEnv): Promise<string> {
  const repo = path.join(dir, 'repo.git');
  await git(['init', '--quiet', '--bare', repo], { env });
  return repo;
}

/** Two commits on a common base that change the same line: a conflict, unless something merges it away. */
async function conflictingPair(repo: string) {
  const opts = { repo, env: hostGitEnv() };
  const commit = async (content: string, parents: string[]) => {
    const blob = (await gitText(['hash-object', '-w', '--stdin'], { ...opts, input: content })).trim();
    const tree = (await gitText(['mktree'], { ...opts, input: `100644 blob ${blob}\tnames.txt\n` })).trim();
    return commitTree(repo, { tree, parents, message: content, at: 1_700_000_000 });
  };
  const base = await commit('one\n', []);
  return { ours: await commit('ours\n', [base]), theirs: await commit('theirs\n', [base]) };
}

describe('the host policy', () => {
  it("keeps a user's ~/.gitconfig, attributes and GIT_* variables out of a merge", async () => {
    hostileUser();
    const repo = await bareRepo(hostGitEnv());
    const { ours, theirs } = await conflictingPair(repo);
    const merged = await mergeTrees(repo, ours, theirs);
    // A union driver would have merged it clean; diff3 or zdiff3 would add the base's section.
    expect(merged).toMatchObject({ clean: false, files: ['names.txt'] });
    const entries = await gitText(['ls-tree', merged.tree], { repo, env: hostGitEnv() });
    const text = (await readBlob(repo, entries.split(/\s+/)[2])).toString();
    expect(text).toMatch(/^<<<<<<< [0-9a-f]{40}\nours\n=======\ntheirs\n>>>>>>> [0-9a-f]{40}\n$/);
    expect(existsSync(path.join(dir, 'elsewhere.git')), 'GIT_DIR of the worker was not used').toBe(false);
  });

  it("reads no configuration but the repository's own", async () => {
    hostileUser();
    const repo = await bareRepo(hostGitEnv());
    const listed = await gitText(['config', '--list', '--show-origin'], { repo, env: hostGitEnv() });
    expect(listed).not.toMatch(/Hostile|Parameters|hostile|diff3|union|alias/);
    expect(listed).toContain('core.attributesfile=/dev/null');
    const r = await runGit(['var', 'GIT_AUTHOR_IDENT'], { repo, env: hostGitEnv() });
    expect(r.stdout.toString(), 'no identity from any user configuration').not.toMatch(/Hostile|Parameters/);
  });

  it('reaches local repositories only', async () => {
    const repo = await bareRepo(hostGitEnv());
    const r = await runGit(['ls-remote', 'https://github.com/temporalio/sdk-typescript.git'], {
      repo,
      env: hostGitEnv(),
    });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain("transport 'https' not allowed");
  });
});

describe('the remote policy', () => {
  const TOKEN = 'flotilla-test-token-0123456789';

  it('sends the token only to an https origin the worker allows', () => {
    process.env.FLOTILLA_GIT_TOKEN = TOKEN;
    process.env.FLOTILLA_GIT_TOKEN_HOSTS = 'github.com, git.example.com:8443';
    const basic = Buffer.from(`x-access-token:${TOKEN}`).toString('base64');
    const carries = (url: string) =>
      Object.values(remoteGitEnv(url)).some((v) => v.includes(basic) || v.includes(TOKEN));
    expect(carries('https://github.com/o/r.git')).toBe(true);
    expect(carries('https://GitHub.com/o/r.git')).toBe(true);
    expect(carries('https://git.example.com:8443/o/r.git')).toBe(true);
    for (const url of [
      'http://github.com/o/r.git',
      'ssh://git@github.com/o/r.git',
      'git@github.com:o/r.git',
      'https://github.com.evil.example/o/r.git',
      'https://git.example.com/o/r.git',
      'https://evil.example/github.com/o/r.git',
      'file:///srv/r.git',
    ])
      expect(carries(url), url).toBe(false);
    expect(tokenOrigin('https://user@github.com/o/r.git')).toBe('https://github.com');
  });

  it('scopes the header to its origin, so a redirect elsewhere does not carry it', async () => {
    process.env.FLOTILLA_GIT_TOKEN = TOKEN;
    process.env.FLOTILLA_GIT_TOKEN_HOSTS = 'github.com';
    const repo = await bareRepo(hostGitEnv());
    const env = remoteGitEnv('https://github.com/o/r.git');
    const header = (url: string) =>
      runGit(['config', '--get-urlmatch', 'http.extraHeader', url], { repo, env }).then((r) => r.stdout.toString());
    expect(await header('https://github.com/o/r.git')).toContain('Authorization: Basic ');
    expect(await header('https://elsewhere.example/o/r.git')).toBe('');
  });

  it("keeps a user's ~/.gitconfig and GIT_* variables out, and passes the operator's transport settings", async () => {
    hostileUser();
    process.env.GIT_SSH_COMMAND = 'ssh -o BatchMode=yes';
    process.env.SSH_AUTH_SOCK = '/run/agent.sock';
    const env = remoteGitEnv('https://github.com/o/r.git');
    expect(env).toMatchObject({ GIT_SSH_COMMAND: 'ssh -o BatchMode=yes', SSH_AUTH_SOCK: '/run/agent.sock' });
    expect(env.HOME).toBe(path.join(dir, 'home'));
    for (const name of ['GIT_DIR', 'GIT_CONFIG_PARAMETERS', 'GIT_CONFIG_SYSTEM', 'GIT_ALTERNATE_OBJECT_DIRECTORIES'])
      expect(env[name], name).toBeUndefined();
    const repo = await bareRepo(hostGitEnv());
    // The user's insteadOf would send the fetch to another repository.
    const url = await gitText(['ls-remote', '--get-url', 'https://github.com/o/r.git'], { repo, env });
    expect(url.trim()).toBe('https://github.com/o/r.git');
  });

  it('refuses transports that run programs', async () => {
    const repo = await bareRepo(hostGitEnv());
    const marker = path.join(dir, 'pwned');
    const r = await runGit(['ls-remote', `ext::sh -c touch% ${marker}`], { repo, env: remoteGitEnv('ext::sh') });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain("transport 'ext' not allowed");
    expect(existsSync(marker)).toBe(false);
  });
});

describe('the sandbox policy', () => {
  it("runs no hook or fsmonitor a workspace's repository names", async () => {
    const work = path.join(dir, 'work');
    const marker = path.join(dir, 'ran');
    const env = { PATH: process.env.PATH!, HOME: dir, ...sandboxGitEnv() };
    const identity = ['-c', 'user.name=Agent', '-c', 'user.email=agent@localhost'];
    await git(['init', '--quiet', work], { env });
    const hook = path.join(work, '.git', 'hooks', 'pre-commit');
    writeFileSync(hook, `#!/bin/sh\necho hook >> ${marker}\n`);
    chmodSync(hook, 0o755);
    await git(['-C', work, 'config', 'core.fsmonitor', `echo fsmonitor >> ${marker}; true`], { env });
    writeFileSync(path.join(work, 'a.txt'), 'a\n');
    await git(['-C', work, 'add', '-A'], { env });
    await git(['-C', work, ...identity, 'commit', '-q', '-m', 'work'], { env });
    await git(['-C', work, 'status', '--porcelain'], { env });
    expect(existsSync(marker)).toBe(false);
    // The same repository without the policy runs both: the test above could fail.
    await git(['-C', work, ...identity, 'commit', '-q', '--allow-empty', '-m', 'again'], {
      env: { PATH: process.env.PATH!, HOME: dir },
    });
    expect(existsSync(marker)).toBe(true);
  });
});
