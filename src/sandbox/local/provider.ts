/**
 * Local sandboxes: one directory per sandbox under the data directory, whose commands run under
 * bubblewrap as an unprivileged host uid of their own (sandbox.ts has the whole picture). Its
 * run's git objects, when the worker lends them (objectsFor), are mounted read-only.
 *
 * Isolation fails closed: without a working bubblewrap, provisioning refuses (IsolationUnavailable)
 * unless the worker was started with FLOTILLA_ISOLATION=none, in which case commands run as plain
 * processes and every report says so.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, chown, mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setting } from '../../config/variables';
import { permanent } from '../../contracts/failures';
import type { Isolation } from '../../contracts/reports';
import type { SandboxLimitsRequest } from '../../contracts/request';
import type { Sandbox, SandboxOptions, SandboxProvider } from '../types';
import { INSIDE_SCRATCH } from './bwrap';
import { CommandCgroups } from './cgroups';
import { MAX_LIMITS, type SandboxLimits, capLimits } from './limits';
import { defaultBwrap, probeBubblewrap } from './probe';
import { letIn } from './namespace';
import { LocalSandbox } from './sandbox';
import { type UidRange, asRoot, passwdWith, uidIn } from './uids';

export interface LocalProviderOptions {
  /** The bubblewrap binary. Default: $FLOTILLA_BWRAP, else "bwrap" on the PATH. */
  bwrap?: string;
  /** true runs commands as plain processes, unisolated: the explicit opt-out. Default: FLOTILLA_ISOLATION=none. */
  noIsolation?: boolean;
  /** The worker's maximum for each limit. Default: $FLOTILLA_SANDBOX_MAX_LIMITS, else MAX_LIMITS. */
  maxLimits?: Partial<SandboxLimits>;
  /** Host uids handed out to sandboxes, one per sandbox key. Default: $FLOTILLA_SANDBOX_UIDS ("200000-265535"). */
  uids?: UidRange;
  /**
   * The host directory of git objects a key's sandbox may read (its run's object store, see
   * git/run-mirror.ts), mounted read-only at SANDBOX_OBJECTS; undefined for none. Asked at every
   * command, so a store made after provisioning is seen.
   */
  objectsFor?: (key: string) => string | undefined;
}

export class LocalSandboxProvider implements SandboxProvider {
  readonly name = 'local';
  private readonly bwrap: string;
  private readonly noIsolation: boolean;
  private readonly maxLimits: SandboxLimits;
  private readonly uids: UidRange;
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
    return asRoot() ? uidIn(this.uids, key) : undefined;
  }

  /** The defaults, overridden by the request, each capped at the worker's maximum. */
  limitsFor(requested: SandboxLimitsRequest = {}): SandboxLimits {
    return capLimits(requested, this.maxLimits);
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
    return new LocalSandbox({
      id: path.basename(root),
      root,
      isolation,
      network: options.network,
      allowHosts: options.allowHosts,
      limits: this.limitsFor(options.limits),
      bwrap: this.bwrap,
      uid: isolation === 'bubblewrap' ? this.uidFor(key) : undefined,
      objects: () => this.objectsFor(key),
    });
  }

  async provision(key: string, options: SandboxOptions): Promise<Sandbox> {
    const sandbox = this.open(key, options);
    const root = this.dirFor(key);
    const uid = sandbox.isolation === 'bubblewrap' ? this.uidFor(key) : undefined;
    // Root's: no sandbox uid gets into another sandbox's directory, whatever the data directory's
    // mode; its own uid only traverses it, in the sandbox namespace (namespace.ts).
    await mkdir(root, { recursive: true, mode: 0o700 });
    await chmod(root, 0o700);
    await mkdir(path.join(root, 'workspace'), { recursive: true });
    await mkdir(path.join(root, 'scratch'), { recursive: true });
    if (uid !== undefined) {
      await letIn(root, uid);
      // The sandbox's own directories belong to its uid; the root holding them stays root's.
      await chown(path.join(root, 'workspace'), uid, uid);
      await chown(path.join(root, 'scratch'), uid, uid);
      await writeFile(path.join(root, 'passwd'), await passwdWith(uid, INSIDE_SCRATCH), { mode: 0o444 });
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
