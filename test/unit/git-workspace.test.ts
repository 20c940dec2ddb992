/**
 * Flotilla's git scripts in a hostile workspace (src/git/workspace.ts), with real bash and real
 * git in a directory of the host standing in for a sandbox (test/e2e/attacks/git.test.ts does the
 * same through real sandboxes and a whole run).
 */
import { spawn } from 'node:child_process';
import {
  appendFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ExecOptions, ExecResult, Sandbox } from '../../src/sandbox/types';
import { Workspace, freshConfig, sh } from '../../src/git/workspace';

let dir: string;
let work: string;
beforeEach(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'flotilla-ws-'));
  work = path.join(dir, 'work');
  mkdirSync(work);
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** `bash -c` in the workspace directory with exactly the given environment (plus PATH and HOME). */
function hostDirectory(pathFirst?: string): Sandbox {
  const unused = () => Promise.reject(new Error('not used here'));
  return {
    id: 'host-directory',
    isolation: 'none',
    workspace: work,
    scratch: dir,
    exec: (command: string, o: ExecOptions) =>
      new Promise<ExecResult>((resolve, reject) => {
        const env = { PATH: [pathFirst, process.env.PATH!].filter(Boolean).join(':'), HOME: dir, ...o.env };
        const child = spawn('bash', ['-c', command], { cwd: work, env, signal: o.signal });
        let output = '';
        child.stdout.on('data', (b: Buffer) => (output += b.toString()));
        child.stderr.on('data', (b: Buffer) => (output += b.toString()));
        child.on('error', (err) => (err.name === 'AbortError' ? undefined : reject(err)));
        child.on('close', (code) =>
          resolve({ exitCode: code ?? -1, output, timedOut: false, aborted: o.signal?.aborted ?? false }),
        );
      }),
    writeFile: unused,
    readFile: unused,
    copyIn: unused,
    copyOut: unused,
  } as Sandbox;
}

const marker = () => path.join(dir, 'ran');

/** A repository whose config and attributes would run programs of the agent's. */
async function plantedRepository(ws: Workspace): Promise<void> {
  await ws.script('git init -q . && git config user.name Agent && git config user.email agent@localhost', 'init');
  const config = path.join(work, '.git', 'config');
  writeFileSync(
    config,
    readFileSync(config, 'utf8') +
      `[filter "evil"]\n\tclean = echo filter >> ${marker()}; cat\n\tsmudge = cat\n` +
      `[core]\n\tfsmonitor = echo fsmonitor >> ${marker()}; true\n` +
      `[alias]\n\tstatus = !echo alias >> ${marker()}\n` +
      `[include]\n\tpath = ${path.join(dir, 'included')}\n`,
  );
  writeFileSync(path.join(dir, 'included'), `[user]\n\tname = Included\n`);
  writeFileSync(path.join(work, '.gitattributes'), '* filter=evil\n');
  const hook = path.join(work, '.git', 'hooks', 'pre-commit');
  writeFileSync(hook, `#!/bin/sh\necho hook >> ${marker()}\n`, { mode: 0o755 });
  writeFileSync(path.join(work, 'a.txt'), 'a\n');
}

describe("Flotilla's git scripts in a workspace", () => {
  it("run none of the agent's filters, hooks, fsmonitor, aliases or includes, and keep its identity", async () => {
    const ws = new Workspace(hostDirectory());
    await plantedRepository(ws);
    const out = await ws.script(
      'git add -A && git commit -q -m work && git status --porcelain && git log -1 --format=%an',
      'commit',
    );
    expect(existsSync(marker()), existsSync(marker()) ? readFileSync(marker(), 'utf8') : '').toBe(false);
    expect(out.trim()).toBe('Agent');
    expect(readFileSync(path.join(work, '.git', 'config'), 'utf8')).not.toMatch(/evil|fsmonitor|alias|include/);
  });

  it("leave a config that is exactly Flotilla's as it is, without running git for it, and keep any identity through a rewrite", async () => {
    // Every git the scripts start, logged.
    const shims = path.join(dir, 'shims');
    mkdirSync(shims);
    const real = (await new Workspace(hostDirectory()).script('command -v git', 'finding git')).trim();
    writeFileSync(
      path.join(shims, 'git'),
      `#!/bin/sh\necho "$*" >> ${sh(path.join(dir, 'git.log'))}\nexec ${real} "$@"\n`,
      {
        mode: 0o755,
      },
    );
    const calls = () => (existsSync(path.join(dir, 'git.log')) ? readFileSync(path.join(dir, 'git.log'), 'utf8') : '');
    const ws = new Workspace(hostDirectory(shims));
    const name = `Dr. "Q" O'Brien \\ tab\tand\nnewline`;
    await ws.script(`git init -q .\n${freshConfig(name, 'q@localhost')}`, 'init', { beside: true });
    const config = path.join(work, '.git', 'config');
    const ours = readFileSync(config, 'utf8');
    expect(await ws.script('git config --get user.name', 'identity', { beside: true })).toBe(`${name}\n`);
    rmSync(path.join(dir, 'git.log'), { force: true });
    await ws.script('true', 'nothing');
    expect(readFileSync(config, 'utf8')).toBe(ours);
    expect(calls()).toBe('');
    // The agent adds to it: the next script rewrites it, keeping the identity and nothing else.
    appendFileSync(config, '[alias]\n\tst = status\n');
    await ws.script('true', 'rewrite');
    expect(calls()).toMatch(/config --file \.git\/config --get user\.name/);
    expect(readFileSync(config, 'utf8')).toBe(ours);
  });

  it('beside a running agent, leave its repository config as it is', async () => {
    const ws = new Workspace(hostDirectory());
    await plantedRepository(ws);
    const before = readFileSync(path.join(work, '.git', 'config'), 'utf8');
    await ws.script('git --git-dir=.git rev-parse --git-dir', 'look', { beside: true });
    expect(readFileSync(path.join(work, '.git', 'config'), 'utf8')).toBe(before);
  });

  it('refuse a .git that is a link to a repository prepared elsewhere', async () => {
    mkdirSync(path.join(dir, 'elsewhere'));
    symlinkSync(path.join(dir, 'elsewhere'), path.join(work, '.git'));
    const r = await new Workspace(hostDirectory()).run('git status');
    expect(r.exitCode).toBe(90);
    expect(r.output).toContain("the workspace's .git is not a directory; refusing to run git in it");
    await expect(new Workspace(hostDirectory()).script('git status', 'looking')).rejects.toThrow(
      /^looking failed \(exit 90\): the workspace's \.git is not a directory/,
    );
  });

  it('stop when the activity is cancelled, with its reason', async () => {
    const stop = new AbortController();
    const ws = new Workspace(hostDirectory(), stop.signal);
    const cancelled = new Error('the activity was cancelled');
    setTimeout(() => stop.abort(cancelled), 100);
    await expect(ws.run('sleep 30')).rejects.toBe(cancelled);
  });

  it('quote any value for bash', async () => {
    const value = `it's "$HOME" \`id\` $(id) \\ ; done`;
    expect((await new Workspace(hostDirectory()).script(`printf %s ${sh(value)}`, 'printing')).toString()).toBe(value);
  });
});
