#!/usr/bin/env node
/**
 * flotilla — start, watch, steer and serve runs. `flotilla --help` lists the commands.
 *
 * Arguments are parsed by commander: per-command help, option suggestions and choices for free,
 * with no dependencies of its own. Each command's action is a small function below; the
 * Temporal client is loaded only by the commands that talk to Temporal, so `help`, `validate`,
 * `request`, `schema` and `init` answer at once.
 */
import { writeFileSync, existsSync } from 'node:fs';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { ConfigError, dataDir, packageVersion, taskQueue } from '../config/settings';
import type { AgentSpec, LeaderRequest } from '../contracts/request';
import { type Painter, colourEnabled, inert, painter } from './terminal';
import type { RunStatus } from '../contracts/messages';

/** Bad input: a wrong argument, option or request. Exit 2. */
class UsageError extends Error {}
/** Temporal cannot be reached, or no worker serves the run. Exit 3. */
class UnreachableError extends Error {}

const EXIT = { ok: 0, notPushed: 1, badInput: 2, unreachable: 3 } as const;

const paintOut: Painter = painter(colourEnabled(process.stdout));
const paintErr: Painter = painter(colourEnabled(process.stderr));

/** Human output: text from runs is made inert first, then coloured where that helps. */
function say(text: string, colour: (inertText: string) => string = (t) => t): void {
  process.stdout.write(`${colour(inert(text))}\n`);
}

function json(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

function warn(text: string): void {
  process.stderr.write(`${paintErr('yellow', 'flotilla: warning:')} ${inert(text)}\n`);
}

function who(by: string | undefined): string {
  return by ?? process.env.USER ?? 'cli';
}

function summary(req: LeaderRequest): string {
  return req.subTasks ? `${req.subTasks.length} sub-task(s)` : 'a planner agent splits the work';
}

/**
 * Modules loaded on first use, so that `--help` loads none of them, `validate` only zod and
 * yaml, and only the commands that talk to Temporal load its client, the slowest of all.
 * (Plain requires: both the compiled CommonJS and tsx in a checkout resolve them.)
 */
const load = {
  requestFile: () => require('../client/request-file') as typeof import('../client/request-file'),
  request: () => require('../contracts/request') as typeof import('../contracts/request'),
  yaml: () => require('yaml') as typeof import('yaml'),
  temporalSdk: () => require('@temporalio/client') as typeof import('@temporalio/client'),
  connection: () => require('../temporal/connection') as typeof import('../temporal/connection'),
  temporalServer: () => require('../temporal/server') as typeof import('../temporal/server'),
  client: () => require('../client') as typeof import('../client'),
  runs: () => require('../client/list') as typeof import('../client/list'),
  searchAttributes: () => require('../temporal/search-attributes') as typeof import('../temporal/search-attributes'),
  messages: () => require('../contracts/messages') as typeof import('../contracts/messages'),
  schema: () => require('./schema') as typeof import('./schema'),
  init: () => require('./init') as typeof import('./init'),
  worker: () => require('../worker') as typeof import('../worker'),
  gc: () => require('../retention/gc') as typeof import('../retention/gc'),
};

interface Connected {
  client: Client;
  url(id: string): string | undefined;
}

/** Connects to the configured Temporal (never starts one); failures to do so exit 3. */
async function withClient<T>(fn: (c: Connected) => Promise<T>): Promise<T> {
  const { connectClient } = load.connection();
  const { workflowUrl } = load.temporalServer();
  const session = await connectClient({ dataDir: dataDir() }).catch((err: Error) => {
    throw err instanceof ConfigError || /^bad Temporal configuration/.test(err.message)
      ? new UsageError(err.message)
      : new UnreachableError(err.message);
  });
  try {
    return await fn({ client: session.client, url: (id) => workflowUrl(session.uiUrl, session.namespace, id) });
  } finally {
    await session.close();
  }
}

/** Says so when nobody will run the workflow: a run on a queue without a worker waits silently. */
async function warnIfNoWorker(client: Client, queue: string): Promise<void> {
  const { hasWorker, noWorkerMessage } = load.client();
  if (!(await hasWorker(client, queue))) warn(`${noWorkerMessage(queue)}; until then the run waits.`);
}

/** A run's status, or exit 3 saying which worker to start. */
async function statusOf(client: Client, id: string): Promise<{ status: RunStatus; taskQueue: string }> {
  const { NoWorkerError, queryStatus } = load.client();
  return queryStatus(client, id).catch((err: unknown) => {
    throw err instanceof NoWorkerError ? new UnreachableError(err.message) : err;
  });
}

function paintPhase(text: string): string {
  return text.replace(/^(phase:\s+)(\S+)/m, (_all, label: string, phase: string) => {
    const style =
      phase === 'done'
        ? 'green'
        : phase === 'failed' || phase === 'cancelled'
          ? 'red'
          : phase.startsWith('awaiting')
            ? 'yellow'
            : 'bold';
    return label + paintOut(style, phase);
  });
}

// --- commands -------------------------------------------------------------------------------

async function validateCommand(file: string): Promise<number> {
  const req = load.requestFile().loadRequestFile(file);
  say(
    `Request is valid: ${summary(req)} on ${req.repo.url} (${req.repo.baseRef} → ${req.repo.targetRef ?? req.repo.baseRef}).`,
  );
  return EXIT.ok;
}

async function requestCommand(file: string, o: { json?: boolean }): Promise<number> {
  const req = load.requestFile().loadRequestFile(file);
  process.stdout.write(o.json ? `${JSON.stringify(req)}\n` : load.yaml().stringify(req));
  return EXIT.ok;
}

async function schemaCommand(): Promise<number> {
  const { requestJsonSchemaText } = load.schema();
  process.stdout.write(requestJsonSchemaText());
  return EXIT.ok;
}

async function initCommand(o: {
  file: string;
  agent: AgentSpec['kind'];
  command?: string;
  force?: boolean;
}): Promise<number> {
  const { repoFacts, starterRequest } = load.init();
  const facts = repoFacts(process.cwd());
  if (!facts)
    throw new UsageError(
      'not inside a git repository: run `flotilla init` in the repository the agents should work on',
    );
  if (o.agent === 'shell' && !o.command) throw new UsageError('--command is required with --agent shell');
  if (o.agent !== 'shell' && o.command) throw new UsageError('--command goes with --agent shell only');
  const file = path.resolve(o.file);
  if (existsSync(file) && !o.force) throw new UsageError(`${file} exists; pass --force to overwrite it`);
  const agent: AgentSpec = o.agent === 'shell' ? { kind: 'shell', command: o.command! } : { kind: o.agent };
  writeFileSync(file, starterRequest(facts, agent));
  say(
    `Wrote ${file}: repository ${facts.url}, base ${facts.baseRef}, tests ${facts.testCmd ? `\`${facts.testCmd}\`` : 'not found (set testCmd)'}.`,
  );
  say(`Edit the TODOs, then: flotilla validate ${o.file} && flotilla start ${o.file}`);
  return EXIT.ok;
}

async function startCommand(file: string, o: { id?: string; wait?: boolean; json?: boolean }): Promise<number> {
  // Validate before connecting: a bad request never reaches Temporal.
  const req = load.requestFile().loadRequestFile(file);
  return withClient(async ({ client, url }) => {
    const { awaitRun, formatRunEnd, startRun } = load.client();
    const queue = taskQueue();
    const handle = await startRun(client, req, { taskQueue: queue, workflowId: o.id });
    await warnIfNoWorker(client, queue);
    const started = { workflowId: handle.workflowId, taskQueue: queue, webUrl: url(handle.workflowId) };
    if (!o.json) {
      say(`Started run ${handle.workflowId} (${summary(req)}).`);
      if (started.webUrl) say(`Web UI: ${started.webUrl}`);
      say(`Follow it with: flotilla watch ${handle.workflowId}`);
    }
    if (!o.wait) {
      if (o.json) json(started);
      return EXIT.ok;
    }
    const end = await awaitRun(handle);
    if (o.json) json({ ...started, end });
    else say(formatRunEnd(end));
    return end.failureType ? EXIT.notPushed : EXIT.ok;
  });
}

async function statusCommand(id: string, o: { json?: boolean }): Promise<number> {
  return withClient(async ({ client, url }) => {
    const { formatStatus } = load.client();
    const { status, taskQueue: queue } = await statusOf(client, id);
    if (o.json) json({ workflowId: id, taskQueue: queue, webUrl: url(id), ...status });
    else {
      say(formatStatus(status, id), paintPhase);
      const link = url(id);
      if (link) say(`Web UI: ${link}`);
    }
    return EXIT.ok;
  });
}

async function watchCommand(id: string): Promise<number> {
  return withClient(async ({ client }) => {
    const { formatRunEnd, watchRun } = load.client();
    const end = await watchRun(client, id, process.stdout);
    say(formatRunEnd(end));
    return end.failureType ? EXIT.notPushed : EXIT.ok;
  });
}

async function resultCommand(id: string, o: { json?: boolean }): Promise<number> {
  return withClient(async ({ client }) => {
    const { awaitRun, formatRunEnd } = load.client();
    const handle = client.workflow.getHandle(id);
    const desc = await handle.describe();
    if (desc.status.name === 'RUNNING') await warnIfNoWorker(client, desc.taskQueue);
    const end = await awaitRun(handle);
    if (o.json) json(end);
    else say(formatRunEnd(end));
    return end.failureType ? EXIT.notPushed : EXIT.ok;
  });
}

async function listCommand(o: {
  awaiting?: true | string;
  repo?: string;
  phase?: string;
  outcome?: string;
  limit: number;
  json?: boolean;
}): Promise<number> {
  const { SearchAttributesMissing, filterProblem, formatRuns, listRuns } = load.runs();
  const filters = {
    awaiting: o.awaiting === true ? 'any' : o.awaiting,
    repo: o.repo,
    phase: o.phase,
    outcome: o.outcome,
  } as import('../client/list').ListFilters;
  const problem = filterProblem(filters);
  if (problem) throw new UsageError(problem);
  return withClient(async ({ client }) => {
    const rows = await listRuns(client, o.limit, filters).catch((err: unknown) => {
      throw err instanceof SearchAttributesMissing ? new UnreachableError(err.message) : err;
    });
    if (o.json) json(rows);
    else say(formatRuns(rows));
    return EXIT.ok;
  });
}

/** Registers Flotilla's search attributes in the configured namespace, saying which it added. */
async function setupClusterCommand(): Promise<number> {
  return withClient(async ({ client }) => {
    const { registerSearchAttributes } = load.searchAttributes();
    const ns = client.options.namespace;
    const added = await registerSearchAttributes(client.connection.operatorService, ns).catch((err: Error) => {
      throw /wrong type/.test(err.message) ? new UnreachableError(err.message) : err;
    });
    say(
      added.length
        ? `Registered in namespace "${ns}": ${added.join(', ')}.`
        : `Nothing to do: namespace "${ns}" has all of Flotilla's search attributes.`,
    );
    return EXIT.ok;
  });
}

/**
 * Sends a steering message as an Update: the run answers at once, accepting it or refusing it
 * with the reason (a refusal is bad input: exit 2). No worker answering is exit 3.
 */
async function steer(
  id: string,
  send: (client: Client, c: typeof import('../client')) => Promise<string>,
): Promise<string> {
  return withClient(async ({ client }) => {
    const c = load.client();
    // The update would wait for a worker indefinitely; the status query says within seconds.
    await statusOf(client, id);
    return send(client, c).catch((err: unknown) => {
      throw err instanceof c.MessageRefused ? new UsageError(`refused: ${err.message}`) : err;
    });
  });
}

async function approveCommand(
  id: string,
  o: { gate: 'plan' | 'push'; sha?: string; comment?: string; by?: string },
): Promise<number> {
  say(
    `${id}: ${await steer(id, (client, c) => c.approve(client, id, { gate: o.gate, sha: o.sha, by: who(o.by), comment: o.comment }))}`,
  );
  return EXIT.ok;
}

async function rejectCommand(id: string, o: { gate: 'plan' | 'push'; reason: string; by?: string }): Promise<number> {
  say(
    `${id}: ${await steer(id, (client, c) => c.reject(client, id, { gate: o.gate, by: who(o.by), reason: o.reason }))}`,
  );
  return EXIT.ok;
}

async function pauseCommand(id: string, o: { worker: string; by?: string }): Promise<number> {
  say(`${id}: ${await steer(id, (client, c) => c.pause(client, id, { workerId: o.worker, by: who(o.by) }))}`);
  say(`resume it with: flotilla resume ${id} --worker ${o.worker}`);
  return EXIT.ok;
}

async function resumeCommand(
  id: string,
  o: { worker: string; message?: string; addBudget?: number; by?: string },
): Promise<number> {
  say(
    `${id}: ${await steer(id, (client, c) => c.resume(client, id, { workerId: o.worker, message: o.message, addBudgetUsd: o.addBudget, by: who(o.by) }))}`,
  );
  return EXIT.ok;
}

async function cancelCommand(id: string): Promise<number> {
  return withClient(async ({ client }) => {
    const { awaitRun, formatRunEnd } = load.client();
    const handle = client.workflow.getHandle(id);
    await handle.cancel();
    say(`Cancelling ${id}: stopping agents and destroying sandboxes...`);
    say(formatRunEnd(await awaitRun(handle)));
    return EXIT.ok;
  });
}

async function gcCommand(o: { olderThan: string; dryRun?: boolean; json?: boolean }): Promise<number> {
  const { collectGarbage, formatGc, parseAge } = load.gc();
  let olderThanMs: number;
  try {
    olderThanMs = parseAge(o.olderThan);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  return withClient(async ({ client }) => {
    const report = await collectGarbage(client, { dataDir: dataDir(), olderThanMs, dryRun: !!o.dryRun });
    if (o.json) json(report);
    else say(formatGc(report));
    return EXIT.ok;
  });
}

async function workerCommand(o: { verbose?: boolean; logFormat?: string }): Promise<number> {
  const { runWorkerProcess } = load.worker();
  const args = [...(o.verbose ? ['--verbose'] : []), ...(o.logFormat ? ['--log-format', o.logFormat] : [])];
  await runWorkerProcess(args).catch((err: Error) => {
    if (err instanceof ConfigError) throw new UsageError(err.message);
    throw /no Temporal server|ECONNREFUSED|UNAVAILABLE/.test(err.message) ? new UnreachableError(err.message) : err;
  });
  return EXIT.ok;
}

// --- the command line -----------------------------------------------------------------------

function positiveNumber(name: string) {
  return (value: string): number => {
    const n = Number(value);
    if (!(n > 0) || !Number.isFinite(n))
      throw new InvalidArgumentError(`${name} must be a positive number of dollars.`);
    return n;
  };
}

function positiveInteger(name: string) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`${name} must be a positive whole number.`);
    return n;
  };
}

const ENVIRONMENT = `
Environment:
  TEMPORAL_ADDRESS        use this Temporal cluster (host:port) instead of the embedded dev server
  TEMPORAL_NAMESPACE      its namespace (default "default")
  TEMPORAL_UI_URL         its Web UI, for links (the embedded server's is known)
  FLOTILLA_TEMPORAL_PORT  port of the embedded dev server (default 7233; Web UI on port + 1000)
  FLOTILLA_TASK_QUEUE     task queue of runs and workers (default "flotilla"); both must agree
  FLOTILLA_HOME           data directory (default ~/.flotilla)
  FLOTILLA_STAGING_URL    worker, gc: the shared store of run state every worker host reaches
  FLOTILLA_DEPLOYMENT     worker: poll as a version of this worker deployment, runs pinned to it
  FLOTILLA_BUILD_ID       worker: that version's build ID (default: package version + workflow code hash)
  FLOTILLA_REGISTER_SEARCH_ATTRIBUTES  worker: 1 registers Flotilla's search attributes at start (else: flotilla setup-cluster)
  NO_COLOR                no colours, even on a terminal

Exit codes:
  0  done (for start --wait, result, watch: the run pushed)
  1  the run ended without pushing, or something failed
  2  bad input: an unknown command or option, a bad request file, no such run
  3  cannot reach Temporal, or no worker polls the run's task queue`;

/** `--gate plan|push`, the same on approve and reject. */
function gateOption(): Option {
  return new Option('--gate <gate>', 'the gate to pass').choices(['plan', 'push']).makeOptionMandatory();
}

function example(...lines: string[]): string {
  return `\nExample:\n${lines.map((l) => `  $ ${l}`).join('\n')}`;
}

function buildProgram(run: (action: Promise<number>) => Promise<void>): Command {
  const program = new Command('flotilla')
    .description('Run a team of coding agents on one repository as a single durable job, on Temporal.')
    .version(packageVersion(), '-v, --version', 'print the version')
    .helpOption('-h, --help', 'show help (also after any command)')
    .helpCommand('help [command]', 'show help for a command')
    .showHelpAfterError('(add --help for usage)')
    .showSuggestionAfterError(true)
    .configureOutput({
      getOutHasColors: () => colourEnabled(process.stdout),
      getErrHasColors: () => colourEnabled(process.stderr),
      outputError: (text, write) => write(paintErr('red', text)),
    })
    .configureHelp({ styleTitle: (t) => paintOut('bold', t), styleCommandText: (t) => paintOut('cyan', t) })
    .exitOverride()
    .addHelpText('after', ENVIRONMENT);

  program
    .command('start')
    .description('validate a request (JSON or YAML) and start a run')
    .argument('<request>', 'the request file')
    .option('--id <id>', 'workflow id (default: flotilla-<timestamp>-<random>)')
    .option('--wait', 'wait for the run to end and print its result; exit 0 only if it pushed')
    .option('--json', 'print the run id (and with --wait, how it ended) as JSON')
    .addHelpText('after', example('flotilla start flotilla.yaml', 'flotilla start flotilla.yaml --wait --json'))
    .action((file, o) => run(startCommand(file, o)));

  program
    .command('validate')
    .description('check a request without starting anything')
    .argument('<request>', 'the request file')
    .addHelpText('after', example('flotilla validate flotilla.yaml'))
    .action((file) => run(validateCommand(file)));

  program
    .command('request')
    .description('print a request validated, with its defaults filled in (YAML, or JSON for the Temporal CLI)')
    .argument('<request>', 'the request file')
    .option('--json', 'print JSON, as `temporal workflow start --input-file` takes it')
    .addHelpText(
      'after',
      example(
        'flotilla request flotilla.yaml --json > request.json',
        'temporal workflow start --type leaderWorkflow --task-queue flotilla --input-file request.json',
      ),
    )
    .action((file, o) => run(requestCommand(file, o)));

  program
    .command('schema')
    .description("print the request's JSON Schema (for editors; the package ships it as schema/request.schema.json)")
    .addHelpText('after', example('flotilla schema > request.schema.json'))
    .action(() => run(schemaCommand()));

  program
    .command('init')
    .description('write a starter request for the git repository in this directory')
    .option('--file <file>', 'where to write it', 'flotilla.yaml')
    .addOption(
      new Option('--agent <kind>', 'the agent of every sub-task')
        .choices(['claude-code', 'codex', 'shell'])
        .default('claude-code'),
    )
    .option('--command <command>', 'with --agent shell: the command the agent runs')
    .option('--force', 'overwrite an existing file')
    .addHelpText('after', example('flotilla init', 'flotilla init --agent shell --command ./scripts/my-agent.sh'))
    .action((o) => run(initCommand(o)));

  program
    .command('status')
    .description('phase, open gate, workers (state, cost, turns) and totals of a run')
    .argument('<id>', 'the run id')
    .option('--json', 'print the status as JSON')
    .addHelpText('after', example('flotilla status flotilla-20261130-142501-a1b2'))
    .action((id, o) => run(statusCommand(id, o)));

  program
    .command('watch')
    .description('live status until the run ends; exits with its result')
    .argument('<id>', 'the run id')
    .addHelpText('after', example('flotilla watch flotilla-20261130-142501-a1b2'))
    .action((id) => run(watchCommand(id)));

  program
    .command('result')
    .description('wait for a run to end and print its result; exit 0 only if it pushed')
    .argument('<id>', 'the run id')
    .option('--json', 'print the result as JSON')
    .addHelpText('after', example('flotilla result flotilla-20261130-142501-a1b2 --json'))
    .action((id, o) => run(resultCommand(id, o)));

  program
    .command('list')
    .description('recent runs with their phase, who they wait for, repository and cost')
    .option(
      '--awaiting [kind]',
      'only runs waiting for a person: at the plan gate, the push gate, to resume a worker (answer), or any of them (the default)',
    )
    .option('--repo <url>', 'only runs of this repository (its URL exactly as in the request)')
    .option('--phase <phase>', 'only runs in this phase (running, awaiting-push-approval, done, failed, ...)')
    .option('--outcome <outcome>', 'only runs that ended so (pushed, rejected, failed, cancelled, ...)')
    .option('--limit <n>', 'show at most n runs, most recent first', positiveInteger('--limit'), 20)
    .option('--json', 'print the runs as JSON')
    .addHelpText(
      'after',
      example(
        'flotilla list --awaiting push',
        'flotilla list --repo git@github.com:acme/shop.git --phase running --json',
      ),
    )
    .action((o) => run(listCommand(o)));

  program
    .command('setup-cluster')
    .description(
      "register Flotilla's search attributes in the namespace (needed once per namespace of an existing cluster)",
    )
    .addHelpText('after', example('flotilla setup-cluster', 'TEMPORAL_PROFILE=onprem flotilla setup-cluster'))
    .action(() => run(setupClusterCommand()));

  program
    .command('approve')
    .description('pass a manual gate; the push gate needs the SHA that status shows')
    .argument('<id>', 'the run id')
    .addOption(gateOption())
    .option('--sha <sha>', 'at the push gate: the commit you reviewed')
    .option('--comment <text>', 'a note kept with the decision')
    .option('--by <name>', 'who decides (default: $USER)')
    .addHelpText(
      'after',
      example(
        'flotilla approve RUN --gate plan --comment "split looks right"',
        'flotilla approve RUN --gate push --sha 3f2a9c1d0b7e',
      ),
    )
    .action((id, o) => run(approveCommand(id, o)));

  program
    .command('reject')
    .description('end the run at a gate; nothing is pushed')
    .argument('<id>', 'the run id')
    .addOption(gateOption())
    .requiredOption('--reason <text>', 'why; kept in the run report')
    .option('--by <name>', 'who decides (default: $USER)')
    .addHelpText('after', example('flotilla reject RUN --gate push --reason "too broad"'))
    .action((id, o) => run(rejectCommand(id, o)));

  program
    .command('pause')
    .description("stop a worker's agent and keep its sandbox")
    .argument('<id>', 'the run id')
    .requiredOption('--worker <id>', 'the sub-task id')
    .option('--by <name>', 'who pauses (default: $USER)')
    .addHelpText('after', example('flotilla pause RUN --worker api'))
    .action((id, o) => run(pauseCommand(id, o)));

  program
    .command('resume')
    .description('continue a suspended worker, telling its agent a message')
    .argument('<id>', 'the run id')
    .requiredOption('--worker <id>', 'the sub-task id')
    .option('--message <text>', 'what the agent is told (an answer to its question)')
    .option('--add-budget <usd>', 'dollars added to its budget', positiveNumber('--add-budget'))
    .option('--by <name>', 'who resumes (default: $USER)')
    .addHelpText('after', example('flotilla resume RUN --worker api --message "use zod" --add-budget 2'))
    .action((id, o) => run(resumeCommand(id, o)));

  program
    .command('cancel')
    .description('cancel a run: agents are killed, sandboxes destroyed, nothing pushed')
    .argument('<id>', 'the run id')
    .addHelpText('after', example('flotilla cancel RUN'))
    .action((id) => run(cancelCommand(id)));

  program
    .command('gc')
    .description(
      "on the worker's host: remove staging refs, sandboxes and artifacts of runs closed longer than --older-than; never an open run's",
    )
    .option('--older-than <age>', 'how long a run must have been closed (s, m, h or d)', '7d')
    .option('--dry-run', 'print what would be removed, remove nothing')
    .option('--json', 'print the report as JSON')
    .addHelpText('after', example('flotilla gc --dry-run', 'flotilla gc --older-than 30d --json'))
    .action((o) => run(gcCommand(o)));

  program
    .command('worker')
    .description(
      'run a Flotilla worker (starts an embedded Temporal dev server unless TEMPORAL_ADDRESS is set or one is listening)',
    )
    .option('--verbose', "log everything, the SDK's own messages and stack traces included")
    .addOption(
      new Option('--log-format <format>', 'text for people, json for a log collector').choices(['text', 'json']),
    )
    .addHelpText(
      'after',
      example(
        'flotilla worker',
        'FLOTILLA_TASK_QUEUE=team-a TEMPORAL_ADDRESS=temporal.internal:7233 flotilla worker --log-format json',
      ),
    )
    .action((o: { verbose?: boolean; logFormat?: string }) => run(workerCommand(o)));

  return program;
}

const GRPC_UNAVAILABLE = 14;

/** Says in one line what went wrong, and returns the exit code of that class of failure. */
function failed(err: unknown): number {
  // Commander has already printed its own errors, help and version.
  if (err instanceof CommanderError) return err.exitCode === 0 ? EXIT.ok : EXIT.badInput;
  const tell = (text: string, code: number) => {
    process.stderr.write(`${paintErr('red', 'flotilla:')} ${inert(text)}\n`);
    return code;
  };
  if (err instanceof UsageError)
    return tell(
      err.message.startsWith('refused') ? err.message : `${err.message}\n(add --help for usage)`,
      EXIT.badInput,
    );
  if (err instanceof load.request().RequestError) return tell(err.message, EXIT.badInput);
  if (err instanceof load.temporalSdk().WorkflowNotFoundError)
    return tell(`no run with id ${err.workflowId}`, EXIT.badInput);
  if (err instanceof UnreachableError) return tell(err.message, EXIT.unreachable);
  if (load.client().grpcCode(err) === GRPC_UNAVAILABLE)
    return tell(`lost the connection to Temporal: ${(err as Error).message}`, EXIT.unreachable);
  // The SDK's ServiceError says what failed ("Failed to query Workflow"); its cause says why.
  const cause = (err as { cause?: unknown }).cause;
  const why = cause instanceof Error && cause.message ? `: ${cause.message}` : '';
  return tell(err instanceof Error ? `${err.message}${why}` : String(err), EXIT.notPushed);
}

/** Runs the command line and exits with its code. */
export function cli(argv: string[]): void {
  let code: number = EXIT.ok;
  const program = buildProgram(async (action) => {
    code = await action;
  });
  const done =
    argv.length === 0
      ? Promise.resolve(program.outputHelp())
      : program.parseAsync(argv, { from: 'user' }).then(
          () => undefined,
          (err: unknown) => {
            code = failed(err);
          },
        );
  void done.then(() => {
    // Exit once stdout is flushed: a piped `--json` must not be cut short.
    process.stdout.write('', () => process.exit(code));
  });
}

if (require.main === module) cli(process.argv.slice(2));
