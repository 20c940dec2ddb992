/**
 * Memory and process cgroups (v1) for one command of a local sandbox, when this host lets us make
 * them (the worker is root, and both controllers are mounted). The command's first process is
 * moved into them before it starts anything (bwrap waits for it: sandbox.ts); afterwards they say
 * whether the kernel stopped it at a limit. Without them, rlimits stand in (see limits.ts).
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir, rmdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { MIB, type SandboxLimits } from './limits';
import { asRoot } from './uids';

const CGROUP_ROOT = '/sys/fs/cgroup';
const CONTROLLERS = ['memory', 'pids'] as const;

/**
 * What the kernel stopped, in words, from a command's memory.oom_control and pids.events: an
 * out-of-memory kill, or a fork refused at the process limit.
 */
export function cgroupLimitHit(oomControl: string, pidsEvents: string, limits: SandboxLimits): string | undefined {
  const oomKills = /^oom_kill (\d+)$/m.exec(oomControl);
  if (oomKills && Number(oomKills[1]) > 0)
    return `the sandbox ran out of memory (limit ${limits.memoryMiB} MiB) and the kernel killed its process`;
  const refusedForks = /^max (\d+)$/m.exec(pidsEvents);
  if (refusedForks && Number(refusedForks[1]) > 0)
    return `the sandbox reached its process limit (${limits.processes} processes at once)`;
  return undefined;
}

export class CommandCgroups {
  private constructor(private readonly dirs: { memory: string; pids: string }) {}

  /** Undefined when cgroups are not writable here; rlimits then stand in where they can. */
  static async create(name: string, limits: SandboxLimits): Promise<CommandCgroups | undefined> {
    if (!asRoot()) return undefined;
    // Only where both v1 controllers are mounted: under `ip netns exec` /sys is a fresh sysfs with
    // an empty /sys/fs/cgroup, and a recursive mkdir there never returns (Node 20).
    if (!CONTROLLERS.every((c) => existsSync(path.join(CGROUP_ROOT, c, 'cgroup.procs')))) return undefined;
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
    for (const controller of CONTROLLERS) {
      const parent = path.join(CGROUP_ROOT, controller, 'flotilla');
      const names = await readdir(parent).catch(() => []);
      for (const name of names.filter((n) => n.startsWith(`${sandboxId}-`)))
        await rmdir(path.join(parent, name)).catch(() => undefined);
    }
  }

  /** Moves process `pid` (the command's first, before it has started anything) into both cgroups. */
  async join(pid: number): Promise<void> {
    for (const dir of [this.dirs.memory, this.dirs.pids]) await writeFile(path.join(dir, 'cgroup.procs'), String(pid));
  }

  /** What the kernel stopped, in words, when it did. */
  async hit(limits: SandboxLimits): Promise<string | undefined> {
    const read = (f: string) => readFile(f, 'utf8').catch(() => '');
    return cgroupLimitHit(
      await read(path.join(this.dirs.memory, 'memory.oom_control')),
      await read(path.join(this.dirs.pids, 'pids.events')),
      limits,
    );
  }

  /** Removes the cgroups once the kernel has finished reaping the command's processes. */
  async remove(): Promise<void> {
    for (const dir of [this.dirs.memory, this.dirs.pids]) {
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
