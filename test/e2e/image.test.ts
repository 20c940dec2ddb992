/**
 * The worker image, built without a Docker engine: every stage of the Dockerfile is assembled
 * step by step as `docker build` would (WORKDIR, COPY from the context less .dockerignore or
 * from an earlier stage, RUN, ENV, VOLUME), and the image's entrypoint runs in it. A stage is a
 * directory holding what its instructions add; its base image's system is this machine's (/usr,
 * /etc, mounted read-only), which is checked to be the same Node and Debian release. Commands run
 * with that directory as / under bubblewrap, where nothing of the checkout is visible. RUN
 * apt-get is not run: the packages it names must be installed here (scripts/setup.sh does).
 * npm uses a hard-linked copy of this machine's npm cache (offline where it can), which changes
 * where packages come from, not which.
 *
 * Its worker then runs in such a container with what docker-compose.yml asks for (root, Docker's
 * capabilities and cap_add, an unmasked /proc) and pushes a run whose sandbox has a uid of its
 * own; with Docker's defaults, or with those capabilities but /proc masked, it refuses to start.
 * What this does not show: Docker's own seccomp and AppArmor profiles (compose turns both off),
 * and a host kernel that restricts user namespaces.
 */
import { execFile, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import {
  chmodSync,
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  statSync,
} from 'node:fs';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import YAML from 'yaml';
import { awaitRun } from '../../src/client/index';
import { leaderWorkflow } from '../../src/workflows/index';
import { linkOrCopy } from '../support/checkout';
import { releaseAtEnd } from '../support/cleanup';
import { type Stage, dockerIgnored, parseCopy, parseDockerfile, readDockerignore } from '../support/dockerfile';
import { type Ran, type WorkerProcess, spawnWorker } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { shellRequest, subTask, writeAgent } from '../support/requests';
import { machineHas } from '../support/requirements';
import { tempDir } from '../support/temp';

const ROOT = path.join(__dirname, '../..');
const IGNORED = readDockerignore(path.join(ROOT, '.dockerignore'));

/** A stage as built so far: its files under `root`, and the settings its instructions made. */
interface Image {
  root: string;
  workdir: string;
  env: Record<string, string>;
  user?: string;
  entrypoint?: string[];
}

/** What a container of `node:*` has before the image's own ENV: Docker's PATH, root's HOME. */
const BASE_ENV = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', HOME: '/root' };

/**
 * The host's system, read-only at the same paths: the base image's part of every stage. Its
 * symbolic links (/bin -> usr/bin) are made in the stage once, as the base image has them.
 */
function systemMounts(image: Image): string[] {
  return ['/usr', '/bin', '/sbin', '/lib', '/lib64', '/etc']
    .filter((d) => existsSync(d))
    .flatMap((d) => {
      if (!lstatSync(d).isSymbolicLink()) return ['--ro-bind', d, d];
      return lstatSync(path.join(image.root, d), { throwIfNoEntry: false }) ? [] : ['--symlink', readlinkSync(d), d];
    });
}

interface ContainerOptions {
  env?: Record<string, string>;
  /** More bubblewrap mounts (a host directory bound in, as a volume would). */
  mounts?: string[];
  /** The capabilities of the container's root (CAP_ names); none when undefined. */
  caps?: string[];
  /** A /proc with nothing mounted over it; else bwrap's, with /proc/sys and others covered, as Docker masks them. */
  unmaskedProc?: boolean;
}

/** What Docker gives a container's root unless told otherwise (moby's default capabilities). */
const DOCKER_CAPS = [
  'CHOWN',
  'DAC_OVERRIDE',
  'FSETID',
  'FOWNER',
  'MKNOD',
  'NET_RAW',
  'SETGID',
  'SETUID',
  'SETFCAP',
  'SETPCAP',
  'NET_BIND_SERVICE',
  'SYS_CHROOT',
  'KILL',
  'AUDIT_WRITE',
];

/**
 * The container docker-compose.yml asks for its worker: Docker's capabilities and its cap_add
 * (every one when privileged), and /proc unmasked when privileged or systempaths=unconfined.
 * seccomp and AppArmor are not applied here at all, so the test cannot show their veto.
 */
function composeWorkerContainer(): ContainerOptions {
  const worker = YAML.parse(readFileSync(path.join(ROOT, 'docker-compose.yml'), 'utf8')).services.worker;
  if (worker.privileged) return { caps: ['ALL'], unmaskedProc: true };
  return {
    caps: [...DOCKER_CAPS, ...(worker.cap_add ?? [])].map((c: string) => `CAP_${c.replace(/^CAP_/, '')}`),
    unmaskedProc: (worker.security_opt ?? []).includes('systempaths=unconfined'),
  };
}

/**
 * bwrap's arguments for `argv` in a container of `image`: its files as /, the system over them,
 * a fresh /proc, /dev and /tmp, its env and workdir; the host's network, as a build has.
 */
function containerArgs(image: Image, argv: string[], options: ContainerOptions = {}): string[] {
  const env = { ...BASE_ENV, ...image.env, ...options.env };
  return [
    '--bind',
    image.root,
    '/',
    ...systemMounts(image),
    '--proc',
    '/proc',
    '--dev',
    '/dev',
    '--tmpfs',
    '/tmp',
    // As in a container, the command is PID 1 (tini must be, to reap agents' orphans).
    '--unshare-pid',
    '--as-pid-1',
    '--die-with-parent',
    ...(options.caps ?? []).flatMap((cap) => ['--cap-add', cap]),
    ...(options.mounts ?? []),
    '--clearenv',
    ...Object.entries(env).flatMap(([k, v]) => ['--setenv', k, v]),
    '--chdir',
    image.workdir,
    '--',
    ...(options.unmaskedProc ? UNMASKED_PROC : []),
    ...argv,
  ];
}

/**
 * What the runtime gives a container with `systempaths=unconfined` (or a privileged one) and
 * bwrap's --proc does not: a /proc with nothing mounted over it. bwrap covers /proc/sys and others
 * read-only, as Docker's masks do, and the kernel then refuses the fresh /proc each sandbox
 * mounts. A plain procfs on top, then the command (the mount takes the CAP_SYS_ADMIN that such a
 * container has here).
 */
const UNMASKED_PROC = ['/bin/sh', '-c', 'mount -t proc proc /proc && exec "$@"', 'unmasked-proc'];

/** `argv` in a container of `image`, to its end. */
function inImage(image: Image, argv: string[], options: ContainerOptions = {}): Promise<Ran> {
  return new Promise<Ran>((resolve) => {
    execFile(
      'bwrap',
      containerArgs(image, argv, options),
      { encoding: 'utf8', timeout: 900_000, maxBuffer: 64 << 20 },
      (error, out, err) => resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, out, err }),
    );
  });
}

const inRoot = (image: Image, p: string) => path.join(image.root, path.posix.resolve(image.workdir, p));

/** node:<major>-<debian release>-slim is Node <major> on that Debian release: so must this machine be. */
function checkBase(base: string): void {
  const [, major, release] = /^node:(\d+)-(\w+)-slim$/.exec(base) ?? [];
  expect(major, `FROM ${base}: a node:<major>-<release>-slim image`).toBeDefined();
  expect(process.versions.node.split('.')[0], `this machine's Node for FROM ${base}`).toBe(major);
  expect(readFileSync('/etc/os-release', 'utf8'), `this machine's Debian for FROM ${base}`).toContain(
    `VERSION_CODENAME=${release}`,
  );
}

/** COPY: from the context (never what .dockerignore leaves out) or from an earlier stage. */
function copy(image: Image, args: string, built: Map<string, Image>): void {
  const { from, sources, dest } = parseCopy(args);
  const target = inRoot(image, dest);
  const intoDir = dest.endsWith('/') || sources.length > 1;
  for (const source of sources) {
    const stage = from === undefined ? undefined : built.get(from);
    if (from !== undefined) expect(stage, `COPY --from=${from}: no such stage before it`).toBeDefined();
    else expect(dockerIgnored(IGNORED, source), `COPY ${source}: .dockerignore leaves it out`).toBe(false);
    const host = stage ? inRoot(stage, source) : path.join(ROOT, source);
    expect(existsSync(host), `COPY ${args}: ${source} does not exist`).toBe(true);
    const to = statSync(host).isDirectory() || !intoDir ? target : path.join(target, path.basename(source));
    mkdirSync(path.dirname(to), { recursive: true });
    if (stage) linkOrCopy(statSync(host).isDirectory() ? `${host}/.` : host, to);
    else cpSync(host, to, { recursive: true, filter: (p) => !dockerIgnored(IGNORED, path.relative(ROOT, p)) });
  }
}

/** RUN apt-get ... install <packages>: the base image's Debian installs them; here they must be installed. */
function checkPackages(command: string): void {
  const install = /apt-get install (.*?)(?:&&|$)/.exec(command);
  expect(install, `RUN ${command}: only apt-get installs are left to the machine`).not.toBeNull();
  const packages = install![1].split(' ').filter((w) => w && !w.startsWith('-'));
  const missing = packages.filter(
    (p) => !spawnSync('dpkg-query', ['-W', '-f=${Status}', p], { encoding: 'utf8' }).stdout.includes('ok installed'),
  );
  expect(missing, 'packages the image installs that this machine lacks (scripts/setup.sh installs them)').toEqual([]);
}

async function run(image: Image, command: string, npmCache: string): Promise<void> {
  if (command.startsWith('apt-get ')) return checkPackages(command);
  const r = await inImage(image, ['/bin/sh', '-c', command], {
    env: { npm_config_prefer_offline: 'true' },
    mounts: ['--bind', npmCache, '/root/.npm'],
  });
  expect(r.code, `RUN ${command}:\n${r.out}\n${r.err}`).toBe(0);
}

/** ENV k=v k=v (values without spaces, as this Dockerfile writes them). */
const parseEnv = (args: string) => Object.fromEntries(args.split(' ').map((kv) => kv.split(/=(.*)/s).slice(0, 2)));

async function buildStage(stage: Stage, built: Map<string, Image>, npmCache: string): Promise<Image> {
  checkBase(stage.base);
  const image: Image = { root: tempDir('image'), workdir: '/', env: {} };
  // An image's / is 0755, not a temporary directory's 0700: sandbox uids traverse it.
  chmodSync(image.root, 0o755);
  for (const { keyword, args } of stage.instructions) {
    if (keyword === 'WORKDIR') {
      image.workdir = path.posix.resolve(image.workdir, args);
      mkdirSync(inRoot(image, '.'), { recursive: true });
    } else if (keyword === 'COPY') copy(image, args, built);
    else if (keyword === 'RUN') await run(image, args, npmCache);
    else if (keyword === 'ENV') Object.assign(image.env, parseEnv(args));
    else if (keyword === 'USER') image.user = args;
    else if (keyword === 'ENTRYPOINT') image.entrypoint = JSON.parse(args);
    else if (keyword === 'VOLUME') for (const v of JSON.parse(args)) mkdirSync(inRoot(image, v), { recursive: true });
    else if (keyword !== 'STOPSIGNAL') throw new Error(`Dockerfile: ${keyword} is not assembled here`);
  }
  return image;
}

/** Every stage in order; the last is the image. */
async function buildImage(): Promise<Image> {
  const npmCache = path.join(tempDir('image-npm-cache'), 'cache');
  const machineCache = spawnSync('npm', ['config', 'get', 'cache'], { encoding: 'utf8' }).stdout.trim();
  if (existsSync(machineCache)) linkOrCopy(machineCache, npmCache);
  else mkdirSync(npmCache);
  const built = new Map<string, Image>();
  let image: Image | undefined;
  for (const stage of parseDockerfile(readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8'))) {
    image = await buildStage(stage, built, npmCache);
    if (stage.name) built.set(stage.name, image);
  }
  return image!;
}

const version = () => JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')).version;

describe.runIf(machineHas('root') && machineHas('bwrap'))('the worker image, assembled as the Dockerfile says', () => {
  let image: Image;
  beforeAll(async () => {
    image = await buildImage();
  }, 1_200_000);

  it('holds the built dist/ and the runtime dependencies only: no sources, no TypeScript toolchain', () => {
    const app = inRoot(image, '/app');
    expect(readdirSync(app).sort()).toEqual(['bin', 'dist', 'node_modules', 'package.json']);
    for (const built of ['cli/index.js', 'worker.js', 'workflow-bundle.js', 'workflow-bundle-traced.js'])
      expect(existsSync(path.join(app, 'dist', built)), built).toBe(true);
    for (const dev of ['tsx', 'typescript', 'vitest', 'eslint', '@temporalio/testing'])
      expect(existsSync(path.join(app, 'node_modules', dev)), dev).toBe(false);
    for (const agent of ['@anthropic-ai/claude-code', '@openai/codex'])
      expect(existsSync(path.join(app, 'node_modules', agent)), agent).toBe(true);
  });

  it('runs its entrypoint: `flotilla --version` and `flotilla worker --help`', async () => {
    const entrypoint = image.entrypoint!;
    expect(entrypoint.at(-1)).toBe('worker');
    const flotilla = entrypoint.slice(0, -1);

    const versionRun = await inImage(image, [...flotilla, '--version']);
    expect(versionRun.err).toBe('');
    expect(versionRun.out.trim()).toBe(version());
    expect(versionRun.code).toBe(0);

    const help = await inImage(image, [...entrypoint, '--help']);
    expect(help.err).toBe('');
    expect(help.out).toContain('Usage: flotilla worker');
    expect(help.code).toBe(0);
  });

  /** The image's worker on the suite's server and `taskQueue`, in a container as compose starts it. */
  function startWorker(taskQueue: string, options: ContainerOptions): WorkerProcess {
    // spawnWorker adds the entrypoint's last word, `worker`.
    const flotilla = image.entrypoint!.slice(0, -1);
    const env = { TEMPORAL_ADDRESS: inject('temporalAddress'), FLOTILLA_TASK_QUEUE: taskQueue };
    return spawnWorker(
      { PATH: process.env.PATH },
      [],
      [],
      ['bwrap', ...containerArgs(image, flotilla, { ...options, env })],
    );
  }

  it('runs its worker in the container compose asks for: sandboxes get uids of their own, and a run pushes', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const taskQueue = `image-${randomUUID()}`;
    // The remote is a directory of this machine, bound in as a volume would be.
    const worker = startWorker(taskQueue, {
      ...composeWorkerContainer(),
      mounts: ['--bind', remote.root, remote.root],
    });
    await worker.polling();
    const connection = await Connection.connect({ address: inject('temporalAddress') });
    releaseAtEnd(() => connection.close());
    const handle = await new Client({ connection }).workflow.start(leaderWorkflow, {
      taskQueue,
      workflowId: `image-${randomUUID()}`,
      args: [
        shellRequest(remote.url, [
          subTask('one', `mkdir -p one && id -u > one/uid.txt && ${writeAgent('one/hi.txt', 'hi')}`),
        ]),
      ],
    });
    releaseAtEnd(() => handle.terminate('test over').catch(() => undefined));
    const end = await awaitRun(handle);
    expect(end.result, worker.output()).toMatchObject({
      outcome: 'pushed',
      pushedSha: await remote.head(),
      isolation: 'bubblewrap',
    });
    expect(Number(await remote.show('main', 'one/uid.txt'))).toBeGreaterThanOrEqual(200_000);
  }, 300_000);

  it('refuses to start in a container without those privileges, rather than run agents bare', async () => {
    // Docker's defaults: root without capabilities, /proc masked.
    const plain = startWorker(`image-${randomUUID()}`, {});
    expect(await plain.exited).not.toBe(0);
    expect(plain.stderr()).toContain(
      'refusing to start: FLOTILLA_REQUIRE_ISOLATION=1, but sandboxes would not be isolated',
    );
    // Compose's settings less systempaths=unconfined (as Compose before v2.15 passed them): /proc
    // stays masked, and no sandbox could mount its own.
    const masked = startWorker(`image-${randomUUID()}`, { ...composeWorkerContainer(), unmaskedProc: false });
    expect(await masked.exited).not.toBe(0);
    expect(masked.stderr()).toContain("Can't mount proc on /newroot/proc: Operation not permitted");
  }, 120_000);
});
