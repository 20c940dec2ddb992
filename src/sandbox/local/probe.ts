/**
 * Whether bubblewrap can start a sandbox on this host, asked once per worker process and binary.
 * Isolation fails closed: the provider refuses to provision when the answer is no, unless the
 * worker was started with the explicit opt-out (FLOTILLA_ISOLATION=none).
 */
import { spawnSync } from 'node:child_process';
import type { Isolation } from '../../contracts/reports';

import { setting } from '../../config/variables';
import { asRoot } from './uids';

export interface BubblewrapProbe {
  isolation: Isolation;
  /** Why bubblewrap is not used, when it is not. */
  reason?: string;
}

/** The bubblewrap binary: $FLOTILLA_BWRAP, else "bwrap" on the PATH. */
export function defaultBwrap(): string {
  return setting('FLOTILLA_BWRAP');
}

/**
 * As root, also what the sandbox namespace needs (namespace.ts): a bind mount in a mount
 * namespace of its own (a container without CAP_SYS_ADMIN cannot), then nsenter handing bwrap
 * down to a sandbox uid.
 */
const PROBE_NAMESPACE = 'PATH=/usr/sbin:/usr/bin:/sbin:/bin mount --bind /usr /usr && exec "$@"';

/** The probe's argv: bwrap as a sandbox command starts it, minus the sandbox's own mounts. */
export function probeArgv(bwrap: string, root: boolean, uid: number): string[] {
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
  if (!root) return inner;
  const namespace = ['unshare', '--mount', '--propagation', 'slave', '--', '/bin/sh', '-c', PROBE_NAMESPACE];
  return [...namespace, 'flotilla-probe', 'nsenter', '-S', String(uid), '-G', String(uid), '--', ...inner];
}

const probes = new Map<string, BubblewrapProbe>();

/**
 * Checks once per process and binary whether bubblewrap can start a sandbox here the way exec
 * does: as an unprivileged uid in its own user namespace (root hands it down with setpriv).
 * Whether to run without it is not its question: that is the worker's explicit opt-out.
 */
export function probeBubblewrap(bwrap = defaultBwrap()): BubblewrapProbe {
  const known = probes.get(bwrap);
  if (known) return known;
  const argv = probeArgv(bwrap, asRoot(), setting('FLOTILLA_SANDBOX_UIDS').first);
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
