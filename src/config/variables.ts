/**
 * Every environment variable Flotilla reads, in one table: what it does, its default, who reads
 * it, and the parser that turns its value into a setting or an error naming it. Code reads a
 * variable only through setting() (a few on purpose elsewhere: DIRECT_READS says which and why),
 * and docs/configuration.md is generated from this file (`npm run docs:config`).
 */
import os from 'node:os';
import path from 'node:path';
import { repoUrlProblem } from '../contracts/names';
import { ConfigError } from './error';
import {
  type Parser,
  directoryOr,
  egressEntries,
  flag,
  httpUrl,
  list,
  matching,
  nonEmptyOr,
  oneOf,
  parseMaxLimits,
  parseUidRange,
  port,
  present,
  retentionAge,
  text,
  tokenHosts,
  textOr,
  value,
  valueOr,
} from './parse';

export const GROUPS = {
  temporal: 'Temporal',
  host: 'The host and its data',
  deploys: 'Deploys',
  git: 'Git',
  sandboxes: 'Sandboxes',
  agents: 'Agents',
  retention: 'Retention',
  notify: 'Notifications',
  observability: 'Logs and tracing',
  terminal: 'The command line',
} as const;

export interface Variable<T> {
  group: keyof typeof GROUPS;
  /** The processes that read it (markdown). */
  readBy: string;
  /** What applies when it is unset (markdown). */
  default: string;
  /** What it does (markdown). */
  doc: string;
  /** Its line in `flotilla --help`, for those a CLI user needs there. */
  help?: string;
  parse: Parser<T>;
}

function variable<T>(v: Variable<T>): Variable<T> {
  return v;
}

export const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;
export const LOG_FORMATS = ['text', 'json'] as const;

/** A host id names a task queue and shows in every status: letters, digits, ".", "_" and "-" only. */
const HOST_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

/**
 * FLOTILLA_HOST_ID, or the hostname. It must stay the same across restarts, so that a worker
 * restarted with its data directory serves the sandboxes there again, and differ between hosts.
 */
const hostIdParser: Parser<string> = (raw, name) => {
  const id = raw || os.hostname();
  if (!HOST_ID.test(id)) {
    const from = raw ? name : `the hostname (set ${name} instead)`;
    throw new ConfigError(
      `${from} must be 1-63 letters, digits, ".", "_" or "-" (starting with a letter or digit), not "${id}"`,
    );
  }
  return id;
};

/** A bare repository URL, by the rules of repo.url plus git:// (a daemon on a private network). */
const storeUrl: Parser<string | undefined> = (raw, name) => {
  if (!raw) return undefined;
  const problem = repoUrlProblem(raw, ['git']);
  if (problem) throw new ConfigError(`${name} ${problem}`);
  return raw;
};

/** FLOTILLA_ISOLATION: `none`, or unset (or `bubblewrap`, the default said out loud). */
const isolation: Parser<'none' | undefined> = (raw, name) => {
  if (raw === 'none') return 'none';
  if (!raw || raw === 'bubblewrap') return undefined;
  throw new ConfigError(`${name} must be "none" (agents run unisolated) or unset (bubblewrap), not "${raw}"`);
};

const UNSET = 'unset';
const OTLP = '(OTLP over HTTP), such as http://localhost:4318';

export const DEFAULT_TASK_QUEUE = 'flotilla';

export const VARIABLES = {
  TEMPORAL_ADDRESS: variable({
    group: 'temporal',
    readBy: 'worker, CLI',
    default: 'the embedded dev server',
    doc: 'The Temporal frontend to use (`host:port`). With the rest of the `TEMPORAL_*` connection settings it is read by `@temporalio/envconfig`, as the Temporal CLI reads it; Flotilla itself only asks whether it is set, to say where an address came from.',
    help: 'use this Temporal cluster (host:port) instead of the embedded dev server',
    parse: text,
  }),
  TEMPORAL_NAMESPACE: variable({
    group: 'temporal',
    readBy: 'worker, CLI',
    default: '`default`',
    doc: 'The namespace of runs and workers.',
    help: 'its namespace (default "default")',
    parse: valueOr('default'),
  }),
  TEMPORAL_UI_URL: variable({
    group: 'temporal',
    readBy: 'CLI',
    default: "the embedded server's",
    doc: "The configured cluster's Web UI base URL, for links.",
    help: "its Web UI, for links (the embedded server's is known)",
    parse: httpUrl('(the Web UI), such as https://temporal.example.com'),
  }),
  FLOTILLA_TEMPORAL_HTTP_URL: variable({
    group: 'temporal',
    readBy: 'CLI',
    default: "the embedded server's (port + 10); none for a configured cluster",
    doc:
      "The configured cluster's HTTP API base URL (the frontend's `httpPort`, 7243 by default). " +
      '`flotilla status` reads through it, which is faster than loading the gRPC client; unset, or with ' +
      'client certificates or gRPC metadata configured, it uses gRPC.',
    help: "its HTTP API, for a faster `flotilla status` (the embedded server's is known)",
    parse: httpUrl('(the HTTP API), such as https://temporal.example.com:7243'),
  }),
  TEMPORAL_PROFILE: variable({
    group: 'temporal',
    readBy: 'worker, CLI',
    default: '`default`',
    doc: 'The profile of the Temporal config file to connect with.',
    parse: value,
  }),
  TEMPORAL_CONFIG_FILE: variable({
    group: 'temporal',
    readBy: 'worker, CLI',
    default: '`$XDG_CONFIG_HOME/temporalio/temporal.toml`',
    doc: "The Temporal CLI's config file, with its profiles. The worker refuses to start when the file holds an API key or key data and sandboxes can read it.",
    parse: value,
  }),
  XDG_CONFIG_HOME: variable({
    group: 'temporal',
    readBy: 'worker',
    default: '`~/.config`',
    doc: 'Where the Temporal config file is looked for when `TEMPORAL_CONFIG_FILE` is unset.',
    parse: value,
  }),
  TEMPORAL_CLI_PATH: variable({
    group: 'temporal',
    readBy: 'worker',
    default: "`temporal` on `PATH`, else pip's",
    doc: 'The `temporal` binary that runs the embedded dev server.',
    parse: text,
  }),
  FLOTILLA_TEMPORAL_PORT: variable({
    group: 'temporal',
    readBy: 'worker, CLI',
    default: '`7233`',
    doc: 'The port of the embedded dev server; its Web UI is on port + 1000, its HTTP API on port + 10.',
    help: 'port of the embedded dev server (default 7233; Web UI on port + 1000, HTTP API on port + 10)',
    parse: port(7233),
  }),
  FLOTILLA_TASK_QUEUE: variable({
    group: 'temporal',
    readBy: 'worker, CLI',
    default: '`flotilla`',
    doc: "The task queue of workers and runs; a run waits until a worker polls its queue. Each worker also polls its host's own queue, `<queue>@<host id>`.",
    help: 'task queue of runs and workers (default "flotilla"); both must agree',
    parse: nonEmptyOr(DEFAULT_TASK_QUEUE),
  }),
  FLOTILLA_HOME: variable({
    group: 'host',
    readBy: 'worker, CLI',
    default: '`~/.flotilla`',
    doc: "The data directory: sandboxes, the staging repository, run mirrors, logs and the embedded server's database.",
    help: 'data directory (default ~/.flotilla)',
    parse: directoryOr(() => path.join(os.homedir(), '.flotilla')),
  }),
  FLOTILLA_HOST_ID: variable({
    group: 'host',
    readBy: 'worker',
    default: 'the hostname',
    doc: 'Which host this worker is: the same across restarts, different on every host (1-63 letters, digits, `.`, `_` or `-`).',
    parse: hostIdParser,
  }),
  FLOTILLA_STAGING_URL: variable({
    group: 'host',
    readBy: 'worker, `flotilla gc`',
    default: '`$FLOTILLA_HOME/staging.git` is the store',
    doc: 'The shared store every worker host reaches (`git://`, `file://`, `ssh://`, `https://`, never with credentials in it), where run state that outlives a host lives.',
    help: 'worker, gc: the shared store of run state every worker host reaches',
    parse: storeUrl,
  }),
  FLOTILLA_DEPLOYMENT: variable({
    group: 'deploys',
    readBy: 'worker',
    default: 'an unversioned worker',
    doc: 'Poll as a version of this worker deployment, every run pinned to the version that started it (1-100 letters, digits, `-` or `_`).',
    help: 'worker: poll as a version of this worker deployment, runs pinned to it',
    parse: matching(
      /^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$/,
      '1-100 letters, digits, "-" or "_" (starting with a letter or digit)',
    ),
  }),
  FLOTILLA_BUILD_ID: variable({
    group: 'deploys',
    readBy: 'worker',
    default: 'package version + workflow code hash',
    doc: "That version's build ID; only with `FLOTILLA_DEPLOYMENT` (1-100 letters, digits, `.`, `-`, `_` or `+`).",
    help: "worker: that version's build ID (default: package version + workflow code hash)",
    parse: matching(
      /^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$/,
      '1-100 letters, digits, ".", "-", "_" or "+" (starting with a letter or digit)',
    ),
  }),
  FLOTILLA_REGISTER_SEARCH_ATTRIBUTES: variable({
    group: 'deploys',
    readBy: 'worker',
    default: UNSET,
    doc: "`1`: register Flotilla's search attributes in the namespace at start, instead of refusing to start without them (`flotilla setup-cluster` does it by hand).",
    help: "worker: 1 registers Flotilla's search attributes at start (else: flotilla setup-cluster)",
    parse: flag,
  }),
  FLOTILLA_GIT_TOKEN: variable({
    group: 'git',
    readBy: 'worker',
    default: UNSET,
    doc: "A token for https remotes, sent as a header by the worker's host-side git only, to `FLOTILLA_GIT_TOKEN_HOSTS`; never to a sandbox.",
    parse: text,
  }),
  FLOTILLA_GIT_TOKEN_HOSTS: variable({
    group: 'git',
    readBy: 'worker',
    default: '`github.com`',
    doc: "The only hosts (`host` or `host:port`, comma-separated) `FLOTILLA_GIT_TOKEN` is sent to. A value that can never match an https URL's host (a URL, a wildcard, port 443) is refused.",
    parse: tokenHosts,
  }),
  FLOTILLA_NOTIFY_SECRET: variable({
    group: 'notify',
    readBy: 'worker',
    default: UNSET,
    doc: "The key of every webhook delivery's signature (`X-Flotilla-Signature-256: sha256=<HMAC-SHA256 of the body>`, request.notify); unset: deliveries are unsigned. Redacted from output like the git token.",
    parse: text,
  }),
  FLOTILLA_WEBHOOK_LISTEN: variable({
    group: 'notify',
    readBy: 'worker',
    default: 'no receiver',
    doc: "`host:port` where the worker receives GitHub's webhooks (pull request reviews, review comments, issue comments, pull requests): a run waiting on that PR's review reads it at once instead of at its next poll (`review.pollSeconds`). Needs `FLOTILLA_WEBHOOK_SECRET`. Port 0 takes a free port, logged at start.",
    parse: matching(/^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$/, '`host:port` (e.g. `0.0.0.0:8787`)'),
  }),
  FLOTILLA_WEBHOOK_SECRET: variable({
    group: 'notify',
    readBy: 'worker',
    default: UNSET,
    doc: "The secret of the repository's webhook on GitHub: a delivery whose `X-Hub-Signature-256` is not the HMAC-SHA256 of its body under it is refused (401). Redacted from output like the git token.",
    parse: text,
  }),
  FLOTILLA_FORGE_TOKEN: variable({
    group: 'git',
    readBy: 'worker',
    default: '`FLOTILLA_GIT_TOKEN`',
    doc: "A token for the forge's API (GitHub, GitHub Enterprise: pull requests, comments, checks, issues), used by the worker's host-side activities only, and only for a forge whose host is in `FLOTILLA_GIT_TOKEN_HOSTS` (`api.github.com` counts as `github.com`). Unset, the git token is used.",
    parse: text,
  }),
  FLOTILLA_ISOLATION: variable({
    group: 'sandboxes',
    readBy: 'worker',
    default: 'bubblewrap',
    doc: '`none` runs agents unisolated, as plain processes: the only way to run without bubblewrap, reported loudly in every status and report. `bubblewrap` (or unset) is the default; any other value is refused.',
    parse: isolation,
  }),
  FLOTILLA_REQUIRE_ISOLATION: variable({
    group: 'sandboxes',
    readBy: 'worker',
    default: UNSET,
    doc: '`1`: the worker refuses to start if bubblewrap cannot isolate agents (the Docker image sets it).',
    parse: flag,
  }),
  FLOTILLA_BWRAP: variable({
    group: 'sandboxes',
    readBy: 'worker',
    default: '`bwrap`',
    doc: 'The bubblewrap binary local sandboxes use.',
    parse: textOr('bwrap'),
  }),
  FLOTILLA_SANDBOX_UIDS: variable({
    group: 'sandboxes',
    readBy: 'worker',
    default: '`200000-265535`',
    doc: 'Host uids handed out to local sandboxes (`first-last`, first at least 1000), one per sandbox.',
    parse: parseUidRange,
  }),
  FLOTILLA_SANDBOX_MAX_LIMITS: variable({
    group: 'sandboxes',
    readBy: 'worker',
    default: "the local sandbox's maximums",
    doc: "The worker's caps on `sandbox.limits`, e.g. `memoryMiB=8192,processes=512`.",
    parse: parseMaxLimits,
  }),
  FLOTILLA_SANDBOX_RO_PATHS: variable({
    group: 'sandboxes',
    readBy: 'worker',
    default: UNSET,
    doc: 'Extra host directories (`:`-separated) mounted read-only into sandboxes.',
    parse: list(':'),
  }),
  FLOTILLA_EGRESS_ALLOW: variable({
    group: 'sandboxes',
    readBy: 'worker',
    default: UNSET,
    doc: 'Hosts networked sandboxes may also reach (comma- or space-separated): `name`, `name:port`, `*.domain`, an IP address; an entry with a port (`10.0.0.5:3000`, `[fd00::5]:3000`) is exact and may be a private address. A wildcard alone, a CIDR range or a URL is refused.',
    parse: egressEntries,
  }),
  ANTHROPIC_API_KEY: variable({
    group: 'agents',
    readBy: 'worker; passed to Claude Code',
    default: UNSET,
    doc: "Claude Code's API key, passed into its sandbox only.",
    parse: text,
  }),
  ANTHROPIC_AUTH_TOKEN: variable({
    group: 'agents',
    readBy: 'worker; passed to Claude Code',
    default: UNSET,
    doc: "Claude Code's bearer token (a gateway's), passed into its sandbox only.",
    parse: text,
  }),
  ANTHROPIC_BASE_URL: variable({
    group: 'agents',
    readBy: 'worker; passed to Claude Code',
    default: '`https://api.anthropic.com`',
    doc: "Claude Code's model API; a networked sandbox may reach exactly this endpoint.",
    parse: text,
  }),
  OPENAI_API_KEY: variable({
    group: 'agents',
    readBy: 'worker; passed to Codex',
    default: UNSET,
    doc: "Codex's API key, passed into its sandbox only.",
    parse: text,
  }),
  CODEX_API_KEY: variable({
    group: 'agents',
    readBy: 'worker; passed to Codex',
    default: UNSET,
    doc: "Codex's API key under its other name, passed into its sandbox only.",
    parse: text,
  }),
  OPENAI_BASE_URL: variable({
    group: 'agents',
    readBy: 'worker; passed to Codex',
    default: '`https://api.openai.com`',
    doc: "Codex's model API; a networked sandbox may reach exactly this endpoint.",
    parse: text,
  }),
  FLOTILLA_RETENTION: variable({
    group: 'retention',
    readBy: 'worker',
    default: 'off',
    doc: "Remove the state of runs closed longer than this (`12h`, `7d`), as `flotilla gc` would; it must be shorter than the namespace's retention.",
    parse: retentionAge,
  }),
  FLOTILLA_RETENTION_INTERVAL: variable({
    group: 'retention',
    readBy: 'worker',
    default: '`1h`',
    doc: 'How often the worker collects, with `FLOTILLA_RETENTION`.',
    parse: retentionAge,
  }),
  FLOTILLA_LOG_LEVEL: variable({
    group: 'observability',
    readBy: 'worker',
    default: '`info`',
    doc: "`debug` (also the SDK's own messages, and stack traces), `info`, `warn` or `error`; `--verbose` is `debug`.",
    parse: oneOf(LOG_LEVELS, 'info'),
  }),
  FLOTILLA_LOG_FORMAT: variable({
    group: 'observability',
    readBy: 'worker',
    default: '`text`',
    doc: '`json`: one pino JSON object a line, for a log collector; `--log-format` wins.',
    parse: oneOf(LOG_FORMATS, 'text'),
  }),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: variable({
    group: 'observability',
    readBy: 'worker, CLI',
    default: 'no tracing, nothing loaded',
    doc: 'Trace runs to this OTLP/HTTP URL (the full `/v1/traces` URL).',
    parse: httpUrl(OTLP),
  }),
  OTEL_EXPORTER_OTLP_ENDPOINT: variable({
    group: 'observability',
    readBy: 'worker, CLI',
    default: 'no tracing, nothing loaded',
    doc: 'Trace runs to this OTLP/HTTP collector (`/v1/traces` is added), unless `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set.',
    parse: httpUrl(OTLP),
  }),
  OTEL_SERVICE_NAME: variable({
    group: 'observability',
    readBy: 'worker, CLI',
    default: '`flotilla-worker` / `flotilla-cli`',
    doc: 'The service spans are reported as.',
    parse: text,
  }),
  NO_COLOR: variable({
    group: 'terminal',
    readBy: 'CLI',
    default: 'colours on a terminal',
    doc: 'Set (to anything): no colours, even on a terminal.',
    help: 'no colours, even on a terminal',
    parse: present,
  }),
  TERM: variable({
    group: 'terminal',
    readBy: 'CLI',
    default: "the terminal's",
    doc: '`dumb`: no colours.',
    parse: text,
  }),
  USER: variable({
    group: 'terminal',
    readBy: 'CLI',
    default: '`cli`',
    doc: 'Who approves, rejects, pauses or resumes, when `--by` does not say.',
    parse: valueOr('cli'),
  }),
};

export type VariableName = keyof typeof VARIABLES;
export type SettingOf<N extends VariableName> = ReturnType<(typeof VARIABLES)[N]['parse']>;

/** The processes that read variable `name`, from its row: `flotilla gc` is the CLI's. */
export function readersOf(name: VariableName): ('worker' | 'cli')[] {
  const { readBy } = VARIABLES[name];
  return [
    ...(/\bworker\b/.test(readBy) ? ['worker' as const] : []),
    ...(/\bCLI\b|flotilla gc/.test(readBy) ? ['cli' as const] : []),
  ];
}

/** The setting of variable `name` in `env`: its parsed value, or an error naming it. */
export function setting<N extends VariableName>(name: N, env: NodeJS.ProcessEnv = process.env): SettingOf<N> {
  return VARIABLES[name].parse(env[name], name) as SettingOf<N>;
}

/** Variables read by the libraries Flotilla uses, not by Flotilla's code: documented, never parsed here. */
export const LIBRARY_VARIABLES: { names: string[]; readBy: string; doc: string }[] = [
  {
    names: [
      'TEMPORAL_API_KEY',
      'TEMPORAL_TLS',
      'TEMPORAL_TLS_SERVER_CA_CERT_PATH',
      'TEMPORAL_TLS_SERVER_CA_CERT_DATA',
      'TEMPORAL_TLS_CLIENT_CERT_PATH',
      'TEMPORAL_TLS_CLIENT_CERT_DATA',
      'TEMPORAL_TLS_CLIENT_KEY_PATH',
      'TEMPORAL_TLS_CLIENT_KEY_DATA',
      'TEMPORAL_TLS_SERVER_NAME',
      'TEMPORAL_TLS_DISABLE_HOST_VERIFICATION',
      'TEMPORAL_GRPC_META_*',
    ],
    readBy: '`@temporalio/envconfig` (worker, CLI)',
    doc: 'API key, TLS and mTLS, gRPC metadata: the connection to a cluster, as the Temporal CLI reads them.',
  },
  {
    names: ['E2B_API_KEY', 'E2B_DOMAIN'],
    readBy: 'the E2B SDK (worker)',
    doc: 'E2B sandboxes (`sandbox.provider: e2b`); a worker without the key still starts.',
  },
  {
    names: ['OTEL_EXPORTER_OTLP_HEADERS'],
    readBy: 'the OTLP exporter (worker, CLI)',
    doc: 'Headers for the trace collector (an API key).',
  },
  {
    names: ['SSH_AUTH_SOCK', 'GIT_SSH_COMMAND', 'GIT_SSL_CAINFO'],
    readBy: "the worker's host-side git",
    doc: 'Passed on to git when it reaches a remote or the shared store (ssh agent, ssh command, CA bundle).',
  },
  {
    names: ['PATH', 'HOME'],
    readBy: 'the programs the worker starts',
    doc: 'Passed on to git, bubblewrap and agents, so that they find their binaries (and an ssh remote its keys).',
  },
];

/**
 * Where src/ reads the environment other than through setting(), and why. A unit test holds
 * every `process.env` outside src/config/ to this list.
 */
export const DIRECT_READS: { code: string; pattern: RegExp; why: string }[] = [
  {
    code: 'process.env.PATH, process.env.HOME',
    pattern: /process\.env\.(PATH|HOME)\b/,
    why: 'PATH and HOME are handed on to the programs Flotilla starts (git, bubblewrap, agents), so that they find their binaries and an ssh remote its keys; Flotilla does not interpret them.',
  },
  {
    code: 'process.env[name]',
    pattern: /process\.env\[name\]/,
    why: 'Variables passed through unchanged by name: to an agent, those its harness lists (`passEnv`, all in the table above), and to host-side git `SSH_AUTH_SOCK`, `GIT_SSH_COMMAND` and `GIT_SSL_CAINFO`.',
  },
  {
    code: 'options.env ?? process.env',
    pattern: /options\.env \?\? process\.env/,
    why: "The spawner (src/spawner/) starts a program that was given no environment with the worker's, as Node's `spawn` would: the program sees what it would have seen had the worker started it. Flotilla does not interpret it.",
  },
  {
    code: 'env: NodeJS.ProcessEnv = process.env',
    pattern: /env: NodeJS\.ProcessEnv = process\.env/,
    why: "A default parameter, so that tests can pass an environment of their own. The function reads its variables through setting(name, env), or by a name from a list: the base URL of an agent's model API (its harness's `modelApi.baseUrlEnv`, in the table above), the credentials to redact from output (store/secrets.ts), a webhook's URL (request.notify's `urlEnv`, a name the request gives, so that a secret URL never sits in a run's history).",
  },
];
