/**
 * A local sandbox's resource limits: what it gets by default, the most a request may ask for,
 * the worker's own caps (FLOTILLA_SANDBOX_MAX_LIMITS), and the rlimits that stand in for cgroups
 * where the worker cannot make them.
 */
import type { SandboxLimitsRequest } from '../../contracts/request';

export type SandboxLimits = Required<SandboxLimitsRequest>;

export const MIB = 1024 * 1024;

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

/** The defaults, overridden by the request, each capped at the worker's maximum. */
export function capLimits(requested: SandboxLimitsRequest, max: SandboxLimits): SandboxLimits {
  const limits = { ...DEFAULT_LIMITS };
  for (const name of Object.keys(limits) as (keyof SandboxLimits)[]) {
    limits[name] = Math.min(requested[name] ?? DEFAULT_LIMITS[name], max[name]);
  }
  return limits;
}

/**
 * The options of bash's `ulimit` a command runs under: always the file size (no one file past
 * the workspace limit). Without cgroups, rlimits stand in for them: processes per uid (each
 * sandbox has its own) and address space per process; with cgroups, the cgroups decide, and say
 * so afterwards. In bash's units: KiB for file size and address space.
 */
export function rlimitOptions(limits: SandboxLimits, cgroups: boolean): string {
  const options = [`-f ${limits.workspaceMiB * 1024}`];
  if (!cgroups) options.push(`-u ${limits.processes}`, `-v ${limits.memoryMiB * 1024}`);
  return options.join(' ');
}
