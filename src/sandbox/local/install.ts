/**
 * What a local sandbox uses of the host outside its own directories, read-only: the system
 * directories, and the worker's install (Node, the agent CLIs Flotilla ships as dependencies,
 * FLOTILLA_SANDBOX_RO_PATHS), which may lie under a private directory (/root is 0700: a checkout
 * in /root/flotilla, Node from nvm in /root/.nvm, a clone under `mktemp -d`). A worker that runs
 * sandboxes as uids of its own lends those through the root prelude (prelude.ts), so their
 * parents do not matter; what they hold must still be readable by any uid, which
 * unreadableInstall checks at start.
 */
import { existsSync, statSync } from 'node:fs';
import path from 'node:path';
import { setting } from '../../config/variables';
import { asRoot } from './uids';

/** Host directories mounted read-only so tools work inside the sandbox: anyone may traverse them. */
const SYSTEM_DIRS = ['/usr', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32', '/etc', '/opt'];

/** The system directories every sandbox sees, read-only, at the same path. */
export function systemDirs(): string[] {
  return SYSTEM_DIRS.filter((d) => existsSync(d));
}

/** A directory of the worker's install a sandbox sees read-only at the same path, and why it needs it. */
export interface ToolDir {
  path: string;
  what: string;
}

/** Node's installation directory (the prefix holding bin/node). */
const nodePrefix = () => path.dirname(path.dirname(process.execPath));

/** The worker's install outside the system directories, each once (none under another). */
export function toolDirs(): ToolDir[] {
  const candidates: ToolDir[] = [
    { path: nodePrefix(), what: "Node's installation" },
    { path: path.resolve(__dirname, '../../../node_modules'), what: 'the agent CLIs' },
    ...setting('FLOTILLA_SANDBOX_RO_PATHS').map((p) => ({ path: p, what: 'FLOTILLA_SANDBOX_RO_PATHS' })),
  ];
  const taken = systemDirs();
  const tools: ToolDir[] = [];
  for (const tool of candidates) {
    const d = tool.path;
    // Never the host's root (Node at /bin/node has / for prefix; /bin is mounted anyway).
    if (!d || d === '/' || !existsSync(d) || taken.some((t) => d === t || d.startsWith(`${t}/`))) continue;
    taken.push(d);
    tools.push(tool);
  }
  return tools;
}

/** The host directories every sandbox sees, read-only, at the same path. */
export function readOnlyDirs(): string[] {
  return [...systemDirs(), ...toolDirs().map((t) => t.path)];
}

const OTHERS_READ = 0o004;
const OTHERS_SEARCH = 0o001;

/**
 * Why a sandbox uid could not use the worker's install, naming the first path in the way and the
 * fix; undefined when it can. Sandbox uids have no groups (setpriv --clear-groups), so only the
 * permissions for others count. Each tool directory is a mount of its own, so only the path from
 * the directory a file is mounted with down to the file matters, not that directory's parents.
 * A worker that is not root runs sandboxes as its own uid, which reads what the worker runs.
 */
export function unreadableInstall(tools: ToolDir[] = toolDirs()): string | undefined {
  if (!asRoot()) return undefined;
  const mounts = [...systemDirs(), ...tools.map((t) => t.path)];
  const needed = [...tools, { path: process.execPath, what: 'Node' }];
  for (const { path: target, what } of needed) {
    const mount = mounts
      .filter((m) => target === m || target.startsWith(`${m}/`))
      .sort((a, b) => b.length - a.length)[0];
    const blocked = mount && firstUnreadable(mount, target, target === process.execPath);
    if (blocked)
      return (
        `sandboxes run as uids of their own (FLOTILLA_SANDBOX_UIDS), which cannot read ${blocked.path} ` +
        `(mode ${blocked.mode}); they need it for ${what} (${target}). Make it readable by all ` +
        `(chmod -R o+rX ${blocked.path}), or install it where every user can read it`
      );
  }
  return undefined;
}

/**
 * The first path from `mount` down to `target` that others may not use: the directories on the
 * way must let them in, and `target` must let them read it (and list or run it).
 */
function firstUnreadable(
  mount: string,
  target: string,
  executable: boolean,
): { path: string; mode: string } | undefined {
  const steps = path.relative(mount, target).split(path.sep).filter(Boolean);
  const chain = steps.map((_, i) => path.join(mount, ...steps.slice(0, i + 1)));
  for (const at of [mount, ...chain]) {
    const stat = statSync(at);
    const needs = at === target ? OTHERS_READ | (stat.isDirectory() || executable ? OTHERS_SEARCH : 0) : OTHERS_SEARCH;
    if ((stat.mode & needs) !== needs) return { path: at, mode: (stat.mode & 0o7777).toString(8).padStart(4, '0') };
  }
  return undefined;
}
