/** Reading runs: status, list. */
import { Option } from 'commander';
import { dataDir, stagingUrl } from '../../config/settings';
import type { SubTaskState } from '../../contracts/messages';
import { SUB_TASK_STATES } from '../../contracts/query-names';
import { shellQuote } from '../../client/shell';
import type { ListFilters } from '../../client/list';
import { EXIT, UnreachableError, UsageError } from '../exit';
import { load } from '../lazy';
import { type AddCommand, example, positiveInteger } from '../options';
import { json, paintPhase, say } from '../output';
import { statusOf, withClient, withReader } from '../session';

interface StatusOptions {
  json?: boolean;
  state?: SubTaskState;
  page?: number;
  pageSize?: number;
}

async function statusCommand(id: string, o: StatusOptions): Promise<number> {
  return withReader(async ({ reader, url }) => {
    // Asked together: each is a round trip to the server, and the command waits for both.
    const continued = reader.continuedBy(id);
    continued.catch(() => undefined); // a status that fails first says why; this one is not awaited then
    // Asked for a page only when one was: a run that predates paging answers the plain query as ever.
    const paged = o.state !== undefined || o.page !== undefined || o.pageSize !== undefined;
    const page = paged ? { state: o.state, page: o.page, pageSize: o.pageSize } : undefined;
    const { status, taskQueue: queue } = await statusOf(reader, id, page);
    const continuedBy = await continued;
    if (o.json) json({ workflowId: id, taskQueue: queue, webUrl: url(id), ...status, continuedBy });
    else {
      const context = { continuedBy, fetchFrom: fetchFrom() };
      say(load.statusFormat().formatStatus(status, id, Date.now(), context), paintPhase);
      const link = url(id);
      if (link) say(`Web UI: ${link}`);
    }
    return EXIT.ok;
  });
}

/**
 * Where `git fetch` finds a run's staging refs from this machine: the shared store when one is
 * configured (named by its variable, which may hold a credential), else this data directory's
 * staging repository.
 */
function fetchFrom(): string {
  return stagingUrl() ? '"$FLOTILLA_STAGING_URL"' : shellQuote(load.stagingDir().stagingDirOf(dataDir()));
}

interface ListOptions {
  awaiting?: true | string;
  repo?: string;
  phase?: string;
  outcome?: string;
  limit: number;
  json?: boolean;
}

async function listCommand(o: ListOptions): Promise<number> {
  const filters = {
    awaiting: o.awaiting === true ? 'any' : o.awaiting,
    repo: o.repo,
    phase: o.phase,
    outcome: o.outcome,
  } as ListFilters;
  const problem = load.listFilters().filterProblem(filters);
  if (problem) throw new UsageError(problem);
  return withClient(async ({ client }) => {
    const { SearchAttributesMissing, listRuns } = load.runs();
    const rows = await listRuns(client, o.limit, filters).catch((err: unknown) => {
      throw err instanceof SearchAttributesMissing ? new UnreachableError(err.message) : err;
    });
    if (o.json) json(rows);
    else say(load.runsFormat().formatRuns(rows));
    return EXIT.ok;
  });
}

export const status: AddCommand = (program, run) =>
  program
    .command('status')
    .description('phase, open gate, sub-tasks (state, cost, turns) and totals of a run')
    .argument('<id>', 'the run id')
    .option('--json', 'print the status as JSON')
    .addOption(new Option('--state <state>', 'only the sub-tasks in this state').choices(SUB_TASK_STATES))
    .option(
      '--page <n>',
      'which page of sub-tasks (a run over 100 shows one page at a time)',
      positiveInteger('--page'),
    )
    .option('--page-size <n>', 'sub-tasks a page, at most 50', positiveInteger('--page-size'))
    .addHelpText(
      'after',
      example('flotilla status flotilla-20261130-142501-a1b2 --state failed --page 2 --page-size 50'),
    )
    .action((id, o) => run(statusCommand(id, o)));

export const list: AddCommand = (program, run) =>
  program
    .command('list')
    .description('recent runs with their phase, who they wait for, repository and cost')
    .option(
      '--awaiting [kind]',
      'only runs waiting for a person: at the plan gate, the push gate, to resume a sub-task (answer), or any of them (the default)',
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
