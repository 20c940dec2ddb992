/**
 * The pure parts of a local sandbox: how its command line is built, how its limits are read and
 * capped, which uid it gets, and how a limit it hit is put into words. (That bubblewrap really
 * confines a command is test/e2e/sandbox.local.test.ts's job.)
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { SANDBOX_OBJECTS } from '../../src/git/run-mirror';
import { BLOCK_FD, type BwrapInput, INFO_FD, bwrapArgv } from '../../src/sandbox/local/bwrap';
import { cgroupLimitHit } from '../../src/sandbox/local/cgroups';
import { tmpFull, usageOverLimit, walkSmall } from '../../src/sandbox/local/disk';
import { hostPathIn } from '../../src/sandbox/local/files';
import { DEFAULT_LIMITS, MAX_LIMITS, rlimitOptions } from '../../src/sandbox/local/limits';
import { parseMaxLimits, parseUidRange } from '../../src/config/parse';
import { enterArgv, holderArgv, sandboxesPoint, toolPoint } from '../../src/sandbox/local/namespace';
import { probeArgv } from '../../src/sandbox/local/probe';
import { LocalSandboxProvider } from '../../src/sandbox/local/provider';
import { uidIn } from '../../src/sandbox/local/uids';
import { readOnlyDirs, toolDirs, unreadableInstall } from '../../src/sandbox/local/install';
import { machineHas } from '../support/requirements';
import { tempDir } from '../support/temp';

const MIB = 1024 * 1024;

/** The values that follow each occurrence of `flag` in argv, `width` at a time. */
function after(argv: string[], flag: string, width = 2): string[][] {
  return argv.flatMap((a, i) => (a === flag ? [argv.slice(i + 1, i + 1 + width)] : []));
}

const input = (over: Partial<BwrapInput> = {}): BwrapInput => ({
  bwrap: '/usr/bin/bwrap',
  tmpMiB: 8,
  readOnly: [
    { source: '/usr', path: '/usr' },
    { source: '/etc', path: '/etc' },
    { source: '/tmp/tools', path: '/tmp/tools' },
  ],
  sources: { workspace: '/data/sb/workspace', scratch: '/data/sb/scratch' },
  readOnlyWorkspace: false,
  net: { bwrapArgs: ['--unshare-net'], env: {} },
  cwd: '/workspace/sub',
  rlimits: '-f 8192',
  command: 'echo "hi there"',
  ...over,
});

describe('the bubblewrap command line', () => {
  it('gives the sandbox its own namespaces, no capabilities, and a life no longer than its parent', () => {
    const argv = bwrapArgv(input());
    expect(argv[0]).toBe('/usr/bin/bwrap');
    for (const flag of [
      '--unshare-user',
      '--disable-userns',
      '--unshare-pid',
      '--unshare-ipc',
      '--unshare-uts',
      '--unshare-net',
      '--die-with-parent',
    ])
      expect(argv, flag).toContain(flag);
    expect(after(argv, '--cap-drop', 1)).toEqual([['ALL']]);
  });

  it('mounts a sized private /tmp before the read-only system, so a tool under the host /tmp stays visible', () => {
    const argv = bwrapArgv(input());
    expect(after(argv, '--size', 3)).toEqual([[String(8 * MIB), '--tmpfs', '/tmp']]);
    const ro = after(argv, '--ro-bind');
    expect(ro).toEqual([
      ['/proc/sys', '/proc/sys'],
      ['/usr', '/usr'],
      ['/etc', '/etc'],
      ['/tmp/tools', '/tmp/tools'],
    ]);
    expect(argv.indexOf('--tmpfs')).toBeLessThan(argv.indexOf('/tmp/tools'));
    expect(argv).not.toContain('/sys');
  });

  it('mounts a directory of the install from where the sandbox namespace lends it, at its own path', () => {
    const argv = bwrapArgv(input({ readOnly: [{ source: '/run/points/tools/ab12', path: '/root/.nvm/node' }] }));
    expect(after(argv, '--ro-bind')).toContainEqual(['/run/points/tools/ab12', '/root/.nvm/node']);
  });

  it('binds the workspace (read-only when asked), the scratch directory, and the run objects when lent', () => {
    const writable = bwrapArgv(input());
    expect(after(writable, '--bind')).toEqual([
      ['/data/sb/workspace', '/workspace'],
      ['/data/sb/scratch', '/scratch'],
    ]);
    const readOnly = bwrapArgv(
      input({
        readOnlyWorkspace: true,
        sources: { workspace: '/w', scratch: '/s', objects: '/objects' },
        passwd: '/points/passwd',
      }),
    );
    expect(after(readOnly, '--bind')).toEqual([['/s', '/scratch']]);
    expect(after(readOnly, '--ro-bind')).toEqual(
      expect.arrayContaining([
        ['/w', '/workspace'],
        ['/objects', SANDBOX_OBJECTS],
        ['/points/passwd', '/etc/passwd'],
      ]),
    );
  });

  it('runs a plain command in a subshell of the rlimit wrapper, and a networked one through the bridge', () => {
    const plain = bwrapArgv(input());
    expect(after(plain, '--chdir', 1)).toEqual([['/workspace/sub']]);
    const tail = plain.slice(plain.indexOf('--chdir') + 3);
    expect(tail[0]).toBe('bash');
    // One bash: $0 "bash" as under `bash -c`, the limits, then `-c` and the command's text.
    expect(tail.slice(3)).toEqual(['bash', '-f 8192', '-c', 'echo "hi there"']);
    // The wrapper keeps the limits it sets, and reports /tmp on a descriptor the command does not get.
    expect(tail[2]).toMatch(/^ulimit \$1 \|\| exit 125; shift\n/);
    expect(tail[2]).toContain('(exec 3>&-; eval "set --; $2")');
    expect(tail[2]).toContain('"$@" 3>&-');
    const bridged = bwrapArgv(
      input({
        net: {
          bwrapArgs: ['--unshare-net', '--ro-bind', '/h.sock', '/run/e.sock'],
          env: {},
          bridge: ['node', '-e', 'B'],
        },
      }),
    );
    expect(after(bridged, '--ro-bind')).toContainEqual(['/h.sock', '/run/e.sock']);
    const bridgedTail = bridged.slice(bridged.indexOf('--chdir') + 3);
    expect(bridgedTail.slice(3)).toEqual(['bash', '-f 8192', 'node', '-e', 'B', 'bash', '-c', 'echo "hi there"']);
  });

  it("waits for its first process to join the command's cgroups when asked", () => {
    expect(after(bwrapArgv(input()), '--block-fd', 1)).toEqual([]);
    const admitted = bwrapArgv(input({ admission: true }));
    expect(after(admitted, '--info-fd', 1)).toEqual([[String(INFO_FD)]]);
    expect(after(admitted, '--block-fd', 1)).toEqual([[String(BLOCK_FD)]]);
    expect(admitted.indexOf('--block-fd')).toBeLessThan(admitted.indexOf('--'));
  });
});

describe('the sandbox namespace', () => {
  it("is held by a process that binds the sandboxes directory and the install onto their points, in a mount namespace that is a slave of the host's", () => {
    const tools = ['/root/.nvm/versions/node/v20', '/root/flotilla/node_modules'];
    const argv = holderArgv('/root/.flotilla/sandboxes', tools);
    expect(argv.slice(0, 7)).toEqual(['unshare', '--mount', '--propagation', 'slave', '--', '/bin/sh', '-c']);
    expect(argv.slice(8)).toEqual([
      'flotilla-namespace',
      '/root/.flotilla/sandboxes',
      sandboxesPoint('/root/.flotilla/sandboxes'),
      '2',
      tools[0],
      toolPoint(tools[0]),
      tools[1],
      toolPoint(tools[1]),
    ]);
    expect(argv[7]).toContain('mount --bind "$sandboxes" "$point"');
    expect(argv[7]).toContain('mount --rbind "$1" "$2"');
    expect(new Set(tools.map(toolPoint)).size).toBe(2);
    expect(toolPoint(tools[0])).toMatch(/^\/run\/flotilla-sandbox\/tools\/[0-9a-f]{16}$/);
    expect(sandboxesPoint('/a')).not.toBe(sandboxesPoint('/b'));
  });

  it('is entered by each command with nsenter, which hands it to the uid with no other group', () => {
    expect(enterArgv(21, 200_123)).toEqual([
      'nsenter',
      `--mount=/proc/${process.pid}/fd/21`,
      '-S',
      '200123',
      '-G',
      '200123',
      '--',
    ]);
  });

  it('is what the isolation probe tries too, as root; without root, bwrap alone', () => {
    const asRoot = probeArgv('bwrap', true, 200_000);
    expect(asRoot.slice(0, 5)).toEqual(['unshare', '--mount', '--propagation', 'slave', '--']);
    expect(asRoot.slice(asRoot.indexOf('nsenter'), asRoot.indexOf('bwrap'))).toEqual([
      'nsenter',
      '-S',
      '200000',
      '-G',
      '200000',
      '--',
    ]);
    expect(probeArgv('/opt/bwrap', false, 200_000)).toEqual([
      '/opt/bwrap',
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
    ]);
  });
});

describe("the worker's install, as sandbox uids see it", () => {
  it("mounts the operator's directories, but never the host's root nor what a system directory holds", () => {
    const extra = tempDir('ro-extra');
    vi.stubEnv('FLOTILLA_SANDBOX_RO_PATHS', `/:/usr/share:${extra}`);
    try {
      const dirs = readOnlyDirs();
      expect(dirs).toContain(extra);
      expect(dirs).not.toContain('/');
      expect(dirs.filter((d) => d === '/usr/share')).toEqual([]);
      expect(toolDirs().find((t) => t.path === extra)?.what).toBe('FLOTILLA_SANDBOX_RO_PATHS');
    } finally {
      vi.unstubAllEnvs();
    }
  });

  const refusal = (blocked: string, mode: string, what: string, target: string) =>
    `sandboxes run as uids of their own (FLOTILLA_SANDBOX_UIDS), which cannot read ${blocked} (mode ${mode}); ` +
    `they need it for ${what} (${target}). Make it readable by all (chmod -R o+rX ${blocked}), or install it ` +
    'where every user can read it';

  it.runIf(machineHas('root'))('needs what it lends readable by all, whatever the mode of its parents', () => {
    const parent = tempDir('private-parent');
    expect(statSync(parent).mode & 0o777).toBe(0o700);
    const modules = path.join(parent, 'node_modules');
    mkdirSync(modules, { mode: 0o755 });
    chmodSync(modules, 0o755);
    const tools = [{ path: modules, what: 'the agent CLIs' }];
    expect(unreadableInstall(tools)).toBeUndefined();

    chmodSync(modules, 0o750);
    expect(unreadableInstall(tools)).toBe(refusal(modules, '0750', 'the agent CLIs', modules));
  });

  it.runIf(machineHas('root'))('names a file of FLOTILLA_SANDBOX_RO_PATHS that others cannot read', () => {
    const file = path.join(tempDir('ro-file'), 'tool.cfg');
    writeFileSync(file, 'x', { mode: 0o600 });
    const tools = [{ path: file, what: 'FLOTILLA_SANDBOX_RO_PATHS' }];
    expect(unreadableInstall(tools)).toBe(refusal(file, '0600', 'FLOTILLA_SANDBOX_RO_PATHS', file));
    chmodSync(file, 0o644);
    expect(unreadableInstall(tools)).toBeUndefined();
  });
});

describe('limits', () => {
  it("takes a sandbox's limits from the defaults, the request, and the worker's caps", () => {
    const capped = new LocalSandboxProvider('/nonexistent', { maxLimits: { memoryMiB: 512 } });
    expect(capped.limitsFor()).toEqual({ ...DEFAULT_LIMITS, memoryMiB: 512 });
    expect(capped.limitsFor({ processes: 10, memoryMiB: 100_000, tmpMiB: MAX_LIMITS.tmpMiB * 2 })).toEqual({
      ...DEFAULT_LIMITS,
      processes: 10,
      memoryMiB: 512,
      tmpMiB: MAX_LIMITS.tmpMiB,
    });
  });

  it('reads the worker caps from FLOTILLA_SANDBOX_MAX_LIMITS, naming a bad entry', () => {
    expect(parseMaxLimits(' memoryMiB=8192, processes=512 ')).toEqual({ memoryMiB: 8192, processes: 512 });
    expect(parseMaxLimits(undefined)).toEqual({});
    expect(() => parseMaxLimits('memory=1')).toThrow(
      'FLOTILLA_SANDBOX_MAX_LIMITS: unknown limit "memory" (known: tmpMiB, workspaceMiB, workspaceFiles, processes, memoryMiB)',
    );
    expect(() => parseMaxLimits('tmpMiB=0')).toThrow(
      'FLOTILLA_SANDBOX_MAX_LIMITS: tmpMiB must be a positive whole number (got "0")',
    );
    expect(() => parseMaxLimits('tmpMiB')).toThrow('tmpMiB must be a positive whole number (got "")');
  });

  it('bounds file size always, and processes and memory by rlimit only where there are no cgroups', () => {
    const limits = { ...DEFAULT_LIMITS, workspaceMiB: 8, processes: 10, memoryMiB: 64 };
    expect(rlimitOptions(limits, true)).toBe('-f 8192');
    expect(rlimitOptions(limits, false)).toBe('-f 8192 -u 10 -v 65536');
  });

  it('says which limit a command hit, in words', () => {
    const limits = { ...DEFAULT_LIMITS, memoryMiB: 64, processes: 10, tmpMiB: 8, workspaceFiles: 5, workspaceMiB: 8 };
    expect(cgroupLimitHit('oom_kill_disable 0\nunder_oom 0\noom_kill 1\n', 'max 0\n', limits)).toBe(
      'the sandbox ran out of memory (limit 64 MiB) and the kernel killed its process',
    );
    expect(cgroupLimitHit('oom_kill 0\n', 'max 3\n', limits)).toBe(
      'the sandbox reached its process limit (10 processes at once)',
    );
    expect(cgroupLimitHit('oom_kill 0\n', 'max 0\n', limits)).toBeUndefined();
    expect(cgroupLimitHit('', '', limits)).toBeUndefined();

    const df = (size: number, available: number) =>
      `Filesystem 1024-blocks Used Available Capacity Mounted on\ntmpfs ${size} ${size - available} ${available} 99% /tmp\n`;
    expect(tmpFull(df(8192, 0), limits)).toBe("the sandbox's /tmp is full (limit 8 MiB)");
    expect(tmpFull(df(8192, 63), limits)).toBe("the sandbox's /tmp is full (limit 8 MiB)");
    expect(tmpFull(df(8192, 4000), limits)).toBeUndefined();
    expect(tmpFull('', limits)).toBeUndefined();

    expect(usageOverLimit({ files: 6, bytes: 0 }, limits, 50)).toBe('workspace holds 6 files; the limit is 5');
    expect(usageOverLimit({ files: 50, bytes: 0 }, limits, 50)).toBe(
      'workspace holds at least 50 files; the limit is 5',
    );
    expect(usageOverLimit({ files: 1, bytes: 18 * MIB }, limits, 50)).toBe(
      'workspace holds 18 MiB; the limit is 8 MiB',
    );
    expect(usageOverLimit({ files: 5, bytes: 8 * MIB }, limits, 50)).toBeUndefined();
  });
});

describe('counting a small sandbox in the worker', () => {
  it('counts what find counts, never through a link, and leaves a tree past its bound to find', () => {
    const root = tempDir('walk');
    const [ws, scratch, outside] = ['ws', 'scratch', 'outside'].map((d) => path.join(root, d));
    mkdirSync(path.join(ws, 'a/b'), { recursive: true });
    mkdirSync(scratch);
    mkdirSync(outside);
    writeFileSync(path.join(ws, 'a/b/one'), 'x'.repeat(1000));
    writeFileSync(path.join(ws, 'two'), 'yy');
    writeFileSync(path.join(scratch, 'prompt'), 'z'.repeat(70));
    writeFileSync(path.join(outside, 'big'), 'q'.repeat(100_000));
    // A link to a directory outside, and one to a file: each an entry of its own, with no bytes.
    symlinkSync(outside, path.join(ws, 'out'));
    symlinkSync(path.join(outside, 'big'), path.join(ws, 'big'));
    execFileSync('mkfifo', [path.join(scratch, 'fifo')]);
    const found = execFileSync('find', [ws, scratch, '-mindepth', '1', '-printf', '%y %s\\n'], { encoding: 'utf8' })
      .trim()
      .split('\n');
    const byFind = {
      files: found.length,
      bytes: found.filter((l) => l.startsWith('f ')).reduce((n, l) => n + Number(l.slice(2)), 0),
    };
    expect(byFind).toEqual({ files: 8, bytes: 1072 });
    expect(walkSmall([ws, scratch])).toEqual(byFind);
    // A directory not made yet holds nothing.
    expect(walkSmall([ws, path.join(root, 'none')])).toEqual({ files: 6, bytes: 1002 });
    expect(walkSmall([ws, scratch], 7)).toBeUndefined();
  });
});

describe('uids', () => {
  it('reads FLOTILLA_SANDBOX_UIDS, refusing ranges that reach system uids or wrap', () => {
    expect(parseUidRange(undefined)).toEqual({ first: 200_000, count: 65_536 });
    expect(parseUidRange('5000-5009')).toEqual({ first: 5000, count: 10 });
    for (const bad of ['999-2000', '3000-2000', '1000', 'a-b', `1000-${2 ** 32 - 1}`])
      expect(() => parseUidRange(bad), bad).toThrow(
        `FLOTILLA_SANDBOX_UIDS must be "first-last" with 1000 <= first <= last (got "${bad}")`,
      );
  });

  it('gives a key the same uid every time, within the range', () => {
    const range = { first: 5000, count: 10 };
    const uids = ['run-1/worker/a', 'run-1/worker/b', 'run-2/integration'].map((key) => uidIn(range, key));
    for (const uid of uids) expect(uid >= 5000 && uid < 5010, String(uid)).toBe(true);
    expect(uidIn(range, 'run-1/worker/a')).toBe(uids[0]);
    expect(uidIn({ first: 7, count: 1 }, 'anything')).toBe(7);
  });
});

describe('host paths of sandbox paths', () => {
  const dirs = [
    { inside: '/workspace', host: '/data/sb/workspace' },
    { inside: '/scratch', host: '/data/sb/scratch' },
  ];

  it('maps the workspace and scratch directories, and refuses anything else', () => {
    expect(hostPathIn(dirs, '/workspace')).toBe('/data/sb/workspace');
    expect(hostPathIn(dirs, '/workspace/a/../b.txt')).toBe('/data/sb/workspace/b.txt');
    expect(hostPathIn(dirs, '/scratch/prompt.md')).toBe('/data/sb/scratch/prompt.md');
    for (const outside of ['/etc/passwd', '/workspace/../etc', '/workspace-evil/x', 'workspace/x', '/scratch/../..'])
      expect(() => hostPathIn(dirs, outside), outside).toThrow(
        `path ${outside} is outside the sandbox's workspace and scratch directories`,
      );
  });
});
