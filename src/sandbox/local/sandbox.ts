/**
 * One local sandbox: a directory on the host whose commands run under bubblewrap (bwrap.ts) as
 * the sandbox's own uid (prelude.ts), inside memory and process cgroups (cgroups.ts), with the
 * disk counted (disk.ts) and the network only through the egress proxy. Without isolation (the
 * worker's explicit opt-out) commands run as plain processes in the host directories.
 */
import { randomBytes } from 'node:crypto';
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
import { bindPoint, ensureBindPoints, preludeArgv, toolPoint } from './prelude';
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
  /** The host directory of the run's objects, mounted read-only; see LocalProviderOptions.objectsFor. */
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
    // The root is root's alone (provider.ts), so `host-tree` is out of every sandbox uid's reach.
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
    if (this.spec.uid !== undefined) await ensureBindPoints(tools);
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
          this.argv(command, cwd, tools, options, cgroups, net),
          '/',
          { ...options, env: { ...options.env, ...net.env }, signal: stop.signal },
          (text) => (tmpReport += text),
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

  /**
   * With a uid: unshare → prelude → setpriv (prelude.ts), then bwrap → wrapper → the command
   * (bwrap.ts), bwrap finding the sandbox's directories and the worker's install `tools` on the
   * bind points. Without one, bwrap binds the host directories itself.
   */
  private argv(
    command: string,
    cwd: string,
    tools: string[],
    options: ExecOptions,
    cgroups: CommandCgroups | undefined,
    net: SandboxNet,
  ): string[] {
    const { root, uid, limits } = this.spec;
    const host = (name: string) => path.join(root, name);
    const objects = this.spec.objects();
    const sandbox = bwrapArgv({
      bwrap: this.spec.bwrap,
      tmpMiB: limits.tmpMiB,
      readOnly: [
        ...systemDirs().map((d) => ({ source: d, path: d })),
        ...tools.map((t) => ({ source: uid === undefined ? t : toolPoint(t), path: t })),
      ],
      sources:
        uid === undefined
          ? { workspace: host('workspace'), scratch: host('scratch'), objects }
          : {
              workspace: bindPoint('workspace'),
              scratch: bindPoint('scratch'),
              objects: objects && bindPoint('objects'),
            },
      passwd: uid === undefined ? undefined : bindPoint('passwd'),
      readOnlyWorkspace: Boolean(options.readOnlyWorkspace),
      net,
      cwd,
      rlimits: rlimitOptions(limits, cgroups !== undefined),
      command,
    });
    if (uid === undefined) return sandbox;
    const prelude = preludeArgv(
      {
        procsFiles: cgroups?.procsFiles() ?? [],
        workspace: host('workspace'),
        scratch: host('scratch'),
        passwd: host('passwd'),
        objects,
        tools,
      },
      uid,
    );
    return [...prelude, ...sandbox];
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
