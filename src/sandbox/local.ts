/**
 * Local sandboxes: one directory per sandbox under the data directory. Commands run under
 * bubblewrap when it works here (read-only system, writable workspace, private /tmp, own pid
 * and network namespaces — the network only through the allowlisting proxy of egress.ts, when
 * asked —, dies with its parent). Without it they run as plain processes, and every report says so.
 */
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { lstat, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { constants as osConstants } from 'node:os';
import path from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import type { Isolation } from '../spec';
import { sandboxRules, withSandboxNet } from './egress';
import type { ExecOptions, ExecResult, Sandbox, SandboxOptions, SandboxProvider } from './types';

/** Output kept in ExecResult.output; more is only streamed through onOutput. */
const OUTPUT_CAP = 1024 * 1024;
const INSIDE_WORKSPACE = '/workspace';
const INSIDE_SCRATCH = '/scratch';
/** Host directories mounted read-only so tools work inside the sandbox. */
const SYSTEM_DIRS = ['/usr', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32', '/etc', '/opt'];

export interface BubblewrapProbe {
  isolation: Isolation;
  /** Why bubblewrap is not used, when it is not. */
  reason?: string;
}

let probed: BubblewrapProbe | undefined;

/** Checks once per process whether bubblewrap can actually start a sandbox here. */
export function probeBubblewrap(): BubblewrapProbe {
  if (probed) return probed;
  if (process.env.FLOTILLA_ISOLATION === 'none') {
    probed = { isolation: 'none', reason: 'FLOTILLA_ISOLATION=none was set' };
    return probed;
  }
  const r = spawnSync('bwrap', ['--ro-bind', '/', '/', '--unshare-pid', '--die-with-parent', 'true'], {
    encoding: 'utf8',
    timeout: 10_000,
  });
  if (r.error) probed = { isolation: 'none', reason: `bubblewrap (bwrap) not found: ${r.error.message}` };
  else if (r.status !== 0) probed = { isolation: 'none', reason: `bubblewrap failed to start: ${r.stderr.trim()}` };
  else probed = { isolation: 'bubblewrap' };
  return probed;
}

export function readOnlyDirs(): string[] {
  const dirs = SYSTEM_DIRS.filter((d) => existsSync(d));
  // Node and tools installed outside /usr (nvm, pyenv) must stay reachable, and so must the
  // agent CLIs Flotilla ships as dependencies (Claude Code, Codex).
  const extra = [
    path.dirname(path.dirname(process.execPath)),
    path.resolve(__dirname, '../../node_modules'),
    ...(process.env.FLOTILLA_SANDBOX_RO_PATHS ?? '').split(':'),
  ];
  for (const d of extra) {
    if (d && existsSync(d) && !dirs.some((s) => d === s || d.startsWith(s + '/'))) dirs.push(d);
  }
  return dirs;
}

export function killTree(pid: number | undefined): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // Already gone.
  }
}

/**
 * Runs argv as its own process group and enforces the deadline and abort signal by killing
 * the whole group, so no grandchild outlives the command.
 */
export function runProcessGroup(argv: string[], cwd: string, options: ExecOptions): Promise<ExecResult> {
  return new Promise((resolve, reject) => {
    if (options.signal?.aborted) {
      resolve({ exitCode: -1, output: '', timedOut: false, aborted: true });
      return;
    }
    const child = spawn(argv[0], argv.slice(1), {
      cwd,
      env: options.env,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    let timedOut = false;
    let aborted = false;
    const onText = (chunk: string) => {
      if (!chunk) return;
      output += chunk;
      if (output.length > OUTPUT_CAP * 2) output = output.slice(-OUTPUT_CAP);
      options.onOutput?.(chunk);
    };
    // One decoder per stream, so a multi-byte character split across two reads is not mangled.
    const decoders = [new StringDecoder('utf8'), new StringDecoder('utf8')];
    child.stdout.on('data', (buf: Buffer) => onText(decoders[0].write(buf)));
    child.stderr.on('data', (buf: Buffer) => onText(decoders[1].write(buf)));
    const timer = setTimeout(() => {
      timedOut = true;
      killTree(child.pid);
    }, options.timeoutMs);
    const onAbort = () => {
      aborted = true;
      killTree(child.pid);
    };
    options.signal?.addEventListener('abort', onAbort, { once: true });
    child.on('error', (err) => {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      reject(err);
    });
    // The command is done: whatever it left running in its group goes with it now, rather than
    // holding our pipes open (and the result back) until the deadline.
    child.on('exit', () => killTree(child.pid));
    child.on('close', (code, sig) => {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      // Whatever the command left running in its group goes with it.
      killTree(child.pid);
      onText(decoders[0].end() + decoders[1].end());
      resolve({
        // Like a shell reports it (137 for SIGKILL), and as bwrap reports its child's death.
        exitCode: code ?? (sig ? 128 + (osConstants.signals[sig] ?? 0) : -1),
        output: output.length > OUTPUT_CAP ? output.slice(-OUTPUT_CAP) : output,
        timedOut,
        aborted,
      });
    });
  });
}

class LocalSandbox implements Sandbox {
  readonly workspace: string;
  readonly scratch: string;

  constructor(
    readonly id: string,
    private readonly root: string,
    readonly isolation: Isolation,
    private readonly options: SandboxOptions,
  ) {
    const isolated = isolation === 'bubblewrap';
    this.workspace = isolated ? INSIDE_WORKSPACE : path.join(root, 'workspace');
    this.scratch = isolated ? INSIDE_SCRATCH : path.join(root, 'scratch');
  }

  private hostPath(inside: string): string {
    const pairs: [string, string][] = [
      [this.workspace, path.join(this.root, 'workspace')],
      [this.scratch, path.join(this.root, 'scratch')],
    ];
    const normalized = path.posix.normalize(inside);
    for (const [sandboxDir, hostDir] of pairs) {
      if (normalized === sandboxDir || normalized.startsWith(sandboxDir + '/')) {
        return path.join(hostDir, normalized.slice(sandboxDir.length));
      }
    }
    throw new Error(`path ${inside} is outside the sandbox's workspace and scratch directories`);
  }

  async exec(command: string, options: ExecOptions): Promise<ExecResult> {
    const cwd = options.cwd ?? this.workspace;
    const env: Record<string, string> = {
      PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin',
      HOME: this.scratch,
      LANG: 'C.UTF-8',
      TMPDIR: '/tmp',
      ...options.env,
    };
    if (this.isolation === 'none') {
      return runProcessGroup(['bash', '-c', command], this.hostPath(cwd), { ...options, env });
    }
    const argv = ['bwrap'];
    // Mounts apply in order: the private /tmp first, so a tool directory that lives under the
    // host's /tmp (a checkout there) is mounted on top of it rather than hidden by it.
    argv.push('--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp');
    for (const dir of readOnlyDirs()) argv.push('--ro-bind', dir, dir);
    argv.push(
      options.readOnlyWorkspace ? '--ro-bind' : '--bind', path.join(this.root, 'workspace'), INSIDE_WORKSPACE,
      '--bind', path.join(this.root, 'scratch'), INSIDE_SCRATCH,
      '--unshare-pid', '--unshare-ipc', '--unshare-uts',
      '--die-with-parent',
      // Run as root, bwrap otherwise keeps every capability, and root could remount the
      // read-only system writable (or mount anything else) from inside.
      '--cap-drop', 'ALL',
      '--chdir', cwd,
    );
    const rules = this.options.network ? sandboxRules(this.options.allowHosts, options.egress) : undefined;
    return withSandboxNet(rules, options.onOutput, (net) =>
      runProcessGroup([...argv, ...net.bwrapArgs, '--', ...net.command(['bash', '-c', command])], this.root, { ...options, env: { ...env, ...net.env } }),
    );
  }

  /**
   * Refuses a path through a symlink: commands control everything under workspace and scratch,
   * and following a link they planted (scratch/prompt.md -> /root/.bashrc) would let our own
   * reads and writes, as the host user, reach anywhere on the host.
   */
  private async checkNoSymlinks(host: string): Promise<void> {
    let at = this.root;
    for (const part of path.relative(this.root, host).split(path.sep)) {
      at = path.join(at, part);
      const st = await lstat(at).catch(() => undefined);
      if (!st) return; // The rest does not exist yet: mkdir/writeFile create real entries.
      if (st.isSymbolicLink()) throw new Error(`path ${at} in the sandbox is a symbolic link; refusing to follow it`);
    }
  }

  async writeFile(inside: string, data: Uint8Array | string): Promise<void> {
    const host = this.hostPath(inside);
    await this.checkNoSymlinks(host);
    await mkdir(path.dirname(host), { recursive: true });
    await writeFile(host, data);
  }

  async readFile(inside: string): Promise<Uint8Array> {
    const host = this.hostPath(inside);
    await this.checkNoSymlinks(host);
    return readFile(host);
  }
}

export class LocalSandboxProvider implements SandboxProvider {
  readonly name = 'local';

  constructor(private readonly baseDir: string) {}

  /** A readable, collision-free directory name for a key such as "run-1/worker/api". */
  dirFor(key: string): string {
    const readable = key.replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 80);
    const hash = createHash('sha256').update(key).digest('hex').slice(0, 10);
    return path.join(this.baseDir, `${readable}-${hash}`);
  }

  private open(key: string, options: SandboxOptions): Sandbox {
    const root = this.dirFor(key);
    return new LocalSandbox(path.basename(root), root, probeBubblewrap().isolation, options);
  }

  async provision(key: string, options: SandboxOptions): Promise<Sandbox> {
    const root = this.dirFor(key);
    await mkdir(path.join(root, 'workspace'), { recursive: true });
    await mkdir(path.join(root, 'scratch'), { recursive: true });
    return this.open(key, options);
  }

  async find(key: string, options: SandboxOptions): Promise<Sandbox | undefined> {
    return existsSync(path.join(this.dirFor(key), 'workspace')) ? this.open(key, options) : undefined;
  }

  async destroy(key: string): Promise<void> {
    await rm(this.dirFor(key), { recursive: true, force: true, maxRetries: 3 });
  }
}
