/**
 * Disk accounting of a local sandbox. Its workspace and scratch directories live on the host's
 * disk, which no mount bounds, so they are counted: every few seconds while a command runs (so a
 * long one cannot fill the disk before it ends) and once after it. One file past the size limit
 * is stopped by the kernel (the file size rlimit), and /tmp is a tmpfs bwrap sizes, read once as
 * the command ends.
 *
 * Each count is exact: what the filesystem holds below the directories, nothing estimated. After a
 * command, a small sandbox (most of them, before an agent fills them) is counted in this process,
 * which costs less than starting `find`: no process of the sandbox is left then to change the tree
 * under the walk. While a command runs, and for a sandbox that is large, `find` counts.
 */
import { type Dirent, lstatSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { constants as osConstants } from 'node:os';
import { readableOf, startProgram } from '../../spawner';
import { MIB, type SandboxLimits } from './limits';

/** How often the disk is counted while a command runs, so a long one cannot fill it until it ends. */
const DISK_CHECK_MS = 5_000;
/** Exit status of a process killed by SIGXFSZ: it wrote past the file size limit. */
const EXIT_FILE_TOO_LARGE = 128 + osConstants.signals.SIGXFSZ;
const MEASURE_TIMEOUT_MS = 120_000;

export interface DiskUsage {
  bytes: number;
  files: number;
}

const count = (n: number) => n.toLocaleString('en-US');

/**
 * Counts entries (and the bytes of regular files) below the given directories, not following
 * symlinks, with one `find` whose listing is read as it comes and cut off at `stopAt` entries,
 * so a flood of millions does not hold the worker up for minutes to say so. A walk in this
 * process cost the worker ~15 µs of CPU per file at every command (0.3 s for a 20,000-file
 * checkout); find does it in a tenth of that, and reaches entries nested deeper than a path can be long.
 */
function measure(dirs: string[], stopAt: number): Promise<DiskUsage> {
  return new Promise((resolve, reject) => {
    const find = startProgram('find', [...dirs, '-mindepth', '1', '-printf', '%y %s\\n'], {
      env: { PATH: '/usr/bin:/bin', LC_ALL: 'C' },
      stdio: ['ignore', 'pipe', 'ignore'],
      timeout: MEASURE_TIMEOUT_MS,
      killSignal: 'SIGKILL',
    });
    const total = { bytes: 0, files: 0 };
    let partial = '';
    let enough = false;
    readableOf(find, 1)
      .setEncoding('utf8')
      .on('data', (chunk: string) => {
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
    find.on('error', (err: Error) => reject(new Error(`counting the sandbox's files failed: ${err.message}`)));
    // find exits 1 when an entry vanished under it (a command still deleting): the rest is counted.
    find.on('close', (code: number | null, signal: NodeJS.Signals | null) => {
      if (enough || code === 0 || code === 1) resolve(total);
      else reject(new Error(`counting the sandbox's files failed: find ended with ${signal ?? `exit ${code}`}`));
    });
  });
}

/** Entries a count in this process goes through before it leaves the rest to `find`. */
const WALK_AT_MOST = 500;

/**
 * Counts entries (and the bytes of regular files) below `dirs` as `find` does, without following
 * symlinks; undefined once past `atMost` entries. Only for a tree nothing changes while it is
 * walked (a path could otherwise be swapped for a link between the listing and the descent).
 */
export function walkSmall(dirs: string[], atMost = WALK_AT_MOST): DiskUsage | undefined {
  const total = { bytes: 0, files: 0 };
  const pending = [...dirs];
  for (let dir = pending.pop(); dir !== undefined; dir = pending.pop()) {
    let entries: Dirent[];
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch (err) {
      // A top directory not made yet holds nothing; anything else is find's to count.
      if ((err as NodeJS.ErrnoException).code === 'ENOENT' && dirs.includes(dir)) continue;
      return undefined;
    }
    total.files += entries.length;
    if (total.files > atMost) return undefined;
    for (const entry of entries) {
      const at = path.join(dir, entry.name);
      if (entry.isDirectory()) pending.push(at);
      else if (entry.isFile()) total.bytes += lstatSync(at).size;
    }
  }
  return total;
}

/** Which disk limit `used` is past, in words; `stopAt` is where the count was cut off. */
export function usageOverLimit(used: DiskUsage, limits: SandboxLimits, stopAt: number): string | undefined {
  if (used.files > limits.workspaceFiles) {
    return `workspace holds ${used.files >= stopAt ? 'at least ' : ''}${count(used.files)} files; the limit is ${count(limits.workspaceFiles)}`;
  }
  if (used.bytes > limits.workspaceMiB * MIB)
    return `workspace holds ${count(Math.ceil(used.bytes / MIB))} MiB; the limit is ${count(limits.workspaceMiB)} MiB`;
  return undefined;
}

/** The wrapper's `df -Pk /tmp` line, read as "full" when less than 1% (or 64 KiB) is left. */
export function tmpFull(report: string, limits: SandboxLimits): string | undefined {
  const m = /\n\S+\s+(\d+)\s+(\d+)\s+(\d+)/.exec(report);
  if (!m) return undefined;
  const [size, available] = [Number(m[1]), Number(m[3])];
  return available < Math.max(64, size / 100) ? `the sandbox's /tmp is full (limit ${limits.tmpMiB} MiB)` : undefined;
}

/** The disk of one sandbox: its host directories, against its limits. */
export class SandboxDisk {
  constructor(
    private readonly dirs: string[],
    private readonly limits: SandboxLimits,
  ) {}

  /** Counts the disk every few seconds while a command runs; calls `over` once it is past a limit. */
  watch(over: (reason: string) => void): () => void {
    let counting = false;
    const timer = setInterval(() => {
      if (counting) return;
      counting = true;
      // A count that fails here is retried by the one after the command, which does not swallow it.
      void this.overLimit()
        .then(
          (reason) => reason && over(reason),
          () => undefined,
        )
        .finally(() => (counting = false));
    }, DISK_CHECK_MS);
    return () => clearInterval(timer);
  }

  /**
   * What a command that ended with `exitCode` went past: one file's size limit, or the disk's.
   * Called once no process of the sandbox is left.
   */
  async afterCommand(exitCode: number): Promise<string | undefined> {
    if (exitCode === EXIT_FILE_TOO_LARGE)
      return `a command in the sandbox wrote a file past the size limit (${this.limits.workspaceMiB} MiB)`;
    const small = walkSmall(this.dirs);
    return small ? usageOverLimit(small, this.limits, Infinity) : this.overLimit();
  }

  private async overLimit(): Promise<string | undefined> {
    // Far enough past the file limit to say by how much, soon enough not to take minutes.
    const stopAt = this.limits.workspaceFiles * 10;
    return usageOverLimit(await measure(this.dirs, stopAt), this.limits, stopAt);
  }
}
