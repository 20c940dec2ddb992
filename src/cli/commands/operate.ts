/** Running and tending Flotilla itself: worker, gc, setup-cluster. */
import { Option } from 'commander';
import { parseAge } from '../../config/parse';
import { ConfigError, dataDir } from '../../config/settings';
import { EXIT, UnreachableError, UsageError } from '../exit';
import { load } from '../lazy';
import { type AddCommand, example } from '../options';
import { json, say } from '../output';
import { withClient } from '../session';

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

async function gcCommand(o: { olderThan: string; dryRun?: boolean; json?: boolean }): Promise<number> {
  const { collectGarbage, formatGc } = load.gc();
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
    if (err instanceof ConfigError) throw err;
    throw /no Temporal server|ECONNREFUSED|UNAVAILABLE/.test(err.message) ? new UnreachableError(err.message) : err;
  });
  return EXIT.ok;
}

export const setupCluster: AddCommand = (program, run) =>
  program
    .command('setup-cluster')
    .description(
      "register Flotilla's search attributes in the namespace (needed once per namespace of an existing cluster)",
    )
    .addHelpText('after', example('flotilla setup-cluster', 'TEMPORAL_PROFILE=onprem flotilla setup-cluster'))
    .action(() => run(setupClusterCommand()));

export const gc: AddCommand = (program, run) =>
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

export const worker: AddCommand = (program, run) =>
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
