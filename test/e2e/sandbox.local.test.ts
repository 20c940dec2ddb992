/**
 * The local provider against the sandbox contract (once as this host runs it, once without
 * bubblewrap), plus what only a local sandbox can promise: that bubblewrap actually confines
 * commands on this host.
 */
import { execFile, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { describe, it, expect, beforeAll, vi } from 'vitest';
import { ApplicationFailure } from '@temporalio/common';
import { probeBubblewrap } from '../../src/sandbox/local/probe';
import { LocalSandboxProvider } from '../../src/sandbox/local/provider';
import type { Sandbox } from '../../src/sandbox/types';
import { checkoutNode, copyCheckout, copyNode } from '../support/checkout';
import { machineHas } from '../support/requirements';
import { sandboxContract } from '../support/sandbox-contract';
import { tempDir } from '../support/temp';

const LOCAL_TS = path.join(__dirname, '../../src/sandbox/local/provider.ts');
const TSX = path.join(__dirname, '../../node_modules/.bin/tsx');

/** A provider on a directory of its own, removed when the test (or file) ends. */
function tempProvider(options?: ConstructorParameters<typeof LocalSandboxProvider>[1]) {
  const baseDir = tempDir('sandbox');
  return { provider: new LocalSandboxProvider(baseDir, options), baseDir };
}

/** Whether bubblewrap can start a sandbox here, asked independently of the code under test. */
const bwrapWorks = machineHas('bwrap');

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
const text = async (sb: Sandbox, p: string) => Buffer.from(await sb.readFile(p)).toString();
const uniq = () => randomBytes(6).toString('hex');

sandboxContract(`local (${bwrapWorks ? 'bubblewrap' : 'no isolation'})`, async () => tempProvider().provider);

// The explicit opt-out gives the plain-process path the whole contract too.
sandboxContract('local (FLOTILLA_ISOLATION=none)', async () => tempProvider({ noIsolation: true }).provider);

describe('local sandbox: host side', () => {
  let env: ReturnType<typeof tempProvider>;
  let outsideDir: string;
  beforeAll(() => {
    env = tempProvider();
    outsideDir = tempDir('outside');
  });

  it('destroy removes the sandbox directory from the host', async () => {
    const key = `run-${uniq()}/worker/api`;
    const sb = await env.provider.provision(key, { network: false });
    await sb.writeFile(`${sb.workspace}/f.txt`, 'x');
    expect(existsSync(env.provider.dirFor(key))).toBe(true);
    await env.provider.destroy(key);
    expect(existsSync(env.provider.dirFor(key))).toBe(false);
  });

  it('readFile and writeFile do not follow symlinks a command planted to reach the host', async () => {
    // Commands control everything under workspace and scratch; Flotilla itself (often root)
    // later writes prompts and reads bundles at fixed paths there.
    const sb = await env.provider.provision(`symlinks-${uniq()}`, { network: false });
    const hostSecret = path.join(outsideDir, 'secret.txt');
    writeFileSync(hostSecret, 'host secret');
    const planted = await sb.exec(
      [
        `ln -s ${q(hostSecret)} ${q(`${sb.scratch}/prompt.md`)}`,
        `ln -s ${q(outsideDir)} ${q(`${sb.scratch}/dir`)}`,
        `ln -s ${q(path.join(outsideDir, 'created.txt'))} ${q(`${sb.workspace}/dangling`)}`,
      ].join(' && '),
      { timeoutMs: 10_000 },
    );
    expect(planted.exitCode).toBe(0);

    await expect(sb.readFile(`${sb.scratch}/prompt.md`)).rejects.toThrow();
    await expect(sb.writeFile(`${sb.scratch}/prompt.md`, 'overwritten')).rejects.toThrow();
    await expect(sb.readFile(`${sb.scratch}/dir/secret.txt`)).rejects.toThrow();
    await expect(sb.writeFile(`${sb.scratch}/dir/pwned.txt`, 'x')).rejects.toThrow();
    await expect(sb.writeFile(`${sb.workspace}/dangling`, 'x')).rejects.toThrow();

    expect(existsSync(path.join(outsideDir, 'pwned.txt'))).toBe(false);
    expect(existsSync(path.join(outsideDir, 'created.txt'))).toBe(false);
    expect(readFileSync(hostSecret, 'utf8')).toBe('host secret');
  });

  it('runs as plain processes when the worker starts with FLOTILLA_ISOLATION=none, and says so', async () => {
    // A separate process, started with the variable as an operator would.
    const script = `
      const { LocalSandboxProvider } = require(${JSON.stringify(LOCAL_TS)});
      (async () => {
        const sb = await new LocalSandboxProvider(${JSON.stringify(env.baseDir)}).provision('none-probe', { network: false });
        const r = await sb.exec('echo hi', { timeoutMs: 10000 });
        console.log(JSON.stringify({ isolation: sb.isolation, workspace: sb.workspace, r }));
      })().catch((e) => { console.error(e); process.exit(1); });
    `;
    const stdout = await new Promise<string>((resolve, reject) => {
      execFile(
        TSX,
        ['-e', script],
        { env: { ...process.env, FLOTILLA_ISOLATION: 'none' }, timeout: 60_000 },
        (err, out, errOut) => (err ? reject(new Error(`${err.message}\n${errOut}`)) : resolve(out)),
      );
    });
    const got = JSON.parse(stdout.trim().split('\n').pop()!);
    expect(got.isolation).toBe('none');
    expect(got.r).toMatchObject({ exitCode: 0, output: 'hi\n', timedOut: false, aborted: false });
    // Without a mount namespace the workspace is simply the host directory.
    expect(got.workspace).toBe(path.join(env.provider.dirFor('none-probe'), 'workspace'));
  });
});

describe.runIf(bwrapWorks)('local sandbox: bubblewrap confinement', () => {
  let env: ReturnType<typeof tempProvider>;
  beforeAll(() => {
    env = tempProvider();
  });

  const provision = (label: string, network = false) =>
    env.provider.provision(`confine-${uniq()}/${label}`, { network });
  const run = (sb: Sandbox, command: string) => sb.exec(command, { timeoutMs: 10_000 });

  it('reports bubblewrap isolation', async () => {
    expect(probeBubblewrap()).toEqual({ isolation: 'bubblewrap' });
    const sb = await provision('isolation');
    expect(sb.isolation).toBe('bubblewrap');
  });

  it('cannot write to the host system, not even as root by remounting it', async () => {
    const sb = await provision('system');
    const name = `flotilla-contract-${uniq()}`;
    const targets = [`/usr/${name}`, `/etc/${name}`, `/opt/${name}`, `/usr/local/bin/${name}`];
    try {
      for (const t of targets) {
        const r = await run(sb, `echo pwned > ${q(t)}`);
        expect(r.exitCode, `writing ${t}`).not.toBe(0);
      }
      // Root inside the sandbox keeps its capabilities unless they are dropped, and with them
      // could simply make the read-only system writable again.
      await run(
        sb,
        `mount -o remount,rw /usr; mount -o remount,rw /etc; ${targets.map((t) => `echo pwned > ${q(t)}`).join('; ')}`,
      );
      for (const t of targets) expect(existsSync(t), `${t} was written on the host`).toBe(false);
    } finally {
      for (const t of targets) rmSync(t, { force: true });
    }
  });

  it("cannot see or write the host data directory, its own sandbox's host path, or another sandbox", async () => {
    const a = await provision('a');
    const bKey = `confine-${uniq()}/b`;
    const b = await env.provider.provision(bKey, { network: false });
    // A value no error message can contain by chance (a temporary path with a capital B could).
    const secret = `b-secret-${uniq()}`;
    await b.writeFile(`${b.workspace}/b.txt`, secret);
    const bHost = env.provider.dirFor(bKey);

    for (const dir of [env.baseDir, bHost, path.join(bHost, 'workspace')]) {
      expect((await run(a, `ls ${q(dir)}`)).exitCode, `${dir} is visible`).not.toBe(0);
    }
    expect((await run(a, `cat ${q(path.join(bHost, 'workspace/b.txt'))}`)).output).not.toContain(secret);
    // Whatever such a write lands on inside the sandbox, it must not reach B on the host.
    await run(
      a,
      `mkdir -p ${q(path.join(bHost, 'workspace'))}; echo pwned > ${q(path.join(bHost, 'workspace/b.txt'))}; echo pwned > ${q(path.join(bHost, 'workspace/new.txt'))}`,
    );
    expect(await text(b, `${b.workspace}/b.txt`)).toBe(secret);
    expect(existsSync(path.join(bHost, 'workspace/new.txt'))).toBe(false);
  });

  it('has a private /tmp', async () => {
    const sb = await provision('tmp');
    const inside = `/tmp/flotilla-contract-${uniq()}`;
    const r = await run(sb, `echo from-sandbox > ${q(inside)} && cat ${q(inside)}`);
    expect(r).toMatchObject({ exitCode: 0, output: 'from-sandbox\n' });
    expect(existsSync(inside)).toBe(false);

    const onHost = `/tmp/flotilla-contract-host-${uniq()}`;
    writeFileSync(onHost, 'host');
    try {
      expect((await run(sb, `cat ${q(onHost)}`)).exitCode).not.toBe(0);
    } finally {
      rmSync(onHost, { force: true });
    }
  });

  it('has no network unless asked for it, and then only through the proxy to what the worker allows', async () => {
    const server = http.createServer((_req, res) => res.end('hello-from-host\n'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as net.AddressInfo).port;
    const direct = `cat < /dev/tcp/127.0.0.1/${port}`;
    const proxied = `curl -sS -m 10 http://127.0.0.1:${port}/`;
    try {
      const offline = await provision('offline', false);
      for (const command of [direct, proxied]) {
        const r = await run(offline, command);
        expect(r.exitCode).not.toBe(0);
        expect(r.output).not.toContain('hello-from-host');
      }

      // With network on, the sandbox still has its own namespace: only the proxy leads out, and
      // it refuses loopback unless the worker's configuration names that exact endpoint.
      const online = await provision('online', true);
      expect((await run(online, direct)).output).toContain('Connection refused');
      const refused = await run(online, proxied);
      expect(refused.output).toContain(
        `the sandbox's network refused 1 connection(s):\n  GET http://127.0.0.1:${port}/: 127.0.0.1:${port} is not on the sandbox's allowlist`,
      );
      vi.stubEnv('FLOTILLA_EGRESS_ALLOW', `127.0.0.1:${port}`);
      expect(await run(online, proxied)).toMatchObject({ exitCode: 0, output: 'hello-from-host\n' });
    } finally {
      vi.unstubAllEnvs();
      server.close();
    }
  });

  it('runs as an unprivileged host uid of its own, which owns the workspace and scratch, and only traverses the sandbox root', async () => {
    const [a, b] = [await provision('uid-a'), await provision('uid-b')];
    const ids = [];
    for (const sb of [a, b]) {
      const r = await run(sb, `id -u; stat -c %u ${q(sb.workspace)} ${q(sb.scratch)}; id -un`);
      expect(r.exitCode).toBe(0);
      const [uid, ws, scratch, name] = r.output.trim().split('\n');
      expect(Number(uid)).toBeGreaterThanOrEqual(200_000);
      expect([ws, scratch]).toEqual([uid, uid]);
      // It has a name, so tools that look themselves up work.
      expect(name).toBe('sandbox');
      ids.push(uid);
    }
    expect(ids[0]).not.toBe(ids[1]);
    // A sandbox's id is its directory's name: root's, and only its own uid may pass through it (its
    // group is the uid's; nothing for others), to the directories bwrap mounts.
    const root = statSync(path.join(env.baseDir, a.id));
    expect([root.uid, root.gid, root.mode & 0o777]).toEqual([0, Number(ids[0]), 0o710]);
  });

  it('gives a setuid-root binary no effect', async () => {
    const sb = await provision('setuid');
    const planted = path.join(env.baseDir, sb.id, 'workspace', 'id-suid');
    copyFileSync('/usr/bin/id', planted);
    chownSync(planted, 0, 0);
    chmodSync(planted, 0o4755);
    expect(statSync(planted).mode & 0o4000).toBe(0o4000);
    const r = await run(sb, './id-suid -u; ./id-suid -ru; grep NoNewPrivs /proc/self/status');
    const [euid, ruid, nnp] = r.output.trim().split('\n');
    expect(euid).not.toBe('0');
    expect(euid).toBe(ruid);
    expect(nnp).toMatch(/NoNewPrivs:\s+1/);
  });

  it('writeFile makes files the sandbox can use, and read-only ones it cannot change', async () => {
    const sb = await provision('ownership');
    await sb.writeFile(`${sb.workspace}/new/dirs/file.txt`, 'mine');
    await sb.writeFile(`${sb.workspace}/oracle/test.sh`, 'oracle', { readOnly: true });
    const usable = await run(sb, 'echo more >> new/dirs/file.txt && touch new/dirs/another && cat new/dirs/file.txt');
    expect(usable).toMatchObject({ exitCode: 0, output: 'minemore\n' });
    const tamper = await run(
      sb,
      'cat oracle/test.sh; echo x > oracle/test.sh; echo x >> oracle/test.sh; chmod u+w oracle/test.sh; echo x > oracle/test.sh',
    );
    expect(tamper.output.startsWith('oracle')).toBe(true);
    expect(tamper.output).toContain('Permission denied');
    expect(await text(sb, `${sb.workspace}/oracle/test.sh`)).toBe('oracle');
    // Its directory stays the sandbox's, so the file can be removed (a hash check notices that)
    // and the next checkout can clean the workspace.
    expect((await run(sb, 'rm -f oracle/test.sh && rmdir oracle && echo removed')).output).toBe('removed\n');
  });

  it('bounds /tmp in memory: a command filling it gets no further than the limit, and fails saying so', async () => {
    const sb = await env.provider.provision(`confine-${uniq()}/tmp-full`, { network: false, limits: { tmpMiB: 8 } });
    const failure = await sb
      .exec('df -k /tmp | tail -1; head -c 64M /dev/zero > /tmp/fill; stat -c "size %s" /tmp/fill', {
        timeoutMs: 10_000,
      })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(failure).toBeInstanceOf(ApplicationFailure);
    const f = failure as ApplicationFailure;
    expect([f.type, f.nonRetryable, f.message]).toEqual([
      'ResourceLimit',
      true,
      "the sandbox's /tmp is full (limit 8 MiB)",
    ]);
    const tail = (f.details?.[0] as { tail: string }).tail;
    expect(Number(/size (\d+)/.exec(tail)?.[1])).toBeLessThanOrEqual(8 * 1024 * 1024);
    expect(tail).toMatch(/^tmpfs\s+8192\s/);
  });

  it('runs commands under a file size limit they cannot raise', async () => {
    const sb = await env.provider.provision(`confine-${uniq()}/rlimits`, {
      network: false,
      limits: { workspaceMiB: 8 },
    });
    const r = await run(
      sb,
      'ulimit -H -f; ulimit -S -f; (ulimit -f unlimited 2>/dev/null && echo raised) || echo refused; (ulimit -H -f 9999 2>/dev/null && echo raised) || echo refused',
    );
    expect(r.output).toBe('8192\n8192\nrefused\nrefused\n');
  });

  it('stops a command that fills the disk while it runs, without waiting for it to end', async () => {
    const sb = await env.provider.provision(`confine-${uniq()}/disk-watch`, {
      network: false,
      limits: { workspaceMiB: 8 },
    });
    const m = `sleep 60.${randomBytes(3).readUIntBE(0, 3)}`;
    const started = Date.now();
    // Each file stays under the per-file limit; only their sum is over it.
    const failure = await sb
      .exec(`for i in 1 2 3; do head -c 6M /dev/zero > part$i; done; ${m}`, { timeoutMs: 50_000 })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(failure).toBeInstanceOf(ApplicationFailure);
    expect([(failure as ApplicationFailure).type, (failure as ApplicationFailure).message]).toEqual([
      'ResourceLimit',
      'workspace holds 18 MiB; the limit is 8 MiB',
    ]);
    // Within a couple of disk checks (every 5 s), not at the deadline.
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(spawnSync('pgrep', ['-f', m]).status).toBe(1);
  });

  it('destroy also removes the cgroups a worker that died mid-command left behind', async () => {
    const key = `confine-${uniq()}/cgroups`;
    const sb = await env.provider.provision(key, { network: false });
    const leftovers = ['memory', 'pids'].map((c) => path.join('/sys/fs/cgroup', c, 'flotilla', `${sb.id}-deadbeef`));
    for (const dir of leftovers) mkdirSync(dir, { recursive: true });
    // A command's own cgroups are gone once it has finished.
    await run(sb, 'true');
    expect(leftovers.map(existsSync)).toEqual([true, true]);
    await env.provider.destroy(key);
    expect(leftovers.map(existsSync)).toEqual([false, false]);
    expect(readdirSync('/sys/fs/cgroup/memory/flotilla').filter((n) => n.startsWith(sb.id))).toEqual([]);
  });
});

describe.runIf(bwrapWorks && machineHas('root'))('local sandbox: a worker that is not root', () => {
  it('still confines commands in a user namespace, with the same mounts and limits', async () => {
    // The worker itself runs as nobody: no uid to hand out, no cgroups, rlimits instead. It runs a
    // copy of this checkout where nobody may read it, from a directory nobody may enter (this
    // checkout, and the suite's working directory, may be under a 0700 directory).
    const base = tempDir('nonroot');
    chownSync(base, 65534, 65534);
    const reachable = tempDir('nonroot-install');
    chmodSync(reachable, 0o755);
    const checkout = copyCheckout(reachable);
    const [node, ...loader] = checkoutNode(checkout, copyNode(reachable));
    const script = `
      const { LocalSandboxProvider } = require(${JSON.stringify(path.join(checkout, 'src/sandbox/local/provider.ts'))});
      (async () => {
        const sb = await new LocalSandboxProvider(${JSON.stringify(path.join(base, 'sandboxes'))}).provision('k', { network: false, limits: { tmpMiB: 8 } });
        const r = await sb.exec('id -u; echo x 2>/dev/null > /proc/sys/kernel/core_pattern || echo refused; echo ok > f && cat f; ulimit -H -u; ulimit -H -v', { timeoutMs: 10000 });
        const full = await sb.exec('head -c 64M /dev/zero > /tmp/fill', { timeoutMs: 10000 }).then(() => 'no failure', (e) => e.type + ': ' + e.message);
        console.log(JSON.stringify({ isolation: sb.isolation, r, full }));
      })().catch((e) => { console.error(e); process.exit(1); });
    `;
    const stdout = await new Promise<string>((resolve, reject) => {
      execFile(
        'setpriv',
        ['--reuid', '65534', '--regid', '65534', '--clear-groups', node, ...loader, '-e', script],
        { env: { ...process.env, HOME: base }, cwd: base, timeout: 60_000 },
        (err, out, errOut) => (err ? reject(new Error(`${err.message}\n${errOut}`)) : resolve(out)),
      );
    });
    const got = JSON.parse(stdout.trim().split('\n').pop()!);
    expect(got.isolation).toBe('bubblewrap');
    // No cgroups for a worker that is not root: rlimits bound processes and memory instead.
    expect(got.r.output).toBe('65534\nrefused\nok\n1024\n4194304\n');
    expect(got.full).toBe("ResourceLimit: the sandbox's /tmp is full (limit 8 MiB)");
  });
});

describe('local sandbox: fails closed', () => {
  it('refuses to provision without a working bubblewrap, and runs unisolated only when told to', async () => {
    const { baseDir } = tempProvider();
    const broken = new LocalSandboxProvider(baseDir, { bwrap: '/bin/false', noIsolation: false });
    const refused = await broken.provision('refused', { network: false }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(ApplicationFailure);
    expect((refused as ApplicationFailure).type).toBe('IsolationUnavailable');
    expect((refused as ApplicationFailure).nonRetryable).toBe(true);
    expect((refused as ApplicationFailure).message).toContain('bubblewrap (/bin/false) failed to start a sandbox');
    expect(existsSync(broken.dirFor('refused'))).toBe(false);

    const missing = new LocalSandboxProvider(baseDir, { bwrap: '/no/such/bwrap', noIsolation: false });
    await expect(missing.provision('missing', { network: false })).rejects.toThrow(
      /refusing to run agents without isolation: .*\/no\/such\/bwrap/,
    );

    const optedOut = new LocalSandboxProvider(baseDir, { bwrap: '/bin/false', noIsolation: true });
    const sb = await optedOut.provision('opted-out', { network: false });
    expect(sb.isolation).toBe('none');
    expect(await sb.exec('echo ran', { timeoutMs: 10_000 })).toMatchObject({ exitCode: 0, output: 'ran\n' });
  });
});
