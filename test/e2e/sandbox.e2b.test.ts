import { randomBytes } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { AuthenticationError, CommandExitError, RateLimitError, SandboxNotFoundError, TimeoutError } from 'e2b';
import { describe, it, expect, beforeAll, vi } from 'vitest';
import { type E2BApi, type E2BCreateOpts, e2bSdk } from '../../src/sandbox/e2b/api';
import { E2BSandboxProvider } from '../../src/sandbox/e2b/provider';
import { releaseAtEnd } from '../support/cleanup';
import { machineHas } from '../support/requirements';
import { sandboxContract } from '../support/sandbox-contract';
import { E2BDouble, type DoubleCall } from '../support/e2b-double';

// Pages of one, so every lookup has to page through the list.
sandboxContract(
  'e2b (test double)',
  async () => new E2BSandboxProvider({ api: await E2BDouble.start({ pageSize: 1 }) }),
);

describe.runIf(machineHas('e2b'))('against the real E2B API (E2B_API_KEY is set)', () => {
  const sdk = e2bSdk();
  const created = new Set<string>();
  const recording: E2BApi = {
    ...sdk,
    create: async (template, opts) => {
      const sb = await sdk.create(template, opts);
      created.add(sb.sandboxId);
      return sb;
    },
  };

  /** The processes matching `marker` in every sandbox the suite created that still runs. */
  async function findProcesses(marker: string): Promise<number[]> {
    // A bracket keeps pgrep from matching the shell that runs it, whose command line holds the pattern.
    const pattern = `[${marker[0]}]${marker.slice(1)}`;
    const found = await Promise.all(
      [...created].map(async (id) => {
        const sb = await sdk.connect(id, { timeoutMs: 10 * 60_000 }).catch(() => undefined);
        if (!sb) return [];
        const r = await sb.commands
          .run(`pgrep -f '${pattern}'`, { background: true, timeoutMs: 30_000 })
          .then((c) => c.wait())
          .catch((err: unknown) => (err instanceof CommandExitError ? err : Promise.reject(err)));
        return r.stdout.split('\n').filter(Boolean).map(Number);
      }),
    );
    return found.flat();
  }

  sandboxContract(
    'e2b (real SDK)',
    async () => {
      releaseAtEnd(() => Promise.all([...created].map((id) => sdk.kill(id))));
      return new E2BSandboxProvider({ api: recording, template: process.env.E2B_TEMPLATE });
    },
    { findProcesses, killLatencyMs: 10_000, testTimeoutMs: 120_000 },
  );
});

// Offline, the real SDK fails before any request: that is the adapter's one path testable here.
it.skipIf(process.env.E2B_API_KEY)('the real SDK without an API key fails the lookup as non-retryable', async () => {
  await expect(new E2BSandboxProvider().find('no-key')).rejects.toMatchObject({
    nonRetryable: true,
    type: 'AuthenticationError',
  });
});

describe('e2b provider (against the double)', { timeout: 30_000 }, () => {
  let double: E2BDouble;
  beforeAll(async () => {
    double = await E2BDouble.start();
  });

  const uniq = () => randomBytes(4).toString('hex');
  const provider = (extra: Partial<ConstructorParameters<typeof E2BSandboxProvider>[0]> = {}) =>
    new E2BSandboxProvider({ api: double, ...extra });
  const callsOf = (method: DoubleCall['method'], sandboxId?: string) =>
    double.calls.filter((c) => c.method === method && (sandboxId === undefined || c.sandboxId === sandboxId));
  const sandboxesOf = (key: string) => double.live().filter((s) => s.metadata.flotillaKey === key);
  const text = (data: Uint8Array) => Buffer.from(data).toString();

  it('creates with the key and run in metadata, the network allowlist and a timeout that outlives the work', async () => {
    const run = `run-${uniq()}`;
    const p = provider({ idleTimeoutMs: 45 * 60_000 });
    // The operator's loopback endpoint is for local sandboxes: E2B's firewall gets names only.
    vi.stubEnv('FLOTILLA_EGRESS_ALLOW', '127.0.0.1:8080,mirror.example.org');
    try {
      await p.provision(`${run}/worker/api`, { network: true, allowHosts: ['git.example.org:8443'] });
    } finally {
      vi.unstubAllEnvs();
    }
    await p.provision(`${run}/integration`, { network: false });
    const creates = callsOf('create')
      .slice(-2)
      .map((c) => c.args);
    const allowOut = (creates[0][1] as E2BCreateOpts).network?.allowOut as string[];
    expect(allowOut).toEqual(
      expect.arrayContaining([
        'registry.npmjs.org',
        'api.anthropic.com',
        'api.openai.com',
        'git.example.org',
        'mirror.example.org',
      ]),
    );
    expect(allowOut).not.toContain('127.0.0.1');
    expect(creates).toEqual([
      [
        'base',
        {
          metadata: {
            flotillaKey: `${run}/worker/api`,
            flotillaRun: run,
            flotillaSubTask: 'api',
            flotillaWorker: 'api',
          },
          timeoutMs: 45 * 60_000,
          allowInternetAccess: true,
          network: { allowOut, denyOut: ['0.0.0.0/0'] },
        },
      ],
      [
        'base',
        {
          metadata: { flotillaKey: `${run}/integration`, flotillaRun: run },
          timeoutMs: 45 * 60_000,
          allowInternetAccess: false,
        },
      ],
    ]);
  });

  it('reconnects a retried provision to the same sandbox instead of creating another', async () => {
    const key = `retry-${uniq()}/worker/a`;
    const p = provider();
    const first = await p.provision(key, { network: false });
    await first.writeFile(`${first.workspace}/progress.txt`, 'half done');
    const creates = callsOf('create').length;

    // A retry is a new attempt, possibly in another worker process: a provider with no memory of the first.
    const again = await provider().provision(key, { network: false });
    expect(again.id).toBe(first.id);
    expect(callsOf('create')).toHaveLength(creates);
    expect(sandboxesOf(key)).toHaveLength(1);
    expect(text(await again.readFile(`${again.workspace}/progress.txt`))).toBe('half done');
  });

  it('creates a new sandbox when the one it listed vanished before it could reconnect', async () => {
    const key = `vanished-${uniq()}`;
    const p = provider();
    const first = await p.provision(key, { network: false });
    // Listed, then gone by the time of the connect (it timed out, or someone killed it).
    double.failNext('connect', new SandboxNotFoundError(`Paused sandbox ${first.id} not found`));
    const again = await p.provision(key, { network: false });
    expect(again.id).not.toBe(first.id);
    await double.kill(first.id);
    expect((await again.exec('pwd', { timeoutMs: 10_000 })).output).toBe(`${again.workspace}\n`);
  });

  it('disables the SDK command timeout and enforces its own deadline on the whole tree', async () => {
    const p = provider();
    const sb = await p.provision(`deadline-${uniq()}`, { network: false });
    const r = await sb.exec('sleep 30', { timeoutMs: 300 });
    expect(r).toMatchObject({ timedOut: true, aborted: false });
    const runs = callsOf('commands.run', sb.id).map(
      (c) => c.args as [string, { timeoutMs: number; background: boolean }],
    );
    const exec = runs.find(([cmd]) => cmd.includes('__FLOTILLA_CMD'))!;
    expect(exec[1]).toMatchObject({ timeoutMs: 0, background: true, cwd: sb.workspace });
    // The kill went to the wrapper, which takes the tree down; envd's own kill would reach only the wrapper.
    expect(runs.some(([cmd]) => /^kill -TERM \d+$/.test(cmd))).toBe(true);
  });

  it("the double enforces the SDK's command timeout as envd does: the process dies, its children do not", async () => {
    // Why the provider must not rely on it: this is what a forgotten `timeoutMs: 0` would do to every agent run.
    const sb = await double.create('base', { metadata: {}, timeoutMs: 60_000, allowInternetAccess: false });
    const marker = `sleep 4${randomBytes(3).toString('hex').replace(/\D/g, '7')}`;
    const cmd = await sb.commands.run(`${marker} & echo started; wait`, { background: true, timeoutMs: 300 });
    await expect(cmd.wait()).rejects.toBeInstanceOf(TimeoutError);
    const orphan = await sb.commands.run(`pgrep -f '[${marker[0]}]${marker.slice(1)}'`, {
      background: true,
      timeoutMs: 5_000,
    });
    expect((await orphan.wait()).stdout).not.toBe('');
    await double.kill(sb.sandboxId);
  });

  it('keeps a sandbox alive past its idle timeout while a command runs, and lets it expire when idle', async () => {
    const key = `keepalive-${uniq()}`;
    const p = provider({ idleTimeoutMs: 700 });
    const sb = await p.provision(key, { network: false });
    const running = sb.exec('sleep 1.5; echo survived', { timeoutMs: 10_000 });
    // A use during the command must not shorten the sandbox's life back to the idle timeout.
    await new Promise((r) => setTimeout(r, 300));
    await sb.writeFile(`${sb.scratch}/during.txt`, 'x');
    expect(await running).toMatchObject({ exitCode: 0, output: 'survived\n' });

    const idle = provider({ idleTimeoutMs: 300 });
    const other = await idle.provision(`${key}-idle`, { network: false });
    await new Promise((r) => setTimeout(r, 700));
    expect(await idle.find(`${key}-idle`)).toBeUndefined();
    await expect(other.readFile(`${other.workspace}/x`)).rejects.toMatchObject({ nonRetryable: true });
  });

  it('pauses and resumes a sandbox with its files, and refuses to pause one that does not exist', async () => {
    const key = `pause-${uniq()}`;
    const p = provider();
    const sb = await p.provision(key, { network: false });
    await sb.writeFile(`${sb.workspace}/kept.txt`, 'kept');
    const raw = await double.connect(sb.id, { timeoutMs: 60_000 });

    await p.pause(key);
    expect(sandboxesOf(key)).toMatchObject([{ state: 'paused' }]);
    // A paused sandbox refuses commands, and looking it up does not wake it.
    await expect(raw.commands.run('true', { background: true, timeoutMs: 5_000 })).rejects.toBeInstanceOf(
      SandboxNotFoundError,
    );
    expect((await p.find(key))?.id).toBe(sb.id);
    expect(sandboxesOf(key)).toMatchObject([{ state: 'paused' }]);
    await p.pause(key);

    await p.resume(key);
    expect(sandboxesOf(key)).toMatchObject([{ state: 'running' }]);
    expect(await sb.exec('cat kept.txt', { timeoutMs: 10_000 })).toMatchObject({ exitCode: 0, output: 'kept' });

    // Using a paused sandbox resumes it.
    await p.pause(key);
    expect(text(await sb.readFile(`${sb.workspace}/kept.txt`))).toBe('kept');
    expect(sandboxesOf(key)).toMatchObject([{ state: 'running' }]);

    await expect(p.pause(`never-${uniq()}`)).rejects.toMatchObject({ nonRetryable: true, type: 'SandboxMissing' });
    await expect(p.resume(`never-${uniq()}`)).rejects.toMatchObject({ nonRetryable: true, type: 'SandboxMissing' });
  });

  it('uses the oldest of racing duplicates everywhere, and destroy kills them all', async () => {
    const key = `dup-${uniq()}`;
    const meta = { metadata: { flotillaKey: key }, timeoutMs: 60_000, allowInternetAccess: false };
    const older = await double.create('base', meta);
    await double.create('base', meta);
    const p = provider();
    expect((await p.find(key))?.id).toBe(older.sandboxId);
    expect((await p.provision(key, { network: false })).id).toBe(older.sandboxId);
    await p.destroy(key);
    expect(sandboxesOf(key)).toEqual([]);
  });

  it('sends no host environment into the sandbox, neither at creation nor with commands', async () => {
    const secret = `ghp_${randomBytes(8).toString('hex')}`;
    process.env.FLOTILLA_GIT_TOKEN = secret;
    try {
      const p = provider();
      const sb = await p.provision(`secrets-${uniq()}`, { network: false });
      const r = await sb.exec('env', { timeoutMs: 10_000, env: { AGENT_KEY: 'for-the-agent' } });
      expect(r.output).toContain('AGENT_KEY=for-the-agent');
      expect(r.output).not.toContain(secret);
      expect(r.output).not.toContain('FLOTILLA_GIT_TOKEN');
      // Nothing the provider handed the SDK carried it either.
      expect(JSON.stringify(double.calls)).not.toContain(secret);
    } finally {
      delete process.env.FLOTILLA_GIT_TOKEN;
    }
  });

  it('starts commands with no signal ignored, as a local process starts', async () => {
    // The wrapper starts the command as a `&` job, which bash would otherwise have ignore SIGINT and SIGQUIT.
    const sb = await provider().provision(`signals-${uniq()}`, { network: false });
    expect((await sb.exec('grep SigIgn /proc/$$/status', { timeoutMs: 10_000 })).output).toBe(
      'SigIgn:\t0000000000000000\n',
    );
  });

  it('refuses environment variable names the sandbox could not pass on', async () => {
    const sb = await provider().provision(`envname-${uniq()}`, { network: false });
    await expect(sb.exec('true', { timeoutMs: 5_000, env: { 'NOT-AN-IDENTIFIER': 'x' } })).rejects.toMatchObject({
      nonRetryable: true,
      type: 'InvalidEnvName',
    });
  });

  it('throws non-retryable failures for fatal errors and plain errors for retryable ones', async () => {
    const p = provider();
    double.failNext('create', new AuthenticationError('Unauthorized, please check your credentials.'));
    const auth = await p.provision(`auth-${uniq()}`, { network: false }).catch((e: unknown) => e);
    expect(auth).toBeInstanceOf(ApplicationFailure);
    expect(auth).toMatchObject({ nonRetryable: true, type: 'AuthenticationError' });

    const template = await provider({ template: 'no-such-template' })
      .provision(`tpl-${uniq()}`, { network: false })
      .catch((e: unknown) => e);
    expect(template).toMatchObject({ nonRetryable: true });

    double.failNext('list', new RateLimitError('Rate limit exceeded, please try again later'));
    const limited = await p.find(`rate-${uniq()}`).catch((e: unknown) => e);
    expect(limited).toBeInstanceOf(Error);
    expect(limited).not.toBeInstanceOf(ApplicationFailure);
    expect((limited as Error).cause).toBeInstanceOf(RateLimitError);

    const sb = await p.provision(`missing-file-${uniq()}`, { network: false });
    await expect(sb.readFile(`${sb.workspace}/nope`)).rejects.toMatchObject({
      nonRetryable: true,
      type: 'FileNotFoundError',
    });
  });
});
