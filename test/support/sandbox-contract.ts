/**
 * The contract every SandboxProvider must pass. Flotilla's activities only ever talk to a
 * Sandbox through this interface, so anything a provider gets wrong here (a leaked host secret,
 * a grandchild that outlives its deadline, a mangled bundle) breaks runs in ways that are hard
 * to see from the outside. Each test checks an outcome a caller relies on, not an implementation.
 */
import { execFile } from 'node:child_process';
import { createHash, randomBytes, randomInt } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import type { ExecOptions, ExecResult, Sandbox, SandboxProvider } from '../../src/sandbox/types';
import { tempDir } from './temp';

export interface SandboxContractOptions {
  /**
   * Pids of live processes whose command line contains `marker`, seen from wherever the
   * provider's processes run. The default (`pgrep -f` on this host) is right for local
   * providers; a remote provider must look inside its own machine.
   */
  findProcesses?: (marker: string) => Promise<number[]>;
  /** How long a killed command (deadline or abort) may take to come back. */
  killLatencyMs?: number;
  /** Variables the provider's runtime sets on its own, beyond PATH, HOME, LANG, TMPDIR and bash's. */
  extraEnv?: string[];
  /** Per-test limit, so a provider whose exec hangs fails in seconds rather than at the global timeout. */
  testTimeoutMs?: number;
}

function hostPgrep(marker: string): Promise<number[]> {
  return new Promise((resolve, reject) => {
    execFile('pgrep', ['-f', marker], (err, stdout) => {
      // pgrep exits 1 when nothing matches, which is the answer we usually want.
      if (err && (err as { code?: unknown }).code !== 1) reject(err);
      else resolve(stdout.split('\n').filter(Boolean).map(Number));
    });
  });
}

/** Single-quotes for bash, so temp paths with odd characters cannot break a command. */
function q(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const sha256 = (data: Uint8Array) => createHash('sha256').update(data).digest('hex');

export function sandboxContract(
  name: string,
  /** The provider under test; what it holds it releases itself (test/support/cleanup.ts). */
  makeProvider: () => Promise<SandboxProvider>,
  opts: SandboxContractOptions = {},
): void {
  const findProcesses = opts.findProcesses ?? hostPgrep;
  const killLatencyMs = opts.killLatencyMs ?? 5_000;

  describe(`sandbox contract: ${name}`, { timeout: opts.testTimeoutMs ?? 30_000 }, () => {
    let provider: SandboxProvider;
    // Slashes like real run keys, and a random part so parallel runs of the suite never share a sandbox.
    const runId = randomBytes(4).toString('hex');
    let counter = 0;
    const newKey = (label: string) => `contract-${runId}/${label}/${counter++}`;
    const provision = (label: string) => provider.provision(newKey(label), { network: false });

    const markers: string[] = [];
    /** A marker unique to this test run, so pgrep never matches someone else's sleep. */
    const marker = () => {
      const m = `sleep 300${randomInt(100_000, 999_999)}`;
      markers.push(m);
      return m;
    };

    const run = (sb: Sandbox, command: string, extra: Partial<ExecOptions> = {}): Promise<ExecResult> =>
      sb.exec(command, { timeoutMs: 20_000, ...extra });

    /** Waits for the kernel to finish tearing down killed processes; a real survivor stays. */
    async function expectNoSurvivors(m: string): Promise<void> {
      const deadline = Date.now() + 2_000;
      let left = await findProcesses(m);
      while (left.length > 0 && Date.now() < deadline) {
        await sleep(50);
        left = await findProcesses(m);
      }
      expect(left, `processes matching "${m}" survived`).toEqual([]);
    }

    const secretName = `FLOTILLA_CONTRACT_SECRET_${runId}`;
    const secretValue = `hunter2-${randomBytes(8).toString('hex')}`;

    beforeAll(async () => {
      // A host secret the sandbox must never see, whatever the caller passes as env.
      process.env[secretName] = secretValue;
      provider = await makeProvider();
    });

    afterAll(async () => {
      delete process.env[secretName];
      // A provider that fails the process-tree tests leaves years-long sleeps behind; on this
      // host we can at least take them down with the suite.
      if (!opts.findProcesses) {
        for (const m of markers) {
          for (const pid of await hostPgrep(m)) {
            try {
              process.kill(pid, 'SIGKILL');
            } catch {
              // Already gone.
            }
          }
        }
      }
    });

    describe('exec', () => {
      it('runs bash -c in the workspace and reports the exit code and stdout+stderr together', async () => {
        const sb = await provision('exec');
        // [[ ]] and $BASH_VERSION only work under bash, not sh.
        const r = await run(
          sb,
          'pwd; [[ -n "$BASH_VERSION" ]] && echo is-bash; echo to-stdout; echo to-stderr >&2; exit 3',
        );
        expect(r).toMatchObject({ exitCode: 3, timedOut: false, aborted: false });
        const lines = r.output.split('\n');
        expect(lines[0]).toBe(sb.workspace);
        expect(lines).toContain('is-bash');
        expect(lines).toContain('to-stdout');
        expect(lines).toContain('to-stderr');
      });

      it('runs in the cwd it is given', async () => {
        const sb = await provision('cwd');
        const dir = `${sb.workspace}/sub dir/deeper`;
        await sb.writeFile(`${dir}/.keep`, '');
        expect((await run(sb, 'pwd', { cwd: dir })).output).toBe(`${dir}\n`);
        expect((await run(sb, 'pwd', { cwd: sb.scratch })).output).toBe(`${sb.scratch}\n`);
      });

      it('gives the command exactly the env it is passed, and nothing from the host', async () => {
        expect(process.env[secretName]).toBe(secretValue);
        const sb = await provision('env');
        const allowed = new Set([
          'PATH',
          'HOME',
          'LANG',
          'TMPDIR',
          'PWD',
          'SHLVL',
          'OLDPWD',
          '_',
          ...(opts.extraEnv ?? []),
        ]);
        for (const given of [undefined, { AGENT_TOKEN: 'given-on-purpose' }]) {
          const r = await run(sb, 'env; echo ---; compgen -e', { env: given });
          expect(r.exitCode).toBe(0);
          expect(r.output).not.toContain(secretValue);
          const names = r.output.split('---\n')[1].split('\n').filter(Boolean);
          const unexpected = names.filter((n) => !allowed.has(n) && !(given && n in given));
          expect(unexpected, 'variables leaked into the sandbox').toEqual([]);
          if (given) expect(r.output).toContain('AGENT_TOKEN=given-on-purpose');
        }
        // The basics a shell needs are still there when the caller passes its own env.
        const basics = await run(sb, 'command -v sh >/dev/null && echo "$LANG"', { env: { X: '1' } });
        expect(basics).toMatchObject({ exitCode: 0, output: 'C.UTF-8\n' });
      });

      it('reports non-zero exit codes instead of throwing', async () => {
        const sb = await provision('exit');
        expect(await run(sb, 'echo before; exit 7')).toMatchObject({
          exitCode: 7,
          output: 'before\n',
          timedOut: false,
          aborted: false,
        });
        expect((await run(sb, 'false')).exitCode).toBe(1);
        expect((await run(sb, 'no-such-command-flotilla')).exitCode).toBe(127);
        // Killed by a signal reads like a shell reports it (137 = 128 + SIGKILL), e.g. an OOM kill.
        expect((await run(sb, 'kill -9 $$')).exitCode).toBe(137);
      });

      it('stops a command at its deadline, promptly', async () => {
        const sb = await provision('deadline');
        const started = Date.now();
        const r = await run(sb, 'sleep 30', { timeoutMs: 500 });
        const took = Date.now() - started;
        expect(r.timedOut).toBe(true);
        expect(r.aborted).toBe(false);
        expect(r.exitCode).not.toBe(0);
        expect(took).toBeGreaterThanOrEqual(450);
        expect(took).toBeLessThan(500 + killLatencyMs);
      });

      it('kills the whole process tree at the deadline, grandchildren included', async () => {
        const sb = await provision('deadline-tree');
        const m = marker();
        let seenRunning: Promise<number[]> | undefined;
        const r = await run(sb, `${m} & echo started; wait`, {
          timeoutMs: 1_500,
          onOutput: (chunk) => {
            if (chunk.includes('started')) seenRunning ??= findProcesses(m);
          },
        });
        expect(r.timedOut).toBe(true);
        // Proves the grandchild really existed, so "none left" below means it was killed.
        expect((await seenRunning)?.length ?? 0).toBeGreaterThan(0);
        await expectNoSurvivors(m);
      });

      it('does not keep waiting for background processes once the command itself has exited', async () => {
        const sb = await provision('background');
        const m = marker();
        const started = Date.now();
        // The background sleep inherits stdout; a provider that waits for every writer to close would hang here.
        const r = await run(sb, `${m} & echo done`, { timeoutMs: 10_000 });
        expect(r).toMatchObject({ exitCode: 0, output: 'done\n', timedOut: false, aborted: false });
        expect(Date.now() - started).toBeLessThan(killLatencyMs);
        await expectNoSurvivors(m);
      });

      it('stops a command and its tree when the signal aborts mid-run', async () => {
        const sb = await provision('abort');
        const m = marker();
        const controller = new AbortController();
        let abortedAt = 0;
        let seenRunning: number[] = [];
        const r = await run(sb, `${m} & echo started; wait`, {
          timeoutMs: 20_000,
          signal: controller.signal,
          onOutput: (chunk) => {
            if (!chunk.includes('started') || abortedAt) return;
            abortedAt = -1;
            // Abort only once the grandchild has been seen running, so the kill is really tested.
            void findProcesses(m)
              .then(
                (pids) => (seenRunning = pids),
                () => undefined,
              )
              .finally(() => {
                abortedAt = Date.now();
                controller.abort();
              });
          },
        });
        expect(seenRunning.length).toBeGreaterThan(0);
        expect(r).toMatchObject({ aborted: true, timedOut: false });
        expect(Date.now() - abortedAt).toBeLessThan(killLatencyMs);
        await expectNoSurvivors(m);
      });

      it('does not start a command whose signal is already aborted', async () => {
        const sb = await provision('pre-aborted');
        const controller = new AbortController();
        controller.abort();
        const chunks: string[] = [];
        const r = await run(sb, `echo ran; touch ${q(`${sb.workspace}/ran`)}`, {
          signal: controller.signal,
          onOutput: (c) => chunks.push(c),
        });
        expect(r.aborted).toBe(true);
        expect(chunks).toEqual([]);
        expect(r.output).toBe('');
        expect((await run(sb, `test -e ${q(`${sb.workspace}/ran`)}`)).exitCode).toBe(1);
      });

      it('streams output through onOutput while the command is still running', async () => {
        const sb = await provision('stream');
        const go = `${sb.scratch}/go`;
        const chunks: string[] = [];
        let released = false;
        // The command waits for a file the test writes only after seeing the first line, so
        // output delivered only at the end would leave it waiting until its deadline.
        const r = await run(sb, `echo ready >&2; while [ ! -e ${q(go)} ]; do sleep 0.02; done; echo finished`, {
          timeoutMs: 10_000,
          onOutput: (chunk) => {
            chunks.push(chunk);
            if (!released && chunks.join('').includes('ready')) {
              released = true;
              void sb.writeFile(go, '');
            }
          },
        });
        expect(r).toMatchObject({ exitCode: 0, timedOut: false });
        expect(released).toBe(true);
        expect(chunks.join('')).toBe('ready\nfinished\n');
        expect(r.output).toBe('ready\nfinished\n');
      });

      it('decodes multi-byte UTF-8 characters that arrive split across chunks', async () => {
        const sb = await provision('utf8');
        // The euro sign's three bytes are written in two separate writes with a pause between.
        const r = await run(sb, `printf '\\xe2\\x82'; sleep 0.2; printf '\\xac\\n'`);
        expect(r.output).toBe('€\n');
      });
    });

    describe('files', () => {
      // Every byte value, a leading NUL, and CR/LF that a text-mode path would mangle.
      const allBytes = new Uint8Array([0, ...Array.from({ length: 256 }, (_, i) => i), 0, 13, 10, 0]);

      it('round-trips arbitrary bytes through writeFile/readFile in the workspace and scratch', async () => {
        const sb = await provision('bytes');
        for (const file of [`${sb.workspace}/nested/dirs/all.bin`, `${sb.scratch}/all.bin`]) {
          await sb.writeFile(file, allBytes);
          expect(Buffer.from(await sb.readFile(file)).equals(Buffer.from(allBytes))).toBe(true);
          // Commands see exactly the bytes written.
          const r = await run(sb, `sha256sum < ${q(file)}`);
          expect(r.output.split(' ')[0]).toBe(sha256(allBytes));
        }
      });

      it('reads back exactly what a command wrote, and writes strings as UTF-8', async () => {
        const sb = await provision('exec-files');
        const made = `${sb.workspace}/made.bin`;
        expect((await run(sb, `printf '\\000\\001\\377\\r\\n' > ${q(made)}`)).exitCode).toBe(0);
        expect([...(await sb.readFile(made))]).toEqual([0, 1, 255, 13, 10]);

        const text = `${sb.scratch}/text.txt`;
        await sb.writeFile(text, 'héllo €\n');
        expect((await run(sb, `cat ${q(text)}`)).output).toBe('héllo €\n');
        // Overwriting replaces the file rather than appending or leaving a stale tail.
        await sb.writeFile(text, 'x');
        expect(Buffer.from(await sb.readFile(text)).toString()).toBe('x');
      });

      it('writes a read-only file whose exact contents commands can read, and can write it again', async () => {
        const sb = await provision('read-only');
        const file = `${sb.workspace}/oracle/check.txt`;
        await sb.writeFile(file, 'first', { readOnly: true });
        expect(await run(sb, `cat ${q(file)}`)).toMatchObject({ exitCode: 0, output: 'first' });
        // A retried activity writes the same file again.
        await sb.writeFile(file, 'second', { readOnly: true });
        expect(Buffer.from(await sb.readFile(file)).toString()).toBe('second');
        expect((await run(sb, `stat -c %a ${q(file)}`)).output.trim()).toBe('444');
      });

      it('rejects reading a missing file', async () => {
        const sb = await provision('missing');
        await expect(sb.readFile(`${sb.workspace}/nope.txt`)).rejects.toThrow();
      });

      it('rejects paths outside the workspace and scratch', async () => {
        const sb = await provision('outside');
        const outside = [
          '/etc/passwd',
          `${sb.workspace}/../outside.txt`,
          `${sb.scratch}/../../outside.txt`,
          // A sibling whose name merely starts like the workspace.
          `${sb.workspace}-evil/file.txt`,
          'relative.txt',
        ];
        for (const p of outside) {
          await expect(sb.readFile(p), `readFile ${p}`).rejects.toThrow();
          await expect(sb.writeFile(p, 'x'), `writeFile ${p}`).rejects.toThrow();
        }
        // A sandbox-side ".." that stays inside is fine.
        await sb.writeFile(`${sb.workspace}/a/../inside.txt`, 'ok');
        expect(Buffer.from(await sb.readFile(`${sb.workspace}/inside.txt`)).toString()).toBe('ok');
      });

      it('copies host files in and out, byte for byte, and refuses what is outside or not a regular file', async () => {
        const sb = await provision('copy');
        const host = tempDir('contract-copy');
        // Several MiB of random bytes (more than one stream chunk), with every byte value.
        const big = Buffer.concat([Buffer.from(allBytes), randomBytes(3 * 1024 * 1024 + 17)]);
        await writeFile(path.join(host, 'in.bin'), big);
        const inside = `${sb.scratch}/deep/in.bin`;
        await sb.copyIn(path.join(host, 'in.bin'), inside);
        expect((await run(sb, `sha256sum < ${q(inside)}`)).output.split(' ')[0]).toBe(sha256(big));
        // A command's output goes back out: what it made, not what was copied in.
        expect(
          (
            await run(
              sb,
              `head -c 1000 ${q(inside)} > ${q(`${sb.workspace}/out.bin`)}; cat ${q(inside)} >> ${q(`${sb.workspace}/out.bin`)}`,
            )
          ).exitCode,
        ).toBe(0);
        await sb.copyOut(`${sb.workspace}/out.bin`, path.join(host, 'out.bin'));
        expect(sha256(await readFile(path.join(host, 'out.bin')))).toBe(
          sha256(Buffer.concat([big.subarray(0, 1000), big])),
        );
        // Copying over an existing host file replaces it.
        await sb.writeFile(`${sb.workspace}/small.txt`, 'small');
        await sb.copyOut(`${sb.workspace}/small.txt`, path.join(host, 'out.bin'));
        expect(await readFile(path.join(host, 'out.bin'), 'utf8')).toBe('small');

        await expect(sb.copyOut('/etc/passwd', path.join(host, 'x')), 'copyOut /etc/passwd').rejects.toThrow();
        await expect(
          sb.copyIn(path.join(host, 'in.bin'), `${sb.workspace}/../x.bin`),
          'copyIn outside',
        ).rejects.toThrow();
        await expect(sb.copyOut(`${sb.workspace}/nope.bin`, path.join(host, 'x')), 'copyOut missing').rejects.toThrow();
        // A FIFO would hang a reader that waits for a writer: refused, promptly.
        expect((await run(sb, `mkfifo ${q(`${sb.workspace}/fifo`)}`)).exitCode).toBe(0);
        await expect(sb.copyOut(`${sb.workspace}/fifo`, path.join(host, 'x')), 'copyOut fifo').rejects.toThrow(
          /not a regular file/,
        );
      });
    });

    describe('lifecycle', () => {
      it('provisions idempotently: a second provision finds the first one with its files', async () => {
        const key = newKey('idempotent');
        const first = await provider.provision(key, { network: false });
        await first.writeFile(`${first.workspace}/kept.txt`, 'from writeFile');
        await run(first, 'echo from-exec > made-by-exec.txt');

        const again = await provider.provision(key, { network: false });
        expect(again.id).toBe(first.id);
        expect(Buffer.from(await again.readFile(`${again.workspace}/kept.txt`)).toString()).toBe('from writeFile');
        expect((await run(again, 'cat made-by-exec.txt')).output).toBe('from-exec\n');

        const found = await provider.find(key, { network: false });
        expect(found?.id).toBe(first.id);
        expect(Buffer.from(await found!.readFile(`${found!.workspace}/kept.txt`)).toString()).toBe('from writeFile');

        expect(await provider.find(newKey('never-provisioned'), { network: false })).toBeUndefined();
      });

      it('destroys everything, idempotently', async () => {
        const key = newKey('destroy');
        const sb = await provider.provision(key, { network: false });
        await sb.writeFile(`${sb.workspace}/doomed.txt`, 'x');
        await sb.writeFile(`${sb.scratch}/doomed.txt`, 'x');

        await provider.destroy(key);
        expect(await provider.find(key, { network: false })).toBeUndefined();
        await provider.destroy(key);
        await provider.destroy(newKey('never-provisioned'));

        // Re-provisioning the same key starts from nothing.
        const fresh = await provider.provision(key, { network: false });
        const r = await run(
          fresh,
          `ls -A ${q(fresh.workspace)} ${q(fresh.scratch)}; test -e ${q(`${fresh.workspace}/doomed.txt`)}`,
        );
        expect(r.exitCode).toBe(1);
        await expect(fresh.readFile(`${fresh.scratch}/doomed.txt`)).rejects.toThrow();
        await provider.destroy(key);
      });

      it('provisions and finds sandboxes isolated as checkIsolation says', async () => {
        const isolation = provider.checkIsolation();
        const key = newKey('isolation');
        expect((await provider.provision(key, { network: false })).isolation).toBe(isolation);
        expect((await provider.find(key, { network: false }))?.isolation).toBe(isolation);
      });

      it('pauses a sandbox and brings it back with its files, where the provider pauses', async ({ skip }) => {
        if (!provider.pause || !provider.resume) skip('this provider does not pause sandboxes');
        const key = newKey('pause');
        const sb = await provider.provision(key, { network: false });
        await sb.writeFile(`${sb.workspace}/kept.txt`, 'kept');
        await provider.pause!(key);
        await provider.resume!(key);
        expect(await run(sb, 'cat kept.txt')).toMatchObject({ exitCode: 0, output: 'kept' });
        // Using a paused sandbox brings it back too.
        await provider.pause!(key);
        expect(Buffer.from(await sb.readFile(`${sb.workspace}/kept.txt`)).toString()).toBe('kept');
      });

      it('keeps two keys in two independent sandboxes', async () => {
        const a = await provision('pair-a');
        const b = await provision('pair-b');
        expect(a.id).not.toBe(b.id);
        await a.writeFile(`${a.workspace}/same.txt`, 'A');
        await b.writeFile(`${b.workspace}/same.txt`, 'B');
        await run(b, 'echo b-only > b-only.txt');

        expect(Buffer.from(await a.readFile(`${a.workspace}/same.txt`)).toString()).toBe('A');
        expect(Buffer.from(await b.readFile(`${b.workspace}/same.txt`)).toString()).toBe('B');
        expect((await run(a, 'cat same.txt')).output).toBe('A');
        expect((await run(a, 'test -e b-only.txt')).exitCode).toBe(1);
        await expect(a.readFile(`${a.workspace}/b-only.txt`)).rejects.toThrow();
      });
    });
  });
}
