/**
 * One local sandbox: a directory on the host whose commands run under bubblewrap (bwrap.ts) as
 * the sandbox's own uid (namespace.ts), inside memory and process cgroups (cgroups.ts), with the
 * disk counted (disk.ts) and the network only through the egress proxy. Without isolation (the
 * worker's explicit opt-out) commands run as plain processes in the host directories.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { permanent } from '../../contracts/failures';
import type { Isolation } from '../../contracts/reports';
import { type SandboxNet, withSandboxNet } from '../egress/sandbox-net';
import { sandboxRules } from '../egress/rules';
import type { ExecOptions, ExecResult, HostWorkspace, Sandbox } from '../types';
import { INSIDE_SCRATCH, INSIDE_WORKSPACE, bwrapArgv } from './bwrap';
import { CommandCgroups } from './cgroups';
import { SandboxDisk, tmpFull } from './disk';
import { type FileOptions, SandboxFiles } from './files';
import { systemDirs, toolDirs } from './install';
import { type SandboxLimits, rlimitOptions } from './limits';
import { SandboxNamespace, letIn, toolPoint } from './namespace';
import { lendPacks } from './objects';
import { runProcessGroup } from './process-group';

export interface LocalSandboxSpec {
  id: string;
  /** The sandbox's directory on the host: workspace/, scratch/ and (with a uid) passwd. */
  root: string;
  isolation: Isolation;
  network: boolean;
  /** Hostnames the request adds to the egress allowlist. */
  allowHosts: string[] | undefined;
  limits: SandboxLimits;
  bwrap: string;
  /** The host uid commands run as; undefined when the worker is not root and cannot hand one out. */
  uid: number | undefined;
  /** The host directory of the run's objects, lent read-only (linked into the sandbox's own objects/); see LocalProviderOptions.objectsFor. */
  objects: () => string | undefined;
}

export class LocalSandbox implements Sandbox {
  readonly id: string;
  readonly isolation: Isolation;
  readonly workspace: string;
  readonly scratch: string;
  readonly host: HostWorkspace;
  private readonly files: SandboxFiles;
  private readonly disk: SandboxDisk;

  constructor(private readonly spec: LocalSandboxSpec) {
    this.id = spec.id;
    this.isolation = spec.isolation;
    const isolated = spec.isolation === 'bubblewrap';
    const host = (name: string) => path.join(spec.root, name);
    this.workspace = isolated ? INSIDE_WORKSPACE : host('workspace');
    this.scratch = isolated ? INSIDE_SCRATCH : host('scratch');
    // `host-tree` is root's alone (mode 0700), out of every sandbox uid's reach.
    this.host = { dir: host('workspace'), state: host('host-tree'), uid: spec.uid };
    this.files = new SandboxFiles(
      spec.root,
      [
        { inside: this.workspace, host: host('workspace') },
        { inside: this.scratch, host: host('scratch') },
      ],
      spec.uid,
    );
    this.disk = new SandboxDisk([host('workspace'), host('scratch')], spec.limits);
  }

  async exec(command: string, options: ExecOptions): Promise<ExecResult> {
    const cwd = options.cwd ?? this.workspace;
    const env: Record<string, string> = {
      PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin',
      HOME: this.scratch,
      LANG: 'C.UTF-8',
      TMPDIR: '/tmp',
      ...options.env,
    };
    if (this.isolation === 'none') {
      return runProcessGroup(['bash', '-c', command], this.files.hostPath(cwd), { ...options, env });
    }
    return this.execIsolated(command, cwd, { ...options, env });
  }

  /** A command under bubblewrap, stopped at the first limit it hits and failing permanently saying which. */
  private async execIsolated(command: string, cwd: string, options: ExecOptions): Promise<ExecResult> {
    const { limits } = this.spec;
    const tools = toolDirs().map((t) => t.path);
    const ns = await this.namespace(tools);
    const objects = await this.objects();
    const cgroups = await CommandCgroups.create(`${this.id}-${randomBytes(4).toString('hex')}`, limits);
    let tmpReport = '';
    // The command stops at the caller's signal, or once the disk watch finds it over a limit.
    const stop = new AbortController();
    const onAbort = () => stop.abort();
    if (options.signal?.aborted) stop.abort();
    options.signal?.addEventListener('abort', onAbort, { once: true });
    let diskFull: string | undefined;
    const unwatch = this.disk.watch((reason) => {
      diskFull ??= reason;
      stop.abort();
    });
    try {
      // Its own network namespace always; with network on, the allowlisting proxy is its one way out.
      const rules = this.spec.network ? sandboxRules(this.spec.allowHosts, options.egress) : undefined;
      const result = await withSandboxNet(rules, options.onOutput, (net) =>
        runProcessGroup(
          this.argv({ command, cwd, tools, objects, readOnly: Boolean(options.readOnlyWorkspace) }, net, ns, cgroups),
          '/',
          { ...options, env: { ...options.env, ...net.env }, signal: stop.signal },
          {
            onReport: (text) => (tmpReport += text),
            // Its first process joins the cgroups before it starts anything.
            ...(cgroups && { admit: (pid: number) => cgroups.join(pid) }),
          },
        ),
      );
      unwatch();
      const reason =
        diskFull ??
        (await cgroups?.hit(limits)) ??
        tmpFull(tmpReport, limits) ??
        (await this.disk.afterCommand(result.exitCode));
      if (reason)
        throw permanent('ResourceLimit', reason, { exitCode: result.exitCode, tail: result.output.slice(-2000) });
      return result;
    } finally {
      unwatch();
      options.signal?.removeEventListener('abort', onAbort);
      await cgroups?.remove();
    }
  }

  /** With a uid: the sandbox namespace, and the sandbox's directory open to that uid in it. */
  private async namespace(tools: string[]): Promise<SandboxNamespace | undefined> {
    const { root, uid } = this.spec;
    if (uid === undefined) return undefined;
    await letIn(root, uid);
    return SandboxNamespace.of(path.dirname(root), tools);
  }

  /**
   * The sandbox's own links to its run's objects (the run store, see git/run-mirror.ts), made
   * when the store is there and they are not yet: read-only for the sandbox, and its alone (no
   * other run's sandbox can reach them), and they stay usable when the store goes.
   */
  private async objects(): Promise<string | undefined> {
    const dir = path.join(this.spec.root, 'objects');
    const store = this.spec.objects();
    if (store) await lendPacks(store, dir);
    return existsSync(dir) ? dir : undefined;
  }

  /**
   * With a uid: nsenter into the sandbox namespace as the uid (namespace.ts), then bwrap → the
   * wrapper's bash, which runs the command (bwrap.ts); bwrap finds the sandbox's directories and
   * the worker's install on the namespace's points. Without a uid, bwrap binds the host
   * directories itself.
   */
  private argv(
    c: { command: string; cwd: string; tools: string[]; objects?: string; readOnly: boolean },
    net: SandboxNet,
    ns: SandboxNamespace | undefined,
    cgroups: CommandCgroups | undefined,
  ): string[] {
    const { root, uid, limits } = this.spec;
    const at = (name: string) => (ns ? ns.pathOf(path.join(root, name)) : path.join(root, name));
    const sandbox = bwrapArgv({
      bwrap: this.spec.bwrap,
      tmpMiB: limits.tmpMiB,
      readOnly: [
        ...systemDirs().map((d) => ({ source: d, path: d })),
        ...c.tools.map((t) => ({ source: ns ? toolPoint(t) : t, path: t })),
      ],
      sources: { workspace: at('workspace'), scratch: at('scratch'), objects: c.objects && at('objects') },
      passwd: ns ? at('passwd') : undefined,
      readOnlyWorkspace: c.readOnly,
      net,
      cwd: c.cwd,
      rlimits: rlimitOptions(limits, cgroups !== undefined),
      admission: cgroups !== undefined,
      command: c.command,
    });
    return ns && uid !== undefined ? [...ns.enter(uid), ...sandbox] : sandbox;
  }

  writeFile(inside: string, data: Uint8Array | string, options?: FileOptions): Promise<void> {
    return this.files.writeFile(inside, data, options);
  }

  copyIn(hostPath: string, inside: string): Promise<void> {
    return this.files.copyIn(hostPath, inside);
  }

  readFile(inside: string): Promise<Uint8Array> {
    return this.files.readFile(inside);
  }

  copyOut(inside: string, hostPath: string): Promise<void> {
    return this.files.copyOut(inside, hostPath);
  }
}
