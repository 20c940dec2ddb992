/**
 * What runs as root before a local sandbox starts, when the worker is root: each command gets a
 * mount namespace of its own, in which the prelude joins the command's cgroups and bind-mounts
 * the sandbox's directories (under the worker's private data directory, which the sandbox uid
 * cannot traverse) onto the bind points, where bwrap, already unprivileged, finds them. Then
 * setpriv hands the rest of the chain down to the sandbox's uid. bwrap's --bind-fd does not help
 * here: it resolves the fd back to a path.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * Empty mount points, one per directory a sandbox gets, that each command's prelude binds its
 * own sandbox's directories onto (in its own mount namespace, so commands never see each other's).
 */
const BIND_POINTS = '/run/flotilla-sandbox';

/** Where bwrap finds one of the sandbox's directories (or its passwd file) once the prelude has bound it. */
export const bindPoint = (name: 'workspace' | 'scratch' | 'objects' | 'passwd') => path.join(BIND_POINTS, name);

const PRELUDE = `set -e
procs=$1 workspace=$2 scratch=$3 passwd=$4 points=$5 objects=$6
shift 6
for f in $procs; do echo $$ > "$f"; done
PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount --bind "$workspace" "$points/workspace"
mount --bind "$scratch" "$points/scratch"
mount --bind "$passwd" "$points/passwd"
if [ -n "$objects" ]; then mount --bind -o ro "$objects" "$points/objects"; fi
exec "$@"`;

/** The host paths the prelude binds, and the cgroups it joins first. */
export interface PreludeInput {
  /** The cgroup.procs files the command's first process joins before anything else runs. */
  procsFiles: string[];
  workspace: string;
  scratch: string;
  passwd: string;
  /** The run's git objects, bound read-only; none when undefined. */
  objects?: string;
}

/** Runs `script` as `/bin/sh -c` in a mount namespace of its own; the script execs the rest of the argv. */
export function inOwnMountNamespace(script: string, name: string, args: string[] = []): string[] {
  return ['unshare', '--mount', '--propagation', 'private', '--', '/bin/sh', '-c', script, name, ...args];
}

/** Runs the rest of the argv as `uid` with no supplementary groups and no way to gain privileges. */
export function asSandboxUid(uid: number): string[] {
  return ['setpriv', '--reuid', String(uid), '--regid', String(uid), '--clear-groups', '--no-new-privs', '--'];
}

/** unshare (a mount namespace) → the prelude (cgroups, bind mounts) → setpriv (the sandbox's uid): bwrap's argv follows. */
export function preludeArgv(input: PreludeInput, uid: number): string[] {
  const args = [
    input.procsFiles.join(' '),
    input.workspace,
    input.scratch,
    input.passwd,
    BIND_POINTS,
    input.objects ?? '',
  ];
  return [...inOwnMountNamespace(PRELUDE, 'flotilla-prelude', args), ...asSandboxUid(uid)];
}

/**
 * Makes the bind points on first use by each worker process (/run does not survive a reboot;
 * the sandboxes do).
 */
let made: Promise<void> | undefined;
export function ensureBindPoints(): Promise<void> {
  made ??= (async () => {
    await mkdir(bindPoint('workspace'), { recursive: true, mode: 0o755 });
    await mkdir(bindPoint('scratch'), { recursive: true, mode: 0o755 });
    await mkdir(bindPoint('objects'), { recursive: true, mode: 0o755 });
    await writeFile(bindPoint('passwd'), '', { flag: 'a' });
  })().catch((err) => {
    made = undefined;
    throw err;
  });
  return made;
}
