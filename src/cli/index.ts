#!/usr/bin/env node
/**
 * flotilla — start, watch, steer and serve runs. `flotilla --help` lists the commands.
 *
 * Arguments are parsed by commander: per-command help, option suggestions and choices for free,
 * with no dependencies of its own. Each command group lives in cli/commands/; this file only
 * assembles the program. The Temporal client is loaded only by the commands that talk to
 * Temporal (cli/lazy.ts), so `help`, `validate`, `request`, `schema` and `init` answer at once.
 */
import type { Command } from 'commander';
import { checkSettings } from '../config/settings';
import * as inspect from './commands/inspect';
import * as operate from './commands/operate';
import * as request from './commands/request';
import * as review from './commands/review';
import * as runs from './commands/run';
import * as steer from './commands/steer';
import { EXIT, failed } from './exit';
import { rootProgram } from './help';
import type { AddCommand, Runner } from './options';

/** Every command, in the order help lists them. */
const COMMANDS: AddCommand[] = [
  runs.start,
  runs.continueRun,
  request.validate,
  request.request,
  request.schema,
  request.init,
  inspect.status,
  runs.watch,
  runs.result,
  inspect.list,
  operate.setupCluster,
  steer.approve,
  steer.reject,
  steer.pause,
  steer.resume,
  steer.add,
  steer.retry,
  review.revise,
  review.finish,
  runs.cancel,
  operate.gc,
  operate.worker,
];

function buildProgram(run: Runner, jsonErrors: boolean): Command {
  const program = rootProgram(jsonErrors);
  for (const add of COMMANDS) add(program, run);
  // Every command's settings are checked before it runs (help and --version need none); the
  // worker checks its own, which are not the CLI's.
  program.hook('preAction', (_program, command) => {
    if (command.name() !== 'worker') checkSettings('cli');
  });
  return program;
}

/** True when the command line asks for JSON: then its errors are JSON too. */
function wantsJson(argv: string[]): boolean {
  const end = argv.indexOf('--');
  return (end === -1 ? argv : argv.slice(0, end)).includes('--json');
}

/** Runs the command line and exits with its code. */
export function cli(argv: string[]): void {
  let code: number = EXIT.ok;
  const jsonErrors = wantsJson(argv);
  const program = buildProgram(async (action) => {
    code = await action;
  }, jsonErrors);
  const done =
    argv.length === 0
      ? Promise.resolve(program.outputHelp())
      : program.parseAsync(argv, { from: 'user' }).then(
          () => undefined,
          (err: unknown) => {
            code = failed(err, jsonErrors);
          },
        );
  void done.then(() => {
    // Exit once stdout is flushed: a piped `--json` must not be cut short.
    process.stdout.write('', () => process.exit(code));
  });
}

if (require.main === module) cli(process.argv.slice(2));
