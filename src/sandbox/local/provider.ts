/**
 * Local sandboxes: one directory per sandbox under the data directory, whose commands run under
 * bubblewrap as an unprivileged host uid of their own (read-only system, writable workspace, a
 * bounded private /tmp, own pid and network namespaces (the network only through the allowlisting proxy of egress.ts,
 * when asked), no /sys, read-only /proc/sys,
 * dies with its parent), inside memory and process cgroups, with limits on disk bytes and files.
 * Its run's git objects, when the worker lends them (objectsFor), are mounted read-only.
 *
 * Isolation fails closed: without a working bubblewrap, provisioning refuses (IsolationUnavailable)
 * unless the worker was started with FLOTILLA_ISOLATION=none, in which case commands run as plain
 * processes and every report says so.
 */
import { spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import {
  type FileHandle,
  chmod,
  chown,
  lstat,
  mkdir,
  open,
  readFile,
  readdir,
  rm,
  rmdir,
  writeFile,
} from 'node:fs/promises';
import { constants as fsConstants } from 'node:fs';
import { constants as osConstants } from 'node:os';
import path from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import { setting } from '../../config/variables';
import { permanent } from '../../contracts/failures';
import { SANDBOX_OBJECTS } from '../../git/run-mirror';
import type { Isolation } from '../../contracts/reports';
import type { SandboxLimitsRequest } from '../../contracts/request';
import { type SandboxNet, sandboxRules, withSandboxNet } from '../egress/proxy';
import type { ExecOptions, ExecResult, Sandbox, SandboxOptions, SandboxProvider } from '../types';

/** Output kept in ExecResult.output; more is only streamed through onOutput. */
const OUTPUT_CAP = 1024 * 1024;
const INSIDE_WORKSPACE = '/workspace';
const INSIDE_SCRATCH = '/scratch';
/** Host directories mounted read-only so tools work inside the sandbox. */
const SYSTEM_DIRS = ['/usr', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32', '/etc', '/opt'];
const MIB = 1024 * 1024;
/** Where an exec's own mount namespace puts the sandbox's directories for bwrap to pick up. */
const STAGE = '/run/flotilla-sandbox';
const CGROUP_ROOT = '/sys/fs/cgroup';
/** How often the disk is counted while a command runs, so a long one cannot fill it until it ends. */
const DISK_CHECK_MS = 5_000;
/** Exit status of a process killed by SIGXFSZ: it wrote past the file size limit. */
const EXIT_FILE_TOO_LARGE = 128 + osConstants.signals.SIGXFSZ;

export type SandboxLimits = Required<SandboxLimitsRequest>;

/** What a sandbox gets when the request does not say. */
export const DEFAULT_LIMITS: SandboxLimits = {
  tmpMiB: 256,
  workspaceMiB: 4096,
  workspaceFiles: 100_000,
  processes: 1024,
  memoryMiB: 4096,
};
/** The most a request may ask for, unless the worker is configured otherwise. */
export const MAX_LIMITS: SandboxLimits = {
  tmpMiB: 4096,
  workspaceMiB: 65_536,
  workspaceFiles: 2_000_000,
  processes: 8192,
  memoryMiB: 32_768,
};

export interface LocalProviderOptions {
  /** The bubblewrap binary. Default: $FLOTILLA_BWRAP, else "bwrap" on the PATH. */
  bwrap?: string;
  /** true runs commands as plain processes, unisolated: the explicit opt-out. Default: FLOTILLA_ISOLATION=none. */
  noIsolation?: boolean;
  /** The worker's maximum for each limit. Default: $FLOTILLA_SANDBOX_MAX_LIMITS, else MAX_LIMITS. */
  maxLimits?: Partial<SandboxLimits>;
  /** Host uids handed out to sandboxes, one per sandbox key. Default: $FLOTILLA_SANDBOX_UIDS ("200000-265535"). */
  uids?: { first: number; count: number };
  /**
   * The host directory of git objects a key's sandbox may read (its run's object store, see
   * git/run-mirror.ts), mounted read-only at SANDBOX_OBJECTS; undefined for none. Asked at every
   * command, so a store made after provisioning is seen.
   */
  objectsFor?: (key: string) => string | undefined;
}

export interface BubblewrapProbe {
  isolation: Isolation;
  /** Why bubblewrap is not used, when it is not. */
  reason?: string;
}

/** Commands run as root before the sandbox starts, so its uid can reach directories root keeps private. */
const asRoot = () => process.getuid?.() === 0;

const probes = new Map<string, BubblewrapProbe>();

/**
 * Checks once per process and binary whether bubblewrap can start a sandbox here the way exec
 * does: as an unprivileged uid in its own user namespace (root hands it down with setpriv).
 * Whether to run without it is not its question: that is the worker's explicit opt-out.
 */
export function probeBubblewrap(bwrap = defaultBwrap()): BubblewrapProbe {
  const known = probes.get(bwrap);
  if (known) return known;
  const uid = String(setting('FLOTILLA_SANDBOX_UIDS').first);
  const inner = [
    bwrap,
    '--unshare-user',
    '--disable-userns',
    '--unshare-pid',
    '--die-with-parent',
    '--ro-bind',
    '/',
    '/',
    '--proc',
    '/proc',
    'true',
  ];
  // As root, also what the prelude does: a bind mount in a mount namespace of its own (a
  // container without CAP_SYS_ADMIN cannot), then handing bwrap down to a sandbox uid.
  const asSandboxUid = ['setpriv', '--reuid', uid, '--regid', uid, '--clear-groups', '--no-new-privs', ...inner];
  const prelude = 'PATH=/usr/sbin:/usr/bin:/sbin:/bin mount --bind /usr /usr && exec "$@"';
  const argv = asRoot()
    ? [
        'unshare',
        '--mount',
        '--propagation',
        'private',
        '--',
        '/bin/sh',
        '-c',
        prelude,
        'flotilla-probe',
        ...asSandboxUid,
      ]
    : inner;
  const r = spawnSync(argv[0], argv.slice(1), { encoding: 'utf8', timeout: 10_000 });
  let probe: BubblewrapProbe;
  if (r.error) probe = { isolation: 'none', reason: `cannot start ${argv[0]}: ${r.error.message}` };
  else if (r.status !== 0)
    probe = {
      isolation: 'none',
      reason: `bubblewrap (${bwrap}) failed to start a sandbox: ${(r.stderr || `exit ${r.status}`).trim()}`,
    };
  else probe = { isolation: 'bubblewrap' };
  probes.set(bwrap, probe);
  return probe;
}

function defaultBwrap(): string {
  return setting('FLOTILLA_BWRAP');
}

export function readOnlyDirs(): string[] {
  const dirs = SYSTEM_DIRS.filter((d) => existsSync(d));
  // Node and tools installed outside /usr (nvm, pyenv) must stay reachable, and so must the
  // agent CLIs Flotilla ships as dependencies (Claude Code, Codex).
  const extra = [
    path.dirname(path.dirname(process.execPath)),
    path.resolve(__dirname, '../../../node_modules'),
    ...setting('FLOTILLA_SANDBOX_RO_PATHS'),
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
export function runProcessGroup(
  argv: string[],
  cwd: string,
  options: ExecOptions,
  /** When given, the command gets a pipe on fd 3 whose text goes here (bwrap's wrapper reports through it). */
  onReport?: (text: string) => void,
): Promise<ExecResult> {
  return new Promise((resolve, reject) => {
    if (options.signal?.aborted) {
      resolve({ exitCode: -1, output: '', timedOut: false, aborted: true });
      return;
    }
    const child = spawn(argv[0], argv.slice(1), {
      cwd,
      env: options.env,
      detached: true,
      stdio: onReport ? ['ignore', 'pipe', 'pipe', 'pipe'] : ['ignore', 'pipe', 'pipe'],
    });
    if (onReport) child.stdio[3]!.on('data', (buf: Buffer) => onReport(buf.toString('utf8')));
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
    child.stdout!.on('data', (buf: Buffer) => onText(decoders[0].write(buf)));
    child.stderr!.on('data', (buf: Buffer) => onText(decoders[1].write(buf)));
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

/** Memory and process cgroups (v1) for one command, when this host lets us make them. */
class CommandCgroups {
  private constructor(private readonly dirs: { memory?: string; pids?: string }) {}

  /** Undefined when cgroups are not writable here; rlimits then stand in where they can. */
  static async create(name: string, limits: SandboxLimits): Promise<CommandCgroups | undefined> {
    if (!asRoot()) return undefined;
    // Only where both v1 controllers are mounted: under `ip netns exec` /sys is a fresh sysfs with
    // an empty /sys/fs/cgroup, and a recursive mkdir there never returns (Node 20).
    if (!['memory', 'pids'].every((c) => existsSync(path.join(CGROUP_ROOT, c, 'cgroup.procs')))) return undefined;
    const memory = path.join(CGROUP_ROOT, 'memory/flotilla', name);
    const pids = path.join(CGROUP_ROOT, 'pids/flotilla', name);
    try {
      await mkdir(memory, { recursive: true });
      await mkdir(pids, { recursive: true });
      const bytes = String(limits.memoryMiB * MIB);
      await writeFile(path.join(memory, 'memory.limit_in_bytes'), bytes);
      // Swap counts too where the kernel accounts it, or a hog would just swap the host.
      await writeFile(path.join(memory, 'memory.memsw.limit_in_bytes'), bytes).catch(() => undefined);
      await writeFile(path.join(pids, 'pids.max'), String(limits.processes));
      return new CommandCgroups({ memory, pids });
    } catch {
      await new CommandCgroups({ memory, pids }).remove();
      return undefined;
    }
  }

  /**
   * Removes the sandbox's cgroups a worker that died mid-command left behind (empty once its
   * processes died with it; rmdir refuses any that is not).
   */
  static async removeLeftovers(sandboxId: string): Promise<void> {
    for (const controller of ['memory', 'pids']) {
      const parent = path.join(CGROUP_ROOT, controller, 'flotilla');
      const names = await readdir(parent).catch(() => []);
      for (const name of names.filter((n) => n.startsWith(`${sandboxId}-`)))
        await rmdir(path.join(parent, name)).catch(() => undefined);
    }
  }

  /** The cgroup.procs files the command's first process joins before anything else runs. */
  procsFiles(): string[] {
    return [this.dirs.memory, this.dirs.pids].map((d) => path.join(d!, 'cgroup.procs'));
  }

  /** What the kernel stopped, in words, when it did. */
  async hit(limits: SandboxLimits): Promise<string | undefined> {
    const read = (f: string) => readFile(f, 'utf8').catch(() => '');
    const oomKills = /^oom_kill (\d+)$/m.exec(await read(path.join(this.dirs.memory!, 'memory.oom_control')));
    if (oomKills && Number(oomKills[1]) > 0)
      return `the sandbox ran out of memory (limit ${limits.memoryMiB} MiB) and the kernel killed its process`;
    const refusedForks = /^max (\d+)$/m.exec(await read(path.join(this.dirs.pids!, 'pids.events')));
    if (refusedForks && Number(refusedForks[1]) > 0)
      return `the sandbox reached its process limit (${limits.processes} processes at once)`;
    return undefined;
  }

  /** Removes the cgroups once the kernel has finished reaping the command's processes. */
  async remove(): Promise<void> {
    for (const dir of [this.dirs.memory, this.dirs.pids]) {
      if (!dir) continue;
      for (let attempt = 0; attempt < 40; attempt++) {
        const err = await rmdir(dir).then(
          () => undefined,
          (e: NodeJS.ErrnoException) => e,
        );
        if (!err || err.code === 'ENOENT') break;
        if (err.code !== 'EBUSY') break;
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  }
}

/**
 * Runs as root in the command's own mount namespace, before the sandbox starts: joins the
 * cgroups, then bind-mounts the sandbox's directories (under the worker's private data directory,
 * which the sandbox uid cannot traverse) onto the stage, where bwrap, already unprivileged, finds
 * them. bwrap's --bind-fd does not help here: it resolves the fd back to a path.
 */
const PRELUDE = `set -e
procs=$1 workspace=$2 scratch=$3 passwd=$4 stage=$5 objects=$6
shift 6
for f in $procs; do echo $$ > "$f"; done
PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount --bind "$workspace" "$stage/workspace"
mount --bind "$scratch" "$stage/scratch"
mount --bind "$passwd" "$stage/passwd"
if [ -n "$objects" ]; then mount --bind -o ro "$objects" "$stage/objects"; fi
exec "$@"`;

/**
 * Sets the command's rlimits ($1, options of bash's ulimit, which lowers soft and hard limit
 * alike: nothing in the sandbox may raise them again), runs it, then reports how full /tmp is
 * on fd 3, which the command itself does not get. The tmpfs is gone once bwrap exits, so this is
 * the only moment to look. Setting the limits here rather than with prlimit before bwrap saves a
 * process per command.
 */
const WRAPPER = 'ulimit $1 || exit 125; shift; "$@" 3>&-; rc=$?; df -Pk /tmp >&3 2>/dev/null; exit $rc';

/**
 * The empty mount points of the stage, made on first use by each worker process (/run does not
 * survive a reboot; the sandboxes do).
 */
let staged: Promise<void> | undefined;
function ensureStage(): Promise<void> {
  staged ??= (async () => {
    await mkdir(path.join(STAGE, 'workspace'), { recursive: true, mode: 0o755 });
    await mkdir(path.join(STAGE, 'scratch'), { recursive: true, mode: 0o755 });
    await mkdir(path.join(STAGE, 'objects'), { recursive: true, mode: 0o755 });
    await writeFile(path.join(STAGE, 'passwd'), '', { flag: 'a' });
  })().catch((err) => {
    staged = undefined;
    throw err;
  });
  return staged;
}

/**
 * Counts entries (and the bytes of regular files) below the given directories, not following
 * symlinks, with one `find` whose listing is read as it comes and cut off at `stopAt` entries,
 * so a flood of millions does not hold the worker up for minutes to say so. A walk in this
 * process cost the worker ~15 µs of CPU per file at every command (0.3 s for a 20,000-file
 * checkout); find does it in a tenth of that, and reaches entries nested deeper than a path can be long.
 */
const MEASURE_TIMEOUT_MS = 120_000;

function measure(dirs: string[], stopAt: number): Promise<{ bytes: number; files: number }> {
  return new Promise((resolve, reject) => {
    const find = spawn('find', [...dirs, '-mindepth', '1', '-printf', '%y %s\\n'], {
      env: { PATH: '/usr/bin:/bin', LC_ALL: 'C' },
      stdio: ['ignore', 'pipe', 'ignore'],
      timeout: MEASURE_TIMEOUT_MS,
      killSignal: 'SIGKILL',
    });
    const total = { bytes: 0, files: 0 };
    let partial = '';
    let enough = false;
    find.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      const lines = (partial + chunk).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) {
        if (enough) return;
        total.files++;
        if (line.startsWith('f ')) total.bytes += Number(line.slice(2));
        if (total.files >= stopAt) {
          enough = true;
          find.kill('SIGKILL');
        }
      }
    });
    find.on('error', (err) => reject(new Error(`counting the sandbox's files failed: ${err.message}`)));
    // find exits 1 when an entry vanished under it (a command still deleting): the rest is counted.
    find.on('close', (code, signal) => {
      if (enough || code === 0 || code === 1) resolve(total);
      else reject(new Error(`counting the sandbox's files failed: find ended with ${signal ?? `exit ${code}`}`));
    });
  });
}

const count = (n: number) => n.toLocaleString('en-US');

class LocalSandbox implements Sandbox {
  readonly workspace: string;
  readonly scratch: string;

  constructor(
    readonly id: string,
    private readonly root: string,
    readonly isolation: Isolation,
    private readonly network: boolean,
    /** Hosts the request adds to the egress allowlist. */
    private readonly allowHosts: string[] | undefined,
    private readonly limits: SandboxLimits,
    private readonly bwrap: string,
    /** The host uid commands run as; undefined when the worker is not root and cannot hand one out. */
    private readonly uid: number | undefined,
    /** The host directory of the run's objects, mounted read-only; see LocalProviderOptions.objectsFor. */
    private readonly objects: () => string | undefined,
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
    if (this.uid !== undefined) await ensureStage();
    const cgroups = await CommandCgroups.create(`${this.id}-${randomBytes(4).toString('hex')}`, this.limits);
    let tmpReport = '';
    // The command stops at the caller's signal, or once the disk watch finds it over a limit.
    const stop = new AbortController();
    const onAbort = () => stop.abort();
    if (options.signal?.aborted) stop.abort();
    options.signal?.addEventListener('abort', onAbort, { once: true });
    let diskFull: string | undefined;
    const unwatch = this.watchDisk((reason) => {
      diskFull ??= reason;
      stop.abort();
    });
    try {
      // Its own network namespace always; with network on, the allowlisting proxy is its one way out.
      const rules = this.network ? sandboxRules(this.allowHosts, options.egress) : undefined;
      const result = await withSandboxNet(rules, options.onOutput, (net) =>
        runProcessGroup(
          this.sandboxArgv(command, cwd, options, cgroups, net),
          '/',
          { ...options, env: { ...env, ...net.env }, signal: stop.signal },
          (text) => (tmpReport += text),
        ),
      );
      unwatch();
      const reason =
        diskFull ??
        (await cgroups?.hit(this.limits)) ??
        this.tmpFull(tmpReport) ??
        (await this.fileOrDiskOverLimit(result));
      if (reason)
        throw permanent('ResourceLimit', reason, { exitCode: result.exitCode, tail: result.output.slice(-2000) });
      return result;
    } finally {
      unwatch();
      options.signal?.removeEventListener('abort', onAbort);
      await cgroups?.remove();
    }
  }

  /**
   * unshare (root: a mount namespace for the prelude) → prelude (root: cgroups, staged mounts) →
   * setpriv (the sandbox's uid, no new privileges) → bwrap (user namespace and the sandbox's
   * view) → wrapper (rlimits: file size; processes and memory without cgroups) → the command.
   */
  private sandboxArgv(
    command: string,
    cwd: string,
    options: ExecOptions,
    cgroups: CommandCgroups | undefined,
    net: SandboxNet,
  ): string[] {
    const l = this.limits;
    // Without cgroups, rlimits stand in: processes per uid (each sandbox has its own) and
    // address space per process. With them, the cgroups decide, and say so afterwards.
    // In bash's units: KiB for file size and address space.
    const rlimits = [`-f ${l.workspaceMiB * 1024}`];
    if (!cgroups) rlimits.push(`-u ${l.processes}`, `-v ${l.memoryMiB * 1024}`);
    const host = (name: string) => path.join(this.root, name);
    const source = (name: 'workspace' | 'scratch' | 'objects') =>
      this.uid === undefined ? host(name) : path.join(STAGE, name);
    const objects = this.objects();

    const argv: string[] = [];
    if (this.uid !== undefined) {
      argv.push('unshare', '--mount', '--propagation', 'private', '--', '/bin/sh', '-c', PRELUDE, 'flotilla-prelude');
      argv.push(
        cgroups?.procsFiles().join(' ') ?? '',
        host('workspace'),
        host('scratch'),
        host('passwd'),
        STAGE,
        objects ?? '',
      );
    }
    if (this.uid !== undefined)
      argv.push(
        'setpriv',
        '--reuid',
        String(this.uid),
        '--regid',
        String(this.uid),
        '--clear-groups',
        '--no-new-privs',
        '--',
      );
    argv.push(
      this.bwrap,
      '--unshare-user',
      '--disable-userns',
      '--unshare-pid',
      '--unshare-ipc',
      '--unshare-uts',
      '--die-with-parent',
      '--cap-drop',
      'ALL',
    );
    // Mounts apply in order: the private /tmp first, so a tool directory that lives under the
    // host's /tmp (a checkout there) is mounted on top of it rather than hidden by it. No /sys at
    // all, and /proc/sys read-only on top of the uid that already cannot write it.
    argv.push(
      '--proc',
      '/proc',
      '--ro-bind',
      '/proc/sys',
      '/proc/sys',
      '--dev',
      '/dev',
      '--size',
      String(l.tmpMiB * MIB),
      '--tmpfs',
      '/tmp',
    );
    for (const dir of readOnlyDirs()) argv.push('--ro-bind', dir, dir);
    if (this.uid !== undefined) argv.push('--ro-bind', path.join(STAGE, 'passwd'), '/etc/passwd');
    argv.push(
      options.readOnlyWorkspace ? '--ro-bind' : '--bind',
      source('workspace'),
      INSIDE_WORKSPACE,
      '--bind',
      source('scratch'),
      INSIDE_SCRATCH,
      ...(objects ? ['--ro-bind', this.uid === undefined ? objects : source('objects'), SANDBOX_OBJECTS] : []),
      ...net.bwrapArgs,
      '--chdir',
      cwd,
      '--',
      'bash',
      '-c',
      WRAPPER,
      'flotilla-sandbox',
      rlimits.join(' '),
      ...net.command(['bash', '-c', command]),
    );
    return argv;
  }

  /** The wrapper's `df -Pk /tmp` line, read as "full" when less than 1% (or 64 KiB) is left. */
  private tmpFull(report: string): string | undefined {
    const m = /\n\S+\s+(\d+)\s+(\d+)\s+(\d+)/.exec(report);
    if (!m) return undefined;
    const [size, available] = [Number(m[1]), Number(m[3])];
    return available < Math.max(64, size / 100)
      ? `the sandbox's /tmp is full (limit ${this.limits.tmpMiB} MiB)`
      : undefined;
  }

  /** Counts the disk every few seconds while a command runs; calls `over` once it is past a limit. */
  private watchDisk(over: (reason: string) => void): () => void {
    let counting = false;
    const timer = setInterval(() => {
      if (counting) return;
      counting = true;
      // A count that fails here is retried by the one after the command, which does not swallow it.
      void this.diskOverLimit()
        .then(
          (reason) => reason && over(reason),
          () => undefined,
        )
        .finally(() => (counting = false));
    }, DISK_CHECK_MS);
    return () => clearInterval(timer);
  }

  private async fileOrDiskOverLimit(result: ExecResult): Promise<string | undefined> {
    if (result.exitCode === EXIT_FILE_TOO_LARGE)
      return `a command in the sandbox wrote a file past the size limit (${this.limits.workspaceMiB} MiB)`;
    return this.diskOverLimit();
  }

  /** The workspace lives on the host's disk: counted while a command runs and after it. */
  private async diskOverLimit(): Promise<string | undefined> {
    const l = this.limits;
    const stopAt = l.workspaceFiles * 10;
    const used = await measure([path.join(this.root, 'workspace'), path.join(this.root, 'scratch')], stopAt);
    if (used.files > l.workspaceFiles) {
      return `workspace holds ${used.files >= stopAt ? 'at least ' : ''}${count(used.files)} files; the limit is ${count(l.workspaceFiles)}`;
    }
    if (used.bytes > l.workspaceMiB * MIB)
      return `workspace holds ${count(Math.ceil(used.bytes / MIB))} MiB; the limit is ${count(l.workspaceMiB)} MiB`;
    return undefined;
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

  async writeFile(
    inside: string,
    data: Uint8Array | string,
    options: { readOnly?: boolean; executable?: boolean } = {},
  ): Promise<void> {
    await this.create(inside, options, (file) => file.writeFile(data));
  }

  async copyIn(hostPath: string, inside: string): Promise<void> {
    await this.create(inside, {}, async (file) => {
      for await (const chunk of createReadStream(hostPath)) await file.write(chunk as Buffer);
    });
  }

  /** Creates (or truncates) a file for the sandbox, fills it with `fill`, then sets its owner and mode. */
  private async create(
    inside: string,
    options: { readOnly?: boolean; executable?: boolean },
    fill: (file: FileHandle) => Promise<void>,
  ): Promise<void> {
    const host = this.hostPath(inside);
    await this.checkNoSymlinks(host);
    // Who owns what we create: the sandbox's uid, or root for a file it must not change.
    const owner = this.uid === undefined ? undefined : options.readOnly ? 0 : this.uid;
    const created = await mkdir(path.dirname(host), { recursive: true });
    // Directories are the sandbox's even for a read-only file: it may remove the file (and the
    // next checkout must be able to), it just cannot change what the file says.
    if (created !== undefined && this.uid !== undefined) {
      for (let dir = path.dirname(host); dir.length >= created.length; dir = path.dirname(dir))
        await chown(dir, this.uid, this.uid);
    }
    // O_NOFOLLOW: a symlink planted since the check above is refused rather than followed.
    const file = await open(
      host,
      fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_TRUNC | fsConstants.O_NOFOLLOW,
      0o644,
    );
    try {
      await fill(file);
      if (owner !== undefined) await file.chown(owner, owner);
      await file.chmod((options.readOnly ? 0o444 : 0o644) | (options.executable ? 0o111 : 0));
    } finally {
      await file.close();
    }
  }

  async readFile(inside: string): Promise<Uint8Array> {
    const host = this.hostPath(inside);
    await this.checkNoSymlinks(host);
    return readFile(host);
  }

  async copyOut(inside: string, hostPath: string): Promise<void> {
    const host = this.hostPath(inside);
    await this.checkNoSymlinks(host);
    // O_NONBLOCK: opening a FIFO the sandbox planted must not wait for a writer; it is refused below.
    const file = await open(host, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW | fsConstants.O_NONBLOCK);
    try {
      if (!(await file.stat()).isFile()) throw new Error(`path ${inside} in the sandbox is not a regular file`);
      const out = await open(hostPath, 'w', 0o600);
      try {
        const buffer = Buffer.alloc(1024 * 1024);
        for (let n; (n = (await file.read(buffer, 0, buffer.length)).bytesRead) > 0;) await out.write(buffer, 0, n);
      } finally {
        await out.close();
      }
    } finally {
      await file.close();
    }
  }
}

export class LocalSandboxProvider implements SandboxProvider {
  readonly name = 'local';
  private readonly bwrap: string;
  private readonly noIsolation: boolean;
  private readonly maxLimits: SandboxLimits;
  private readonly uids: { first: number; count: number };
  private readonly objectsFor: (key: string) => string | undefined;

  constructor(
    private readonly baseDir: string,
    options: LocalProviderOptions = {},
  ) {
    this.bwrap = options.bwrap ?? defaultBwrap();
    this.noIsolation = options.noIsolation ?? setting('FLOTILLA_ISOLATION') === 'none';
    this.maxLimits = {
      ...MAX_LIMITS,
      ...(options.maxLimits ?? setting('FLOTILLA_SANDBOX_MAX_LIMITS')),
    };
    this.uids = options.uids ?? setting('FLOTILLA_SANDBOX_UIDS');
    this.objectsFor = options.objectsFor ?? (() => undefined);
  }

  /** A readable, collision-free directory name for a key such as "run-1/worker/api". */
  dirFor(key: string): string {
    const readable = key.replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 80);
    const hash = createHash('sha256').update(key).digest('hex').slice(0, 10);
    return path.join(this.baseDir, `${readable}-${hash}`);
  }

  /** The host uid of a key's sandbox: stable, so a worker that restarts finds its files owned right. */
  uidFor(key: string): number | undefined {
    if (!asRoot()) return undefined;
    return this.uids.first + (createHash('sha256').update(key).digest().readUInt32BE(0) % this.uids.count);
  }

  /** The defaults, overridden by the request, each capped at the worker's maximum. */
  limitsFor(requested: SandboxLimitsRequest = {}): SandboxLimits {
    const limits = { ...DEFAULT_LIMITS };
    for (const name of Object.keys(limits) as (keyof SandboxLimits)[]) {
      limits[name] = Math.min(requested[name] ?? DEFAULT_LIMITS[name], this.maxLimits[name]);
    }
    return limits;
  }

  /** How this provider isolates, or a permanent failure saying why it will not run anything. */
  checkIsolation(): Isolation {
    if (this.noIsolation) return 'none';
    const probe = probeBubblewrap(this.bwrap);
    if (probe.isolation === 'bubblewrap') return 'bubblewrap';
    throw permanent(
      'IsolationUnavailable',
      `refusing to run agents without isolation: ${probe.reason}. Install or fix bubblewrap, or start the worker with FLOTILLA_ISOLATION=none to run them unisolated`,
    );
  }

  private open(key: string, options: SandboxOptions): Sandbox {
    const root = this.dirFor(key);
    const isolation = this.checkIsolation();
    const uid = isolation === 'bubblewrap' ? this.uidFor(key) : undefined;
    const objects = () => this.objectsFor(key);
    return new LocalSandbox(
      path.basename(root),
      root,
      isolation,
      options.network,
      options.allowHosts,
      this.limitsFor(options.limits),
      this.bwrap,
      uid,
      objects,
    );
  }

  async provision(key: string, options: SandboxOptions): Promise<Sandbox> {
    const sandbox = this.open(key, options);
    const root = this.dirFor(key);
    const uid = sandbox.isolation === 'bubblewrap' ? this.uidFor(key) : undefined;
    // Root's alone: no sandbox uid gets into another sandbox's directory, whatever the data directory's mode.
    await mkdir(root, { recursive: true, mode: 0o700 });
    await chmod(root, 0o700);
    await mkdir(path.join(root, 'workspace'), { recursive: true });
    await mkdir(path.join(root, 'scratch'), { recursive: true });
    if (uid !== undefined) {
      // The sandbox's own directories belong to its uid; the root holding them stays root's.
      await chown(path.join(root, 'workspace'), uid, uid);
      await chown(path.join(root, 'scratch'), uid, uid);
      await writeFile(path.join(root, 'passwd'), await passwdWith(uid), { mode: 0o444 });
    }
    return sandbox;
  }

  async find(key: string, options: SandboxOptions): Promise<Sandbox | undefined> {
    return existsSync(path.join(this.dirFor(key), 'workspace')) ? this.open(key, options) : undefined;
  }

  async destroy(key: string): Promise<void> {
    await rm(this.dirFor(key), { recursive: true, force: true, maxRetries: 3 });
    await CommandCgroups.removeLeftovers(path.basename(this.dirFor(key)));
  }
}

/** The host's passwd plus the sandbox's user, so tools that look themselves up (ssh, node's os.userInfo) work. */
async function passwdWith(uid: number): Promise<string> {
  const host = await readFile('/etc/passwd', 'utf8').catch(() => 'root:x:0:0:root:/root:/bin/sh\n');
  return `${host.trimEnd()}\nsandbox:x:${uid}:${uid}:Flotilla sandbox:${INSIDE_SCRATCH}:/bin/bash\n`;
}
