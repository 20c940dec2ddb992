/**
 * Attacks on the host's network from a sandbox with `network: true`, by a shell agent in a real
 * run (real bubblewrap, real Temporal dev server). Its targets are all on this machine: the
 * suite's Temporal frontend, a listener on the host's loopback, a test host in a network
 * namespace of its own (ip netns + veth), and another sandbox. Each is tried directly and
 * through the sandbox's proxy; Flotilla's own @temporalio/client, mounted read-only in the
 * sandbox, tries to signal, update, terminate and start runs. Every target records on the host
 * whether anyone reached it, and the run's report says what the proxy refused. What the
 * worker's configuration allows (an exact loopback endpoint, a package registry) still works.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { ArtifactStore } from '../../../src/store/artifacts';
import { statusQuery } from '../../../src/contracts/messages';
import { LocalSandboxProvider } from '../../../src/sandbox/local/provider';
import { releaseAtEnd } from '../../support/cleanup';
import { TestEnv } from '../../support/env';
import { ModelServer } from '../../support/model-server';
import { waitFor } from '../../support/processes';
import { makeRemote } from '../../support/remotes';
import { describeReplay } from '../../support/replay';
import { shellRequest, subTask, withGates } from '../../support/requests';
import { waitForStatus } from '../../support/runs';
import { tempDir } from '../../support/temp';

/** What every attacked target answers: a complete HTTP response, so a client that got there says so. */
const REACHED = 'HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nreached\n';

/** Node code for a listener in another namespace: prints "listening", then "connection" for each one. */
const countingServer = (host: string, port: number) =>
  `require('net').createServer((s) => { console.log('connection'); s.on('error', () => {}); s.end(${JSON.stringify(REACHED)}); }).listen(${port}, '${host}', () => console.log('listening'))`;

/** A listener on the host's loopback that counts who reached it. */
class Listener {
  connections = 0;
  private constructor(
    private readonly server: net.Server,
    readonly port: number,
  ) {}
  static async start(options: { http?: boolean } = {}): Promise<Listener> {
    let listener: Listener | undefined;
    const onConnection = () => listener && listener.connections++;
    const server = options.http ? httpServer() : net.createServer((s) => s.on('error', () => undefined).end(REACHED));
    server.on('connection', onConnection);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    listener = new Listener(server, (server.address() as net.AddressInfo).port);
    releaseAtEnd(() => server.close());
    return listener;
  }
}
const httpServer = () => http.createServer((_req, res) => res.end('allowed-host-says-hi\n'));

/** A host at an address of its own, in a network namespace wired to ours with a veth pair. */
class NamespacedHost {
  lines = '';
  private constructor(
    readonly ns: string,
    private readonly veth: string,
    readonly address: string,
    readonly port: number,
    private readonly child: ChildProcess,
  ) {
    child.stdout!.on('data', (b: Buffer) => (this.lines += b.toString()));
  }
  get connections() {
    return this.lines.split('\n').filter((l) => l === 'connection').length;
  }
  static async start(): Promise<NamespacedHost> {
    const id = randomBytes(3).toString('hex');
    const [ns, veth, peer] = [`flt-${id}`, `fh${id}`, `fn${id}`];
    const subnet = `10.${200 + (parseInt(id.slice(0, 2), 16) % 50)}.${parseInt(id.slice(2, 4), 16)}`;
    const ip = (...args: string[]) => execFileSync('ip', args);
    ip('netns', 'add', ns);
    ip('link', 'add', veth, 'type', 'veth', 'peer', 'name', peer);
    ip('link', 'set', peer, 'netns', ns);
    ip('addr', 'add', `${subnet}.1/30`, 'dev', veth);
    ip('link', 'set', veth, 'up');
    ip('-n', ns, 'addr', 'add', `${subnet}.2/30`, 'dev', peer);
    ip('-n', ns, 'link', 'set', peer, 'up');
    ip('-n', ns, 'link', 'set', 'lo', 'up');
    const port = 8080;
    const child = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', countingServer(`${subnet}.2`, port)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const host = new NamespacedHost(ns, veth, `${subnet}.2`, port, child);
    releaseAtEnd(() => host.stop());
    await waitFor('the namespaced host to listen', async () => (host.lines.includes('listening') ? true : undefined));
    return host;
  }
  private stop() {
    this.child.kill('SIGKILL');
    execFileSync('ip', ['link', 'del', this.veth]);
    execFileSync('ip', ['netns', 'del', this.ns]);
  }
}

/** Whether this process can open a TCP connection to host:port: proves a target is there to attack. */
function reachableFromHost(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect({ host, port, timeout: 5_000 }, () => (s.destroy(), resolve(true)));
    s.on('error', () => resolve(false));
    s.on('timeout', () => (s.destroy(), resolve(false)));
  });
}

const temporal = inject('temporalAddress');
const [temporalHost, temporalPort] = [
  temporal.slice(0, temporal.lastIndexOf(':')),
  Number(temporal.slice(temporal.lastIndexOf(':') + 1)),
];

let env: TestEnv;
let loopback: Listener;
let allowed: Listener;
let nsHost: NamespacedHost;
let neighbour: { port: number; connections: () => number };

/** Another sandbox with network on, serving on its own loopback while the attack runs. */
async function startNeighbour() {
  const provider = new LocalSandboxProvider(tempDir('neighbour'));
  const sb = await provider.provision('neighbour', { network: true });
  const port = 20_000 + Math.floor(Math.random() * 20_000);
  let output = '';
  const stop = new AbortController();
  const code = countingServer('127.0.0.1', port).replace(/'/g, `'\\''`);
  const done = sb.exec(`exec ${process.execPath} -e '${code}'`, {
    timeoutMs: 600_000,
    signal: stop.signal,
    onOutput: (c) => (output += c),
  });
  releaseAtEnd(async () => {
    stop.abort();
    await done;
  });
  await waitFor('the neighbour sandbox to listen', async () => (output.includes('listening') ? true : undefined));
  return { port, connections: () => output.split('\n').filter((l) => l === 'connection').length };
}

beforeAll(async () => {
  loopback = await Listener.start();
  allowed = await Listener.start({ http: true });
  nsHost = await NamespacedHost.start();
  neighbour = await startNeighbour();
  // The operator allows one exact loopback endpoint; nothing else local is allowed.
  vi.stubEnv('FLOTILLA_EGRESS_ALLOW', `127.0.0.1:${allowed.port}`);
  env = await TestEnv.start();
});
afterAll(() => {
  vi.unstubAllEnvs();
});

/**
 * The attacking agent. Each attempt prints "REACHED <label>" or "BLOCKED <label>: <last line of
 * the error>"; then it exits 3, so the worker's report carries the output's tail.
 */
function attackScript(victimRun: string, ownRun: string): string {
  const client = path.dirname(require.resolve('@temporalio/client/package.json'));
  const clientAttack = `
const { Connection, Client } = require(${JSON.stringify(client)});
const step = async (label, fn) => {
  try { await fn(); console.log('REACHED ' + label); }
  catch (e) { console.log('BLOCKED ' + label + ': ' + String(e && e.message).split('\\n')[0]); }
};
(async () => {
  let client;
  await step('temporal-client-connect', async () => {
    client = new Client({ connection: await Connection.connect({ address: ${JSON.stringify(temporal)}, connectTimeout: '5s' }) });
  });
  if (!client) return;
  await step('signal-approve-victim', () => client.workflow.getHandle(${JSON.stringify(victimRun)}).signal('approve', { gate: 'plan', by: 'agent' }));
  await step('signal-approve-own-push', () => client.workflow.getHandle(${JSON.stringify(ownRun)}).signal('approve', { gate: 'push', sha: '0'.repeat(40), by: 'agent' }));
  await step('update-victim', () => client.workflow.getHandle(${JSON.stringify(victimRun)}).executeUpdate('approve', { args: [] }));
  await step('start-own-run', () => client.workflow.start('leaderWorkflow', { taskQueue: 'flotilla', workflowId: ${JSON.stringify(`${victimRun}-attacker`)}, args: [{}] }));
  await step('terminate-victim', () => client.workflow.getHandle(${JSON.stringify(victimRun)}).terminate('by an agent'));
  process.exit(0);
})();`;
  const attempts: [string, string][] = [
    ['temporal-direct', `exec 3<>/dev/tcp/${temporalHost}/${temporalPort}`],
    ['temporal-proxy', `curl -fsS -m 5 -p -o /dev/null http://${temporal}/`],
    ['temporal-ui-proxy', `curl -fsS -m 5 -o /dev/null http://${temporalHost}:${temporalPort + 1000}/`],
    ['loopback-direct', `exec 3<>/dev/tcp/127.0.0.1/${loopback.port}`],
    ['loopback-proxy', `curl -fsS -m 5 -p -o /dev/null http://127.0.0.1:${loopback.port}/`],
    ['loopback-by-name-proxy', `curl -fsS -m 5 -p -o /dev/null http://${os.hostname()}:${loopback.port}/`],
    ['loopback-mapped-proxy', `curl -fsS -m 5 -p -o /dev/null 'http://[::ffff:127.0.0.1]:${loopback.port}/'`],
    ['nshost-direct', `exec 3<>/dev/tcp/${nsHost.address}/${nsHost.port}`],
    ['nshost-proxy', `curl -fsS -m 5 -p -o /dev/null http://${nsHost.address}:${nsHost.port}/`],
    ['neighbour-direct', `exec 3<>/dev/tcp/127.0.0.1/${neighbour.port}`],
    ['neighbour-proxy', `curl -fsS -m 5 -p -o /dev/null http://127.0.0.1:${neighbour.port}/`],
    ['metadata-proxy', `curl -fsS -m 5 -o /dev/null http://169.254.169.254/latest/meta-data/`],
    ['allowed-http', `curl -sS -m 10 -f http://127.0.0.1:${allowed.port}/`],
    ['allowed-connect', `curl -sS -m 10 -f -p http://127.0.0.1:${allowed.port}/`],
    ['registry', `curl -sS -m 20 -f -o /dev/null https://registry.npmjs.org/-/ping`],
  ];
  const lines = attempts.map(
    ([label, cmd]) => `attempt ${label} ${JSON.stringify(`timeout 20 bash -c ${JSON.stringify(cmd)}`)}`,
  );
  return [
    `attempt() { if out=$(eval "$2" 2>&1); then echo "REACHED $1: $out"; else echo "BLOCKED $1: $(printf '%s' "$out" | tail -n 1)"; fi; }`,
    ...lines,
    `timeout 60 ${process.execPath} -e '${clientAttack.replace(/'/g, `'\\''`)}' 2>&1 | grep -E '^(REACHED|BLOCKED)'`,
    'exit 3',
  ].join('\n');
}

describe('a sandbox with network on', () => {
  it('reaches neither Temporal, the host, a namespaced host nor another sandbox; allowed hosts work through the proxy', async () => {
    // Every target is there: from the host, each one answers.
    for (const [host, port] of [
      [temporalHost, temporalPort],
      ['127.0.0.1', loopback.port],
      [nsHost.address, nsHost.port],
    ] as const) {
      expect(await reachableFromHost(host, port), `${host}:${port} from the host`).toBe(true);
    }
    // The targets saw those probes (the namespaced host reports through a pipe), and nothing else.
    await waitFor('the targets to see the probes', async () =>
      loopback.connections === 1 && nsHost.connections === 1 ? true : undefined,
    );

    const victimRemote = await makeRemote({ 'README.md': 'x\n' });
    const victim = await env.start(shellRequest(victimRemote.url, [subTask('one', 'true')], withGates('plan')));
    await waitForStatus(victim, 'the victim at its plan gate', (s) => s.phase === 'awaiting-plan-approval');

    const remote = await makeRemote({ 'README.md': 'x\n' });
    const ownRun = `run-${randomUUID()}`;
    const attacker = subTask('attacker', attackScript(victim.workflowId, ownRun), { ownedPaths: ['attack'] });
    const end = await env.run(
      shellRequest(remote.url, [attacker], {
        ...withGates('push'),
        // A request can add hosts, but no name it adds leads to a local address: validate refuses
        // local names and addresses (test/unit/request.test.ts), and this host's own name, which
        // resolves to one of its addresses, is refused by the proxy, which decides by the address.
        sandbox: { network: true, allowHosts: [`${os.hostname()}:${loopback.port}`] },
      }),
      ownRun,
    );

    const worker = end.result?.workers.find((w) => w.workerId === 'attacker');
    expect(worker).toMatchObject({ status: 'failed', reason: 'the agent exited with code 3', isolation: 'bubblewrap' });
    const log = (await new ArtifactStore(path.join(env.dataDir, 'artifacts')).get(worker!.logRef!)).toString();
    const outcome = (label: string) =>
      log.split('\n').find((l) => l.startsWith(`REACHED ${label}`) || l.startsWith(`BLOCKED ${label}`));

    // Nothing local was reached, directly or through the proxy, and the host's side saw nobody.
    for (const label of [
      'temporal-direct',
      'temporal-proxy',
      'temporal-ui-proxy',
      'loopback-direct',
      'loopback-proxy',
      'loopback-by-name-proxy',
      'loopback-mapped-proxy',
      'nshost-direct',
      'nshost-proxy',
      'neighbour-direct',
      'neighbour-proxy',
      'metadata-proxy',
      'temporal-client-connect',
    ]) {
      expect(outcome(label), label).toMatch(new RegExp(`^BLOCKED ${label}`));
    }
    expect(outcome('temporal-direct')).toMatch(/Connection refused/);
    expect(outcome('nshost-direct')).toMatch(/Network is unreachable/);
    expect(outcome('temporal-proxy')).toMatch(/error: 403$/);
    expect(loopback.connections).toBe(1);
    expect(nsHost.connections).toBe(1);
    expect(neighbour.connections()).toBe(0);

    // The report says what the proxy refused, and why: the address, not the name, decides.
    expect(worker!.tail).toContain("the sandbox's network refused");
    expect(log).toContain(`CONNECT ${temporal}: ${temporal} is not on the sandbox's allowlist`);
    const name = os.hostname().toLowerCase();
    expect(log).toMatch(
      new RegExp(
        `CONNECT ${name}:${loopback.port}: ${name} resolves to \\S+, a loopback, private, link-local or local address`,
      ),
    );
    expect(log).toContain(
      `CONNECT ${nsHost.address}:${nsHost.port}: ${nsHost.address}:${nsHost.port} is not on the sandbox's allowlist`,
    );

    // No message from inside reached Temporal: the victim still waits at its gate, unsignalled.
    expect((await victim.describe()).status.name).toBe('RUNNING');
    expect((await victim.query(statusQuery)).phase).toBe('awaiting-plan-approval');
    for (const handle of [victim, env.client.workflow.getHandle(ownRun)]) {
      const events = (await handle.fetchHistory()).events ?? [];
      // The run's own worker children report progress (its host, checkpoints) by signal: those come from a workflow, not a client.
      const fromChild = (e: (typeof events)[number]) =>
        e.workflowExecutionSignaledEventAttributes?.externalWorkflowExecution?.workflowId?.startsWith(
          `${handle.workflowId}/`,
        );
      expect(
        events.filter(
          (e) =>
            (e.workflowExecutionSignaledEventAttributes && !fromChild(e)) ||
            e.workflowExecutionUpdateAcceptedEventAttributes,
        ),
      ).toEqual([]);
    }
    await expect(env.client.workflow.getHandle(`${victim.workflowId}-attacker`).describe()).rejects.toThrow(
      /not found/i,
    );

    // What the worker's configuration allows works, plain and tunnelled, and so does a registry.
    expect(outcome('allowed-http')).toBe('REACHED allowed-http: allowed-host-says-hi');
    expect(outcome('allowed-connect')).toBe('REACHED allowed-connect: allowed-host-says-hi');
    expect(allowed.connections).toBeGreaterThanOrEqual(2);
    expect(outcome('registry')).toMatch(/^REACHED registry/);

    await victim.terminate('test done');
  });
});

describe('Claude Code with network on', () => {
  it('reaches the model server named by the worker, through the proxy, and its Bash tool reaches nothing local', async () => {
    const server = await ModelServer.start();
    vi.stubEnv('ANTHROPIC_BASE_URL', server.url);
    vi.stubEnv('ANTHROPIC_API_KEY', 'test-key');
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const before = loopback.connections;
    server.script('NET-claude', [
      {
        tools: [
          {
            name: 'Bash',
            input: {
              command: `curl -fsS -m 5 -p http://127.0.0.1:${loopback.port}/ > probe/out.txt 2>&1; cat 2>> probe/out.txt < /dev/tcp/127.0.0.1/${loopback.port}; true`,
              description: 'probe',
            },
          },
        ],
      },
      { text: 'Probed.' },
    ]);
    const end = await env.run({
      objective: 'probe with claude',
      repo: { url: remote.url },
      testCmd: 'cat probe/out.txt',
      setupCmd: 'mkdir -p probe',
      sandbox: { network: true },
      subTasks: [
        { id: 'probe', prompt: 'Task NET-claude: probe', ownedPaths: ['probe'], agent: { kind: 'claude-code' } },
      ],
    });
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    const out = await remote.show('main', 'probe/out.txt');
    expect(out).toContain('The requested URL returned error: 403');
    expect(out).toContain('Connection refused');
    expect(loopback.connections).toBe(before);
  });
});

describeReplay(() => env, 1);
