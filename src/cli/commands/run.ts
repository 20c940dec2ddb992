/** Starting a run and following it to its end: start, continue, watch, result, cancel. */
import { taskQueue } from '../../config/settings';
import type { LeaderRequest } from '../../contracts/request';
import { EXIT, UnreachableError, UsageError } from '../exit';
import { requestSummary } from '../format/request';
import { load } from '../lazy';
import { type AddCommand, example } from '../options';
import { json, say } from '../output';
import { type Connected, refuseIfEnded, warnIfNoWorker, withClient } from '../session';
import { readRequest } from './request';
import { cancelSubTaskCommand } from './steer';

interface StartOptions {
  id?: string;
  issue?: string;
  wait?: boolean;
  json?: boolean;
}

async function startCommand(file: string, o: StartOptions): Promise<number> {
  // Validate before connecting: a bad request never reaches Temporal.
  const req = readRequest(file, o.issue === undefined ? {} : { issue: o.issue });
  return withClient((c) => launch(c, req, o));
}

/** Reads the failed run's request and plan, and starts the run that continues it. */
async function continueCommand(id: string, o: StartOptions): Promise<number> {
  return withClient(async (c) => {
    const { ContinueRefused, continuationOf } = load.continuation();
    const req = await continuationOf(c.client, id).catch((err: unknown) => {
      throw err instanceof ContinueRefused ? new UsageError(`cannot continue: ${err.message}`) : err;
    });
    return launch(c, req, o, `continues ${id}`);
  });
}

/** Starts a run, says where to follow it, and with --wait follows it to its end. */
async function launch({ client, url }: Connected, req: LeaderRequest, o: StartOptions, what?: string): Promise<number> {
  const queue = taskQueue();
  const handle = await load.start().startRun(client, req, { taskQueue: queue, workflowId: o.id });
  await warnIfNoWorker(client, queue);
  const started = { workflowId: handle.workflowId, taskQueue: queue, webUrl: url(handle.workflowId) };
  if (!o.json) {
    say(`Started run ${handle.workflowId} (${what ? `${what}; ` : ''}${requestSummary(req)}).`);
    if (started.webUrl) say(`Web UI: ${started.webUrl}`);
    say(`Follow it with: flotilla watch ${handle.workflowId}`);
  }
  if (!o.wait) {
    if (o.json) json(started);
    return EXIT.ok;
  }
  const end = await load.result().awaitRun(handle);
  if (o.json) json({ ...started, end });
  else say(load.runEndFormat().formatRunEnd(end));
  return end.failureType ? EXIT.notPushed : EXIT.ok;
}

async function watchCommand(id: string): Promise<number> {
  return withClient(async ({ client }) => {
    const end = await load.live().watchRun(client, id, process.stdout);
    say(load.runEndFormat().formatRunEnd(end));
    return end.failureType ? EXIT.notPushed : EXIT.ok;
  });
}

async function resultCommand(id: string, o: { json?: boolean }): Promise<number> {
  return withClient(async ({ client }) => {
    const handle = client.workflow.getHandle(id);
    const desc = await handle.describe();
    if (desc.status.name === 'RUNNING') await warnIfNoWorker(client, desc.taskQueue);
    const end = await load.result().awaitRun(handle);
    if (o.json) json(end);
    else say(load.runEndFormat().formatRunEnd(end));
    return end.failureType ? EXIT.notPushed : EXIT.ok;
  });
}

async function cancelCommand(id: string, o: { subtask?: string; reason?: string; by?: string }): Promise<number> {
  if (o.subtask !== undefined) return cancelSubTaskCommand(id, { ...o, subtask: o.subtask });
  return withClient(async ({ client }) => {
    await refuseIfEnded(client, id, 'has nothing left to cancel');
    const handle = client.workflow.getHandle(id);
    await handle.cancel();
    // The cancel is recorded, but only a worker acts on it: without one, waiting would never end.
    const { taskQueue } = await handle.describe();
    const { hasWorker, noWorkerMessage } = load.status();
    if (!(await hasWorker(client, taskQueue)))
      throw new UnreachableError(
        `asked ${id} to cancel, but ${noWorkerMessage(taskQueue)}; the run stops, and its sandboxes go, once one does`,
      );
    say(`Cancelling ${id}: stopping agents and destroying sandboxes...`);
    say(load.runEndFormat().formatRunEnd(await load.result().awaitRun(handle)));
    return EXIT.ok;
  });
}

export const start: AddCommand = (program, run) =>
  program
    .command('start')
    .description('validate a request (JSON or YAML) and start a run')
    .argument('<request>', 'the request file')
    .option('--id <id>', 'workflow id (default: flotilla-<timestamp>-<random>)')
    .option('--issue <url>', "work on this issue: its title and body become the objective (the request's issue field)")
    .option('--wait', 'wait for the run to end and print its result; exit 0 only if it pushed or opened its PR')
    .option('--json', 'print the run id (and with --wait, how it ended) as JSON')
    .addHelpText(
      'after',
      example(
        'flotilla start flotilla.yaml',
        'flotilla start flotilla.yaml --wait --json',
        'flotilla start flotilla.yaml --issue https://github.com/acme/widgets/issues/12',
      ),
    )
    .action((file, o) => run(startCommand(file, o)));

export const watch: AddCommand = (program, run) =>
  program
    .command('watch')
    .description('live status until the run ends; exits with its result')
    .argument('<id>', 'the run id')
    .addHelpText('after', example('flotilla watch flotilla-20261130-142501-a1b2'))
    .action((id) => run(watchCommand(id)));

export const result: AddCommand = (program, run) =>
  program
    .command('result')
    .description('wait for a run to end and print its result; exit 0 only if it pushed')
    .argument('<id>', 'the run id')
    .option('--json', 'print the result as JSON')
    .addHelpText('after', example('flotilla result flotilla-20261130-142501-a1b2 --json'))
    .action((id, o) => run(resultCommand(id, o)));

export const cancel: AddCommand = (program, run) =>
  program
    .command('cancel')
    .description(
      'cancel a run (agents are killed, sandboxes destroyed, nothing pushed), or with --subtask one sub-task of its plan',
    )
    .argument('<id>', 'the run id')
    .option('--subtask <id>', 'cancel only this queued or running sub-task (and drop what depends on it)')
    .option('--reason <text>', 'with --subtask: why; kept in the run report')
    .option('--by <name>', 'with --subtask: who cancels (default: $USER)')
    .addHelpText(
      'after',
      example('flotilla cancel RUN', 'flotilla cancel RUN --subtask docs --reason "not needed after all"'),
    )
    .action((id, o) => run(cancelCommand(id, o)));

export const continueRun: AddCommand = (program, run) =>
  program
    .command('continue')
    .description(
      "start a run that continues a failed one: what it integrated and its finished sub-tasks' commits are reused, only the rest runs",
    )
    .argument('<id>', 'the failed run')
    .option('--id <id>', 'workflow id of the new run (default: flotilla-<timestamp>-<random>)')
    .option('--wait', 'wait for the new run to end and print its result; exit 0 only if it pushed')
    .option('--json', 'print the new run id (and with --wait, how it ended) as JSON')
    .addHelpText('after', example('flotilla continue flotilla-20261130-142501-a1b2 --wait'))
    .action((id, o) => run(continueCommand(id, o)));
