/**
 * E2B sandboxes: one cloud microVM per key, found again through its metadata, so a retried
 * provisioning reconnects instead of creating another. Only what exec is given enters a
 * sandbox: nothing from the worker's environment (FLOTILLA_GIT_TOKEN, E2B_API_KEY, ...) is sent,
 * neither as sandbox-wide variables at creation nor with commands.
 *
 * The template must provide, for the default user `user` (home /home/user): bash; git; the
 * agent CLIs the runs use, on the PATH commands get (sandbox.ts); coreutils 8.31 or later (`env --default-signal`)
 * and util-linux `setsid`, which exec's wrapper needs; and a login profile that prints nothing,
 * because the SDK starts every command as `bash -l -c` and what a profile prints lands in the
 * command's output.
 */
import { ApplicationFailure } from '@temporalio/common';
import { ALL_TRAFFIC, SandboxNotFoundError, type SandboxOpts } from 'e2b';
import { MODEL_APIS } from '../../agents';
import type { Isolation } from '../../contracts/reports';
import { cloudAllowList, modelApiRules, sandboxRules } from '../egress/rules';
import type { Sandbox, SandboxOptions, SandboxProvider } from '../types';
import { type E2BApi, type E2BHandle, type E2BSandboxInfo, e2bSdk } from './api';
import { call, failure } from './errors';
import { E2BSandbox, SCRATCH, WORKSPACE } from './sandbox';

/**
 * The same allowlist as a local sandbox's, as E2B's firewall takes it: all traffic denied but
 * the registries, the request's and operator's hostnames, and every agent kind's model API (E2B
 * fixes the rules at creation, not per command).
 */
function e2bNetwork(options: SandboxOptions): NonNullable<SandboxOpts['network']> {
  const models = MODEL_APIS.map((api) => modelApiRules(api));
  const rules = sandboxRules(options.allowHosts, {
    hostnames: models.flatMap((m) => m.hostnames),
    trusted: models.flatMap((m) => m.trusted),
  });
  return { allowOut: cloudAllowList(rules), denyOut: [ALL_TRAFFIC] };
}

export interface E2BProviderOptions {
  api?: E2BApi;
  /** Template name or id; see the module comment for what it must contain. */
  template?: string;
  /** How long a sandbox outlives its last use; a command's own deadline is added on top while it runs. */
  idleTimeoutMs?: number;
}

/**
 * Keys are `<run>/worker/<sub-task id>` or `<run>/integration`; the parts let an operator list a
 * run's sandboxes, or a sub-task's. flotillaWorker is the sub-task's old name, deprecated ("worker"
 * now means the worker process only) and kept for operators' existing queries.
 */
function metadataFor(key: string): Record<string, string> {
  const parts = /^(.+)\/(?:worker\/([^/]+)|integration)$/.exec(key);
  if (!parts) return { flotillaKey: key };
  const subTask = parts[2];
  return {
    flotillaKey: key,
    flotillaRun: parts[1],
    ...(subTask !== undefined && { flotillaSubTask: subTask, flotillaWorker: subTask }),
  };
}

export class E2BSandboxProvider implements SandboxProvider {
  readonly name = 'e2b';
  private readonly api: E2BApi;
  private readonly template: string;
  private readonly idleTimeoutMs: number;

  constructor(options: E2BProviderOptions = {}) {
    this.api = options.api ?? e2bSdk();
    this.template = options.template ?? 'base';
    this.idleTimeoutMs = options.idleTimeoutMs ?? 60 * 60_000;
  }

  /**
   * The sandboxes under `key`, oldest first. Two provisions racing (a retry while the first
   * attempt still runs) can both create one; everyone then uses the oldest, and destroy kills all.
   */
  private lookup(key: string): Promise<E2BSandboxInfo[]> {
    return call(`looking up the E2B sandbox for ${key}`, async () => {
      const pages = this.api.list({ query: { metadata: { flotillaKey: key } } });
      const found: E2BSandboxInfo[] = [];
      while (pages.hasNext) found.push(...(await pages.nextItems()));
      // The server filters too, but destroy must never reach a sandbox that is not this key's.
      return found
        .filter((s) => s.metadata.flotillaKey === key)
        .sort((a, b) => a.startedAt.getTime() - b.startedAt.getTime() || a.sandboxId.localeCompare(b.sandboxId));
    });
  }

  private open(sandboxId: string): Sandbox {
    return new E2BSandbox(sandboxId, this.api, this.idleTimeoutMs);
  }

  private async existing(key: string): Promise<E2BSandboxInfo> {
    const [found] = await this.lookup(key);
    if (!found)
      throw ApplicationFailure.nonRetryable(`sandbox ${key} does not exist (was it destroyed?)`, 'SandboxMissing');
    return found;
  }

  /** The sandbox, resumed and with its timeout renewed; undefined when it vanished since it was listed. */
  private async reconnect(sandboxId: string): Promise<E2BHandle | undefined> {
    try {
      return await this.api.connect(sandboxId, { timeoutMs: this.idleTimeoutMs });
    } catch (err) {
      if (err instanceof SandboxNotFoundError) return undefined;
      throw failure(`connecting to E2B sandbox ${sandboxId}`, err);
    }
  }

  /** A microVM per sandbox, whatever this host has. */
  checkIsolation(): Isolation {
    return 'e2b';
  }

  async provision(key: string, options: SandboxOptions): Promise<Sandbox> {
    const [found] = await this.lookup(key);
    const sandbox =
      (found && (await this.reconnect(found.sandboxId))) ??
      (await call(`creating an E2B sandbox from template ${this.template}`, () =>
        this.api.create(this.template, {
          metadata: metadataFor(key),
          timeoutMs: this.idleTimeoutMs,
          allowInternetAccess: options.network,
          ...(options.network && { network: e2bNetwork(options) }),
        }),
      ));
    // Also for a sandbox that existed: the attempt that created it may have died before this.
    for (const dir of [WORKSPACE, SCRATCH]) {
      await call(`creating ${dir} in E2B sandbox ${sandbox.sandboxId}`, () => sandbox.files.makeDir(dir));
    }
    return this.open(sandbox.sandboxId);
  }

  /** Does not resume a paused sandbox: its first use does. */
  async find(key: string): Promise<Sandbox | undefined> {
    const [found] = await this.lookup(key);
    return found && this.open(found.sandboxId);
  }

  async destroy(key: string): Promise<void> {
    for (const { sandboxId } of await this.lookup(key)) {
      await call(`killing E2B sandbox ${sandboxId}`, () => this.api.kill(sandboxId));
    }
  }

  /** Freezes the sandbox (memory and files) and stops its clock, e.g. while its sub-task is suspended. */
  async pause(key: string): Promise<void> {
    const { sandboxId } = await this.existing(key);
    await call(`pausing E2B sandbox ${sandboxId}`, () => this.api.pause(sandboxId));
  }

  /** Resumes a paused sandbox ahead of its use; using it would resume it too. */
  async resume(key: string): Promise<void> {
    const { sandboxId } = await this.existing(key);
    await call(`resuming E2B sandbox ${sandboxId}`, () =>
      this.api.connect(sandboxId, { timeoutMs: this.idleTimeoutMs }),
    );
  }
}
