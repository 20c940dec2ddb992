#!/usr/bin/env node
/**
 * flotilla — start, inspect and serve runs.
 *
 *   flotilla start <request.yaml|json> [--id ID] [--wait]
 *   flotilla validate <request>
 *   flotilla status <id>
 *   flotilla result <id>
 *   flotilla worker
 */
import { parseArgs } from 'node:util';
import { Client, Connection, WorkflowNotFoundError } from '@temporalio/client';
import { awaitRun, formatRunEnd, formatStatus, loadRequestFile, startRun } from './client';
import { dataDir, taskQueue } from './config';
import { RequestError } from './spec';
import { ensureTemporal, workflowUrl } from './temporal';
import { runWorkerProcess } from './worker';
import { statusQuery } from './workflows/messages';

const USAGE = `usage: flotilla <command> [options]

commands:
  start <request>    validate a request (JSON or YAML) and start a run
      --id ID          workflow id (default: flotilla-<timestamp>-<random>)
      --wait           wait for the run to end and print its result
  validate <request> check a request without starting anything
  status <id>        phase, workers and outcome of a run
  result <id>        wait for a run to end and print its result
  worker             run a Flotilla worker (starts an embedded Temporal dev server
                     unless TEMPORAL_ADDRESS is set or one is already listening)

environment:
  TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE   use this cluster instead of the embedded server
  FLOTILLA_HOME                          data directory (default ~/.flotilla)
  FLOTILLA_TASK_QUEUE                    task queue (default "flotilla")
  FLOTILLA_GIT_TOKEN                     token for https remotes (used by the worker only)`;

class UsageError extends Error {}

async function connect() {
  const temporal = await ensureTemporal({ dataDir: dataDir(), connectOnly: true });
  const connection = await Connection.connect({ address: temporal.address });
  return { client: new Client({ connection, namespace: temporal.namespace }), temporal, connection };
}

function oneArg(positionals: string[], what: string): string {
  if (positionals.length !== 1) throw new UsageError(`expected exactly one ${what}`);
  return positionals[0];
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: { id: { type: 'string' }, wait: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
  });
  if (!command || command === 'help' || values.help) {
    console.log(USAGE);
    return 0;
  }
  switch (command) {
    case 'worker':
      await runWorkerProcess();
      return 0;
    case 'validate': {
      const req = loadRequestFile(oneArg(positionals, 'request file'));
      console.log(`Request is valid: ${req.subTasks.length} sub-task(s) on ${req.repo.url} (${req.repo.baseRef} → ${req.repo.targetRef ?? req.repo.baseRef}).`);
      return 0;
    }
    case 'start': {
      // Validate before connecting: a bad request never reaches Temporal.
      const req = loadRequestFile(oneArg(positionals, 'request file'));
      const { client, temporal, connection } = await connect();
      try {
        const handle = await startRun(client, req, { taskQueue: taskQueue(), workflowId: values.id });
        console.log(`Started run ${handle.workflowId} (${req.subTasks.length} sub-task(s)).`);
        const url = workflowUrl(temporal.uiUrl, temporal.namespace, handle.workflowId);
        if (url) console.log(`Web UI: ${url}`);
        console.log(`Follow it with: flotilla status ${handle.workflowId}`);
        if (!values.wait) return 0;
        const end = await awaitRun(handle);
        console.log(formatRunEnd(end));
        return end.failureType ? 1 : 0;
      } finally {
        await connection.close();
      }
    }
    case 'status': {
      const id = oneArg(positionals, 'run id');
      const { client, temporal, connection } = await connect();
      try {
        const status = await client.workflow.getHandle(id).query(statusQuery);
        console.log(formatStatus(status));
        const url = workflowUrl(temporal.uiUrl, temporal.namespace, id);
        if (url) console.log(`Web UI: ${url}`);
        return 0;
      } finally {
        await connection.close();
      }
    }
    case 'result': {
      const id = oneArg(positionals, 'run id');
      const { client, connection } = await connect();
      try {
        const end = await awaitRun(client.workflow.getHandle(id));
        console.log(formatRunEnd(end));
        return end.failureType ? 1 : 0;
      } finally {
        await connection.close();
      }
    }
    default:
      throw new UsageError(`unknown command "${command}"`);
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    if (err instanceof UsageError) console.error(`flotilla: ${err.message}\n\n${USAGE}`);
    else if (err instanceof RequestError) console.error(`flotilla: ${err.message}`);
    else if (err instanceof WorkflowNotFoundError) console.error(`flotilla: no run with id ${err.workflowId}`);
    else console.error(`flotilla: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(2);
  },
);
