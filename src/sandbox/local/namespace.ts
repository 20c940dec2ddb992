/**
 * What a worker running as root sets up once for its sandboxes' commands: a mount namespace of its
 * own (the sandbox namespace) in which its sandboxes directory and the worker's install are bound
 * onto fixed points under /run/flotilla-sandbox. Both may lie under private directories (the data
 * directory is 0700, the install may be in /root), which a sandbox uid cannot traverse on the
 * host; on the points it can, where bwrap, already unprivileged, finds what it mounts. Each
 * command enters the namespace with nsenter, which also hands it down to the sandbox's uid with
 * no supplementary groups (bwrap sets no_new_privs before anything else). bwrap's --bind-fd does
 * not help here: it resolves the fd back to a path.
 *
 * The namespace lives as long as the worker process holds a descriptor of it (no process stays in
 * it, and nothing of it is visible in the host's mount table): it goes when the worker does. What
 * a sandbox can reach is still only what bwrap mounts for it; inside the namespace, each sandbox's
 * directory lets in its own uid alone (provider.ts: root-owned, mode 0710, its group the uid's).
 * The namespace is a slave of the host's: mounts made on the host later (a disk) are seen in it,
 * and nothing made in it reaches the host.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, openSync, statSync } from 'node:fs';
import { chmod, chown, lstat, mkdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';

/** Empty mount points on the host, bound in the sandbox namespace only. */
const POINTS = '/run/flotilla-sandbox';

const digest = (value: string) => createHash('sha256').update(value).digest('hex').slice(0, 16);

/** Where bwrap finds a directory (or file) of the worker's install in the sandbox namespace. */
export const toolPoint = (source: string) => path.join(POINTS, 'tools', digest(source));

/** Where bwrap finds the sandboxes directory `dir` in the sandbox namespace. */
export const sandboxesPoint = (dir: string) => path.join(POINTS, 'sandboxes', digest(dir));

/**
 * Binds the sandboxes directory and the install onto their points, says so, and waits for the
 * worker to have taken hold of the namespace (its stdin closing). `mount` is looked up in the
 * system's directories only.
 */
const HOLDER = `set -e
PATH=/usr/sbin:/usr/bin:/sbin:/bin
sandboxes=$1 point=$2 tools=$3
shift 3
mount --bind "$sandboxes" "$point"
while [ "$tools" -gt 0 ]; do mount --rbind "$1" "$2"; shift 2; tools=$((tools - 1)); done
echo ready
read -r _ || true`;

/** The holder's argv: unshare (a mount namespace, a slave of the host's) → sh (the mounts). */
export function holderArgv(sandboxes: string, tools: string[]): string[] {
  const args = [sandboxes, sandboxesPoint(sandboxes), String(tools.length), ...tools.flatMap((t) => [t, toolPoint(t)])];
  return ['unshare', '--mount', '--propagation', 'slave', '--', '/bin/sh', '-c', HOLDER, 'flotilla-namespace', ...args];
}

/** Runs the rest of the argv in the namespace held by descriptor `fd` of this process, as `uid` with no other group. */
export function enterArgv(fd: number, uid: number): string[] {
  return ['nsenter', `--mount=/proc/${process.pid}/fd/${fd}`, '-S', String(uid), '-G', String(uid), '--'];
}

/** The sandbox namespace of one sandboxes directory and install, as this process holds it. */
export class SandboxNamespace {
  private constructor(
    /** This process's descriptor of the namespace (close-on-exec: no child inherits it). */
    private readonly fd: number,
    /** The sandboxes directory's device and inode when it was bound: a directory made anew is not the one bound. */
    private readonly bound: string,
    readonly sandboxes: string,
  ) {}

  /** The argv prefix that runs a command in the namespace as `uid`. */
  enter(uid: number): string[] {
    return enterArgv(this.fd, uid);
  }

  /** Where `hostPath` (inside the sandboxes directory) is in the namespace. */
  pathOf(hostPath: string): string {
    const rel = path.relative(this.sandboxes, hostPath);
    if (rel.startsWith('..') || path.isAbsolute(rel)) throw new Error(`${hostPath} is not in ${this.sandboxes}`);
    return path.join(sandboxesPoint(this.sandboxes), rel);
  }

  /** The namespace for `sandboxes` and `tools`, made on first use by this process (and again when the directory was made anew). */
  static async of(sandboxes: string, tools: string[]): Promise<SandboxNamespace> {
    const key = JSON.stringify([sandboxes, tools]);
    const known = held.get(key);
    if (known) {
      const ns = await known.catch(() => undefined);
      if (ns && ns.bound === identity(sandboxes)) return ns;
      // Gone, or bound to a directory since removed: made again, by the first caller to see it.
      if (held.get(key) === known) {
        held.delete(key);
        if (ns) closeSync(ns.fd);
      }
    }
    let making = held.get(key);
    if (!making) {
      making = SandboxNamespace.make(sandboxes, tools);
      held.set(key, making);
    }
    return making;
  }

  private static async make(sandboxes: string, tools: string[]): Promise<SandboxNamespace> {
    await ensurePoints(sandboxes, tools);
    const bound = identity(sandboxes);
    const argv = holderArgv(sandboxes, tools);
    const holder = spawn(argv[0], argv.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    holder.stderr.on('data', (b: Buffer) => (err = (err + b.toString()).slice(-2000)));
    const fd = await new Promise<number>((resolve, reject) => {
      holder.on('error', reject);
      holder.on('close', (code) =>
        reject(new Error(`making the sandbox namespace failed (exit ${code}): ${err.trim() || out.trim()}`)),
      );
      holder.stdout.on('data', (b: Buffer) => {
        out += b.toString();
        if (!out.includes('ready\n')) return;
        try {
          resolve(openSync(`/proc/${holder.pid}/ns/mnt`, 'r'));
        } catch (e) {
          reject(e as Error);
        }
        holder.stdin.end();
      });
    });
    return new SandboxNamespace(fd, bound, sandboxes);
  }
}

const held = new Map<string, Promise<SandboxNamespace>>();

const identity = (dir: string) => {
  const st = statSync(dir);
  return `${st.dev}:${st.ino}`;
};

/**
 * The points on the host (/run does not survive a reboot), one per sandboxes directory and per
 * directory or file of the install, of the same kind; and the sandboxes directory traversable by
 * every sandbox uid (each sandbox's own directory in it lets in its uid alone).
 */
async function ensurePoints(sandboxes: string, tools: string[]): Promise<void> {
  await mkdir(sandboxes, { recursive: true });
  await chmod(sandboxes, 0o711);
  await mkdir(sandboxesPoint(sandboxes), { recursive: true, mode: 0o755 });
  for (const tool of tools) {
    const point = toolPoint(tool);
    if ((await stat(tool)).isDirectory()) {
      await mkdir(point, { recursive: true, mode: 0o755 });
    } else {
      await mkdir(path.dirname(point), { recursive: true, mode: 0o755 });
      await writeFile(point, '', { flag: 'a' });
    }
  }
}

/**
 * Lets the sandbox's uid, and no other, into its directory `root` in the namespace: root's, mode
 * 0710, its group the uid's (sandboxes made before the namespace were 0700, root's group).
 */
export async function letIn(root: string, uid: number): Promise<void> {
  const st = await lstat(root);
  if (st.uid !== 0 || st.gid !== uid) await chown(root, 0, uid);
  if ((st.mode & 0o7777) !== 0o710) await chmod(root, 0o710);
}
