/**
 * The spawner (src/spawner/): programs it starts behave as those Node starts (output, stdin,
 * exit codes and signals, a program that cannot start, kills before and after the pid is known,
 * process groups), they are not children of this process, and the spawner does not outlive it.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  type Program,
  type ProgramOptions,
  readableOf,
  startProgram,
  startSpawner,
  writableOf,
} from '../../src/spawner';

interface Ended {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

function ended(p: Program): Promise<Ended> {
  const out = ['', ''];
  [1, 2].forEach((fd) => readableOf(p, fd).on('data', (b: Buffer) => (out[fd - 1] += b.toString())));
  return new Promise((resolve, reject) => {
    p.on('error', reject);
    p.on('close', (code: number | null, signal: NodeJS.Signals | null) =>
      resolve({ code, signal, stdout: out[0], stderr: out[1] }),
    );
  });
}

const piped: ProgramOptions = { stdio: ['pipe', 'pipe', 'pipe'] };

function run(file: string, args: string[], input?: string, options = piped): Promise<Ended> {
  const p = startProgram(file, args, options);
  writableOf(p, 0).end(input);
  return ended(p);
}

/** Running: a process that ended but was not reaped yet (a zombie) is not. */
const alive = (pid: number) => {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
};

/** The spawners process `parent` started: pid, and the directory of its socket. */
function spawnersOf(parent: number): { pid: number; sockDir: string }[] {
  return execFileSync('ps', ['-o', 'pid=,args=', '--ppid', String(parent)])
    .toString()
    .split('\n')
    .filter((l) => l.includes('flotilla-spawner-'))
    .map((l) => {
      const [pid, ...args] = l.trim().split(/\s+/);
      return { pid: Number(pid), sockDir: path.dirname(args[args.length - 1]) };
    });
}

describe('the spawner', () => {
  beforeAll(async () => expect(await startSpawner()).toBeUndefined());

  it('starts programs that are not children of this process, with their output, stdin and exit code', async () => {
    const r = await run('sh', ['-c', 'echo "parent $PPID"; cat; echo oops >&2; exit 3'], 'fed on stdin');
    expect(r).toMatchObject({ code: 3, signal: null, stderr: 'oops\n' });
    const [, parent] = /^parent (\d+)\n/.exec(r.stdout)!;
    expect(Number(parent)).not.toBe(process.pid);
    expect(r.stdout).toMatch(/fed on stdin$/);
    // Output larger than any socket buffer arrives whole.
    expect((await run('head', ['-c', '5000000', '/dev/zero'])).stdout.length).toBe(5_000_000);
    // The environment and working directory are the ones asked for.
    const env = await run('sh', ['-c', 'echo "$FOO $(pwd)"'], undefined, {
      ...piped,
      env: { PATH: process.env.PATH, FOO: 'bar' },
      cwd: '/tmp',
    });
    expect(env.stdout).toBe('bar /tmp\n');
  });

  it("gives programs blocking stdio, as Node's pipes are: a read waits for what is written later", async () => {
    // As bwrap reads its --block-fd: one byte, which comes only once the program has started.
    const p = startProgram('sh', ['-c', 'dd bs=1 count=1 <&5 2>/dev/null; echo " read"'], {
      stdio: ['ignore', 'pipe', 'pipe', 'ignore', 'ignore', 'pipe'],
    });
    const done = ended(p);
    await new Promise((r) => p.once('spawn', r));
    // Whatever the program does meanwhile, it has not read anything yet.
    await new Promise((r) => setTimeout(r, 200));
    writableOf(p, 5).end('x');
    expect(await done).toMatchObject({ code: 0, stdout: 'x read\n' });
    // And a slow reader gets everything a program writes, past any socket buffer.
    const slow = startProgram('sh', ['-c', 'head -c 3000000 /dev/zero; echo " rc=$?"'], piped);
    writableOf(slow, 0).end();
    readableOf(slow, 1).pause();
    await new Promise((r) => setTimeout(r, 300));
    readableOf(slow, 1).resume();
    expect((await ended(slow)).stdout).toMatch(/ rc=0\n$/);
  });

  it('reports a program that cannot start as Node does', async () => {
    await expect(run('flotilla-no-such-program', [])).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('kills a program asked to before its pid is known, and one that runs', async () => {
    const early = startProgram('sleep', ['30'], piped);
    expect(early.pid).toBeUndefined();
    early.kill('SIGKILL');
    expect(await ended(early)).toMatchObject({ code: null, signal: 'SIGKILL' });
    const later = startProgram('sleep', ['30'], piped);
    await new Promise((r) => later.once('spawn', r));
    expect(alive(later.pid!)).toBe(true);
    later.kill('SIGTERM');
    expect(await ended(later)).toMatchObject({ signal: 'SIGTERM' });
    expect(later.kill()).toBe(false);
  });

  it('starts a detached program as a process group this process can kill whole', async () => {
    const p = startProgram('sh', ['-c', 'sleep 30 & echo $!; wait'], { ...piped, detached: true });
    const done = ended(p);
    // Its output may come before its pid does: they take different ways.
    const [grandchild] = await Promise.all([
      new Promise<number>((resolve) =>
        readableOf(p, 1).once('data', (b: Buffer) => resolve(Number(b.toString().trim()))),
      ),
      new Promise((r) => p.once('spawn', r)),
    ]);
    process.kill(-p.pid!, 'SIGKILL');
    expect((await done).signal).toBe('SIGKILL');
    await expect.poll(() => alive(grandchild)).toBe(false);
  });

  it('goes with the process that started it, even killed with SIGKILL', async () => {
    const script = `require(${JSON.stringify(path.resolve('src/spawner'))}).startSpawner().then(() => console.log('up'))`;
    const owner = spawn(process.execPath, ['--import', 'tsx', '-e', `${script}; setInterval(() => {}, 1000)`], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    await new Promise((r) => owner.stdout.once('data', r));
    const [{ pid: spawnerPid, sockDir }] = spawnersOf(owner.pid!);
    expect(existsSync(sockDir)).toBe(true);
    owner.kill('SIGKILL');
    await expect.poll(() => alive(spawnerPid), { timeout: 10_000 }).toBe(false);
    expect(existsSync(sockDir)).toBe(false);
  });

  // Last: it leaves this process without a spawner.
  it('reports its programs killed when it dies, refuses one asked for meanwhile, and starts later ones without it', async () => {
    const running = startProgram('sleep', ['30'], piped);
    await new Promise((r) => running.once('spawn', r));
    const [spawner] = spawnersOf(process.pid);
    process.kill(spawner.pid, 'SIGKILL');
    // Dead, and this process not told yet (its event loop has not run): a program asked for now
    // is refused with a reason, and nothing throws.
    while (alive(spawner.pid));
    await expect(run('true', [])).rejects.toThrow('the spawner exited');
    expect(await ended(running)).toMatchObject({ code: null, signal: 'SIGKILL' });
    await expect.poll(() => alive(running.pid!)).toBe(false);
    const after = await run('sh', ['-c', 'echo $PPID']);
    expect(Number(after.stdout)).toBe(process.pid);
  });
});
