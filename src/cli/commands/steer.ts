/**
 * Steering a run: approve, reject, pause, resume, and amending its plan while it runs (add,
 * retry, and cancel --subtask). Each message is an Update: the run answers at once, accepting it
 * or refusing it with the reason (a refusal is bad input: exit 2). No worker answering is exit 3.
 */
import type { Client } from '@temporalio/client';
import { type Command, Option } from 'commander';
import { setting } from '../../config/variables';
import { EXIT, UsageError } from '../exit';
import { load } from '../lazy';
import { type AddCommand, example, gateOption, positiveNumber } from '../options';
import { say, warn } from '../output';
import { refuseIfEnded, statusOf, withClient } from '../session';

type Messages = typeof import('../../client/messages');

/** Who decides, when --by does not say. */
export function who(by: string | undefined): string {
  return by ?? setting('USER');
}

/** Sends one message to run `id` and prints the run's answer. */
export async function steer(id: string, send: (client: Client, m: Messages) => Promise<string>): Promise<void> {
  const answer = await withClient(async ({ client }) => {
    const m = load.messages();
    // A run that has ended needs no worker to say so; one that runs does to take the message.
    await refuseIfEnded(client, id, 'takes no more messages');
    // The update would wait for a worker indefinitely; the status query says within seconds.
    await statusOf(client, id);
    return send(client, m).catch((err: unknown) => {
      if (err instanceof m.MessageRefused || err instanceof m.RunEnded) throw new UsageError(err.message, false);
      throw err;
    });
  });
  say(`${id}: ${answer}`);
}

async function approveCommand(
  id: string,
  o: { gate: 'plan' | 'push'; sha?: string; comment?: string; by?: string },
): Promise<number> {
  await steer(id, (client, m) =>
    m.approve(client, id, { gate: o.gate, sha: o.sha, by: who(o.by), comment: o.comment }),
  );
  return EXIT.ok;
}

async function rejectCommand(id: string, o: { gate: 'plan' | 'push'; reason: string; by?: string }): Promise<number> {
  await steer(id, (client, m) => m.reject(client, id, { gate: o.gate, by: who(o.by), reason: o.reason }));
  return EXIT.ok;
}

/**
 * `--subtask <id>`, and `--worker <id>`, its name before the sub-task had its own word: still
 * accepted, hidden from help, with a line on stderr saying so.
 */
function withSubTaskOption(command: Command): Command {
  return command
    .option('--subtask <id>', 'the sub-task id')
    .addOption(new Option('--worker <id>', 'deprecated: --subtask').hideHelp())
    .hook('preAction', (cmd) => {
      const { subtask, worker } = cmd.opts<{ subtask?: string; worker?: string }>();
      if (worker !== undefined && subtask !== undefined)
        cmd.error('error: --worker is the old name of --subtask; give --subtask only', { exitCode: EXIT.badInput });
      if (worker !== undefined) {
        warn('--worker is deprecated; use --subtask');
        cmd.setOptionValue('subtask', worker);
      } else if (subtask === undefined)
        cmd.error("error: required option '--subtask <id>' not specified", { exitCode: EXIT.badInput });
    });
}

async function pauseCommand(id: string, o: { subtask: string; by?: string }): Promise<number> {
  await steer(id, (client, m) => m.pause(client, id, { workerId: o.subtask, by: who(o.by) }));
  say(`resume it with: flotilla resume ${id} --subtask ${o.subtask}`);
  return EXIT.ok;
}

async function resumeCommand(
  id: string,
  o: { subtask: string; message?: string; addBudget?: number; by?: string },
): Promise<number> {
  await steer(id, (client, m) =>
    m.resume(client, id, { workerId: o.subtask, message: o.message, addBudgetUsd: o.addBudget, by: who(o.by) }),
  );
  return EXIT.ok;
}

export const approve: AddCommand = (program, run) =>
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
        'flotilla approve RUN --gate push --sha 3f2a9c1d0b7e5a4c3b2a1f0e9d8c7b6a5f4e3d2c',
      ),
    )
    .action((id, o) => run(approveCommand(id, o)));

export const reject: AddCommand = (program, run) =>
  program
    .command('reject')
    .description('end the run at a gate; nothing is pushed')
    .argument('<id>', 'the run id')
    .addOption(gateOption())
    .requiredOption('--reason <text>', 'why; kept in the run report')
    .option('--by <name>', 'who decides (default: $USER)')
    .addHelpText('after', example('flotilla reject RUN --gate push --reason "too broad"'))
    .action((id, o) => run(rejectCommand(id, o)));

export const pause: AddCommand = (program, run) =>
  withSubTaskOption(
    program.command('pause').description("stop a sub-task's agent and keep its sandbox").argument('<id>', 'the run id'),
  )
    .option('--by <name>', 'who pauses (default: $USER)')
    .addHelpText('after', example('flotilla pause RUN --subtask api'))
    .action((id, o) => run(pauseCommand(id, o)));

export const resume: AddCommand = (program, run) =>
  withSubTaskOption(
    program
      .command('resume')
      .description('continue a suspended sub-task, telling its agent a message')
      .argument('<id>', 'the run id'),
  )
    .option('--message <text>', 'what the agent is told (an answer to its question)')
    .option('--add-budget <usd>', 'dollars added to its budget', positiveNumber('--add-budget'))
    .option('--by <name>', 'who resumes (default: $USER)')
    .addHelpText('after', example('flotilla resume RUN --subtask api --message "use zod" --add-budget 2'))
    .action((id, o) => run(resumeCommand(id, o)));

async function addCommand(id: string, file: string, o: { by?: string }): Promise<number> {
  // Read and checked before connecting: a broken file never reaches the run.
  const subTask = load.subTaskFile().loadSubTaskFile(file);
  await steer(id, (client, m) => m.addSubTask(client, id, { subTask, by: who(o.by) }));
  return EXIT.ok;
}

/** `flotilla cancel RUN --subtask ID --reason TEXT`: one sub-task, not the run (see run.ts). */
export async function cancelSubTaskCommand(
  id: string,
  o: { subtask: string; reason?: string; by?: string },
): Promise<number> {
  if (!o.reason) throw new UsageError('--reason is required with --subtask: say why the sub-task is cancelled');
  await steer(id, (client, m) =>
    m.cancelSubTask(client, id, { subTaskId: o.subtask, by: who(o.by), reason: o.reason! }),
  );
  return EXIT.ok;
}

async function retryCommand(id: string, o: { subtask: string; message?: string; by?: string }): Promise<number> {
  await steer(id, (client, m) =>
    m.retrySubTask(client, id, { subTaskId: o.subtask, by: who(o.by), message: o.message }),
  );
  return EXIT.ok;
}

export const add: AddCommand = (program, run) =>
  program
    .command('add')
    .description('add a sub-task (a YAML or JSON file) to a running plan; it is checked like a request')
    .argument('<id>', 'the run id')
    .argument('<file>', 'the sub-task: id, prompt, ownedPaths, and optionally agent and dependsOn')
    .option('--by <name>', 'who amends the plan (default: $USER)')
    .addHelpText(
      'after',
      example('flotilla add RUN docs.yaml', 'echo \'{"id":"docs",...}\' > docs.json && flotilla add RUN docs.json'),
    )
    .action((id, file, o) => run(addCommand(id, file, o)));

export const retry: AddCommand = (program, run) =>
  program
    .command('retry')
    .description('try a failed sub-task again from the integration head; its agent is told why it failed')
    .argument('<id>', 'the run id')
    .requiredOption('--subtask <id>', 'the failed sub-task')
    .option('--message <text>', 'what its agent is told besides why it failed')
    .option('--by <name>', 'who asks (default: $USER)')
    .addHelpText('after', example('flotilla retry RUN --subtask api --message "the schema moved to src/db"'))
    .action((id, o) => run(retryCommand(id, o)));
