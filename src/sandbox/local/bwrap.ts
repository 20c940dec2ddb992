/**
 * The sandbox's view, as bubblewrap's arguments: its own user, pid, ipc, uts and network
 * namespaces, no capabilities, a read-only system, a bounded private /tmp, no /sys and a
 * read-only /proc/sys, the workspace and scratch directories, and it dies with its parent. Inside
 * it, a small wrapper sets the command's rlimits before the command starts.
 */
import { SANDBOX_OBJECTS } from '../../git/run-mirror';
import type { SandboxNet } from '../egress/sandbox-net';
import { MIB } from './limits';

/** Where the workspace and scratch directories are, as commands in a bubblewrap sandbox see them. */
export const INSIDE_WORKSPACE = '/workspace';
export const INSIDE_SCRATCH = '/scratch';

/**
 * Sets the command's rlimits ($1, options of bash's ulimit, which lowers soft and hard limit
 * alike: nothing in the sandbox may raise them again), runs it, then reports how full /tmp is
 * on fd 3, which the command itself does not get. The tmpfs is gone once bwrap exits, so this is
 * the only moment to look; a /tmp left empty cannot be full, and is not looked at (no `df`).
 *
 * A plain command (`-c` and its text) runs in a subshell of this shell: one bash for both, where
 * `bash -c` would exec a second one. Its positional parameters are cleared first, and $0 is
 * "bash", as under `bash -c`. Anything else (the egress bridge) is run as a program.
 */
const WRAPPER = [
  'ulimit $1 || exit 125; shift',
  'if [ "$1" = -c ]; then (exec 3>&-; eval "set --; $2"); else "$@" 3>&-; fi; rc=$?',
  'shopt -s nullglob dotglob; t=(/tmp/*); if [ ${#t[@]} -gt 0 ]; then df -Pk /tmp >&3 2>/dev/null; fi; exit $rc',
].join('\n');

/** Descriptors bwrap gets for the cgroups' admission (sandbox.ts): where it says its first process, and where it waits to go on. */
export const INFO_FD = 4;
export const BLOCK_FD = 5;

export interface BwrapInput {
  bwrap: string;
  /** The size of the private /tmp. */
  tmpMiB: number;
  /**
   * Host directories mounted read-only at `path` (install.ts: the system's and the worker's
   * install), each found at `source`: the path itself, or the prelude's bind point for it.
   */
  readOnly: { source: string; path: string }[];
  /** Where bwrap finds the sandbox's directories: the host's own paths, or the prelude's bind points. */
  sources: { workspace: string; scratch: string; objects?: string };
  /** The sandbox user's passwd file, mounted over /etc/passwd; none when it runs as the worker's uid. */
  passwd?: string;
  readOnlyWorkspace: boolean;
  net: SandboxNet;
  cwd: string;
  /** Options of bash's ulimit (rlimitOptions). */
  rlimits: string;
  /**
   * bwrap says its first process on INFO_FD and waits for a byte on BLOCK_FD before it starts the
   * command, so that the process can join the command's cgroups before anything of it runs.
   */
  admission?: boolean;
  command: string;
}

/** bwrap (user namespace and the sandbox's view) → the wrapper's bash (rlimits), which runs the command. */
export function bwrapArgv(input: BwrapInput): string[] {
  const { sources } = input;
  const argv = [
    input.bwrap,
    '--unshare-user',
    '--disable-userns',
    '--unshare-pid',
    '--unshare-ipc',
    '--unshare-uts',
    '--die-with-parent',
    '--cap-drop',
    'ALL',
  ];
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
    String(input.tmpMiB * MIB),
    '--tmpfs',
    '/tmp',
  );
  for (const dir of input.readOnly) argv.push('--ro-bind', dir.source, dir.path);
  if (input.passwd) argv.push('--ro-bind', input.passwd, '/etc/passwd');
  argv.push(
    input.readOnlyWorkspace ? '--ro-bind' : '--bind',
    sources.workspace,
    INSIDE_WORKSPACE,
    '--bind',
    sources.scratch,
    INSIDE_SCRATCH,
    ...(sources.objects ? ['--ro-bind', sources.objects, SANDBOX_OBJECTS] : []),
    ...input.net.bwrapArgs,
    ...(input.admission ? ['--info-fd', String(INFO_FD), '--block-fd', String(BLOCK_FD)] : []),
    '--chdir',
    input.cwd,
    '--',
    'bash',
    '-c',
    WRAPPER,
    'bash',
    input.rlimits,
    ...(input.net.bridge ? [...input.net.bridge, 'bash', '-c', input.command] : ['-c', input.command]),
  );
  return argv;
}
