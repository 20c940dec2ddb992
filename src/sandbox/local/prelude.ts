/**
 * What runs as root before a local sandbox starts, when the worker is root: each command gets a
 * mount namespace of its own, in which the prelude joins the command's cgroups and bind-mounts
 * the sandbox's directories (under the worker's private data directory, which the sandbox uid
 * cannot traverse) and the worker's install (which may lie under a private directory too, as
 * /root) onto the bind points, where bwrap, already unprivileged, finds them. Then
 * setpriv hands the rest of the chain down to the sandbox's uid. bwrap's --bind-fd does not help
 * here: it resolves the fd back to a path.
 */
import { createHash } from 'node:crypto';
import { mkdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * Empty mount points, one per directory a sandbox gets, that each command's prelude binds its
 * own sandbox's directories onto (in its own mount namespace, so commands never see each other's).
 */
const BIND_POINTS = '/run/flotilla-sandbox';

/** Where bwrap finds one of the sandbox's directories (or its passwd file) once the prelude has bound it. */
export const bindPoint = (name: 'workspace' | 'scratch' | 'objects' | 'passwd') => path.join(BIND_POINTS, name);

/** Where bwrap finds a directory (or file) of the worker's install once the prelude has bound it. */
export const toolPoint = (source: string) =>
  path.join(BIND_POINTS, 'tools', createHash('sha256').update(source).digest('hex').slice(0, 16));

/**
 * `mount` is looked up in the system's directories only; the chain after the prelude (setpriv,
 * bwrap, the command) gets the worker's PATH back, on which its Node may be (nvm), as it does
 * when the worker is not root.
 */
const PRELUDE = `set -e
procs=$1 workspace=$2 scratch=$3 passwd=$4 points=$5 objects=$6 tools=$7
shift 7
for f in $procs; do echo $$ > "$f"; done
worker_path=$PATH
PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount --bind "$workspace" "$points/workspace"
mount --bind "$scratch" "$points/scratch"
mount --bind "$passwd" "$points/passwd"
if [ -n "$objects" ]; then mount --bind -o ro "$objects" "$points/objects"; fi
while [ "$tools" -gt 0 ]; do mount --rbind "$1" "$2"; shift 2; tools=$((tools - 1)); done
PATH=$worker_path
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
  /** The worker's install, each bound onto its toolPoint (bwrap mounts it read-only). */
  tools: string[];
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
    String(input.tools.length),
    ...input.tools.flatMap((t) => [t, toolPoint(t)]),
  ];
  return [...inOwnMountNamespace(PRELUDE, 'flotilla-prelude', args), ...asSandboxUid(uid)];
}

/**
 * Makes the bind points on first use by each worker process (/run does not survive a reboot;
 * the sandboxes do), and one per directory or file of the install `tools`, of the same kind.
 */
const made = new Map<string, Promise<void>>();
export async function ensureBindPoints(tools: string[]): Promise<void> {
  await Promise.all([
    once('', async () => {
      await mkdir(bindPoint('workspace'), { recursive: true, mode: 0o755 });
      await mkdir(bindPoint('scratch'), { recursive: true, mode: 0o755 });
      await mkdir(bindPoint('objects'), { recursive: true, mode: 0o755 });
      await writeFile(bindPoint('passwd'), '', { flag: 'a' });
    }),
    ...tools.map((tool) =>
      once(tool, async () => {
        const point = toolPoint(tool);
        if ((await stat(tool)).isDirectory()) {
          await mkdir(point, { recursive: true, mode: 0o755 });
        } else {
          await mkdir(path.dirname(point), { recursive: true, mode: 0o755 });
          await writeFile(point, '', { flag: 'a' });
        }
      }),
    ),
  ]);
}

function once(key: string, make: () => Promise<void>): Promise<void> {
  let making = made.get(key);
  if (!making) {
    making = make().catch((err) => {
      made.delete(key);
      throw err;
    });
    made.set(key, making);
  }
  return making;
}
