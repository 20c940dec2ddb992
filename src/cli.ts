#!/usr/bin/env node
/**
 * flotilla — start, watch, steer and serve runs. `flotilla help` lists the commands.
 */
import { parseArgs } from 'node:util';
import { type Client, WorkflowNotFoundError } from '@temporalio/client';
import { MessageRefused, approve, awaitRun, formatRunEnd, formatStatus, loadRequestFile, pause, reject, resume, startRun, watchRun } from './client';
import { dataDir, taskQueue } from './config';
import { RequestError } from './spec';
import { connectClient } from './connection';
import { workflowUrl } from './temporal';
import { runWorkerProcess } from './worker';
import { statusQuery } from './workflows/messages';

const USAGE = `usage: flotilla <command> [options]

commands:
  start <request>      validate a request (JSON or YAML) and start a run
      --id ID            workflow id (default: flotilla-<timestamp>-<random>)
      --wait             wait for the run to end and print its result
  validate <request>   check a request without starting anything
  status <id>          phase, open gate, workers (state, cost, turns) and totals
  watch <id>           live status until the run ends; exits with its result
  result <id>          wait for a run to end and print its result
  approve <id> --gate plan|push [--sha SHA] [--comment TEXT] [--by NAME]
                       pass a manual gate; the push gate needs the SHA that status shows
  reject <id> --gate plan|push --reason TEXT [--by NAME]
                       end the run at a gate; nothing is pushed
  pause <id> --worker W              stop a worker's agent and keep its sandbox
  resume <id> --worker W [--message TEXT] [--add-budget USD]
                       continue a suspended worker, telling its agent TEXT
  cancel <id>          cancel the run: agents are killed, sandboxes destroyed, nothing pushed
  worker               run a Flotilla worker (starts an embedded Temporal dev server
                       unless TEMPORAL_ADDRESS is set or one is already listening)

environment:
  TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE   use this cluster instead of the embedded server
  FLOTILLA_HOME                          data directory (default ~/.flotilla)
  FLOTILLA_TASK_QUEUE                    task queue (default "flotilla")
  FLOTILLA_GIT_TOKEN                     token for https remotes (used by the worker only)`;

class UsageError extends Error {}

const OPTIONS = {
  id: { type: 'string' },
  wait: { type: 'boolean' },
  gate: { type: 'string' },
  sha: { type: 'string' },
  comment: { type: 'string' },
  reason: { type: 'string' },
  by: { type: 'string' },
  worker: { type: 'string' },
  message: { type: 'string' },
  'add-budget': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

function oneArg(positionals: string[], what: string): string {
  if (positionals.length !== 1) throw new UsageError(`expected exactly one ${what}`);
  return positionals[0];
}

function gateOption(value: string | undefined): 'plan' | 'push' {
  if (value !== 'plan' && value !== 'push') throw new UsageError('--gate must be "plan" or "push"');
  return value;
}

function who(by: string | undefined): string {
  return by ?? process.env.USER ?? 'cli';
}

async function withClient<T>(fn: (client: Client, ui: { url(id: string): string | undefined }) => Promise<T>): Promise<T> {
  const temporal = await connectClient({ dataDir: dataDir() });
  try {
    return await fn(temporal.client, { url: (id) => workflowUrl(temporal.uiUrl, temporal.namespace, id) });
  } finally {
    await temporal.close();
  }
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  const { values: o, positionals } = parseArgs({ args: rest, allowPositionals: true, options: OPTIONS });
  if (!command || command === 'help' || o.help) {
    console.log(USAGE);
    return 0;
  }
  switch (command) {
    case 'worker':
      await runWorkerProcess();
      return 0;
    case 'validate': {
      const req = loadRequestFile(oneArg(positionals, 'request file'));
      console.log(`Request is valid: ${req.subTasks ? `${req.subTasks.length} sub-task(s)` : 'planned by an agent'} on ${req.repo.url} (${req.repo.baseRef} → ${req.repo.targetRef ?? req.repo.baseRef}).`);
      return 0;
    }
    case 'start': {
      // Validate before connecting: a bad request never reaches Temporal.
      const req = loadRequestFile(oneArg(positionals, 'request file'));
      return withClient(async (client, ui) => {
        const handle = await startRun(client, req, { taskQueue: taskQueue(), workflowId: o.id });
        console.log(`Started run ${handle.workflowId} (${req.subTasks ? `${req.subTasks.length} sub-task(s)` : 'a planner agent splits the work'}).`);
        const url = ui.url(handle.workflowId);
        if (url) console.log(`Web UI: ${url}`);
        console.log(`Follow it with: flotilla watch ${handle.workflowId}`);
        if (!o.wait) return 0;
        const end = await awaitRun(handle);
        console.log(formatRunEnd(end));
        return end.failureType ? 1 : 0;
      });
    }
    case 'status': {
      const id = oneArg(positionals, 'run id');
      return withClient(async (client, ui) => {
        console.log(formatStatus(await client.workflow.getHandle(id).query(statusQuery), id));
        const url = ui.url(id);
        if (url) console.log(`Web UI: ${url}`);
        return 0;
      });
    }
    case 'watch': {
      const id = oneArg(positionals, 'run id');
      return withClient(async (client) => {
        const end = await watchRun(client, id, process.stdout);
        console.log(formatRunEnd(end));
        return end.failureType ? 1 : 0;
      });
    }
    case 'result': {
      const id = oneArg(positionals, 'run id');
      return withClient(async (client) => {
        const end = await awaitRun(client.workflow.getHandle(id));
        console.log(formatRunEnd(end));
        return end.failureType ? 1 : 0;
      });
    }
    // Updates: the run answers at once, accepted or refused with its reason.
    case 'approve': {
      const id = oneArg(positionals, 'run id');
      const gate = gateOption(o.gate);
      return withClient(async (client) => {
        console.log(`${id}: ${await approve(client, id, { gate, sha: o.sha, by: who(o.by), comment: o.comment })}`);
        return 0;
      });
    }
    case 'reject': {
      const id = oneArg(positionals, 'run id');
      const gate = gateOption(o.gate);
      if (!o.reason) throw new UsageError('--reason is required');
      const reason = o.reason;
      return withClient(async (client) => {
        console.log(`${id}: ${await reject(client, id, { gate, by: who(o.by), reason })}`);
        return 0;
      });
    }
    case 'pause':
    case 'resume': {
      const id = oneArg(positionals, 'run id');
      const workerId = o.worker;
      if (!workerId) throw new UsageError('--worker is required');
      const addBudgetUsd = o['add-budget'] === undefined ? undefined : Number(o['add-budget']);
      if (addBudgetUsd !== undefined && !(addBudgetUsd > 0 && Number.isFinite(addBudgetUsd))) throw new UsageError('--add-budget must be a positive number of dollars');
      return withClient(async (client) => {
        const answer =
          command === 'pause'
            ? await pause(client, id, { workerId, by: who(o.by) })
            : await resume(client, id, { workerId, message: o.message, addBudgetUsd, by: who(o.by) });
        console.log(`${id}: ${answer}`);
        if (command === 'pause') console.log(`resume it with: flotilla resume ${id} --worker ${workerId}`);
        return 0;
      });
    }
    case 'cancel': {
      const id = oneArg(positionals, 'run id');
      return withClient(async (client) => {
        const handle = client.workflow.getHandle(id);
        await handle.cancel();
        console.log(`Cancelling ${id}: stopping agents and destroying sandboxes...`);
        const end = await awaitRun(handle);
        console.log(formatRunEnd(end));
        return 0;
      });
    }
    default:
      throw new UsageError(`unknown command "${command}"`);
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    if (err instanceof MessageRefused) console.error(`flotilla: ${err.message}`);
    else if (err instanceof UsageError) console.error(`flotilla: ${err.message}\n\nrun \`flotilla help\` for usage`);
    else if (err instanceof RequestError) console.error(`flotilla: ${err.message}`);
    else if (err instanceof WorkflowNotFoundError) console.error(`flotilla: no run with id ${err.workflowId}`);
    else console.error(`flotilla: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(2);
  },
);
