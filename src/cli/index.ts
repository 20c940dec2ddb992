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
import { EXIT, failed } from './exit';
import { rootProgram } from './help';
import type { AddCommand, Runner } from './options';

/** The command groups' modules, each loaded when a command of it is built. */
const group = {
  inspect: () => require('./commands/inspect') as typeof import('./commands/inspect'),
  operate: () => require('./commands/operate') as typeof import('./commands/operate'),
  request: () => require('./commands/request') as typeof import('./commands/request'),
  review: () => require('./commands/review') as typeof import('./commands/review'),
  run: () => require('./commands/run') as typeof import('./commands/run'),
  steer: () => require('./commands/steer') as typeof import('./commands/steer'),
};

/** Every command by name, in the order help lists them. */
export const COMMANDS: [name: string, add: () => AddCommand][] = [
  ['start', () => group.run().start],
  ['continue', () => group.run().continueRun],
  ['validate', () => group.request().validate],
  ['request', () => group.request().request],
  ['schema', () => group.request().schema],
  ['init', () => group.request().init],
  ['status', () => group.inspect().status],
  ['watch', () => group.run().watch],
  ['result', () => group.run().result],
  ['list', () => group.inspect().list],
  ['setup-cluster', () => group.operate().setupCluster],
  ['approve', () => group.steer().approve],
  ['reject', () => group.steer().reject],
  ['pause', () => group.steer().pause],
  ['resume', () => group.steer().resume],
  ['add', () => group.steer().add],
  ['retry', () => group.steer().retry],
  ['revise', () => group.review().revise],
  ['finish', () => group.review().finish],
  ['cancel', () => group.run().cancel],
  ['gc', () => group.operate().gc],
  ['worker', () => group.operate().worker],
];

/**
 * The program. A command line that starts with a command's name builds that command alone: the
 * others' modules are time a `flotilla status` in a loop need not spend. Anything else (help, a
 * mistyped command that wants suggestions) builds them all.
 */
function buildProgram(argv: string[], run: Runner, jsonErrors: boolean): Command {
  const program = rootProgram(jsonErrors);
  const named = COMMANDS.filter(([name]) => name === argv[0]);
  for (const [, add] of named.length ? named : COMMANDS) add()(program, run);
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
  // A reader that stops early (`flotilla status --help | head -1`) is not an error of ours: the
  // write that finds the pipe closed would otherwise end the process with a stack trace.
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE') throw err;
    process.exit(code);
  });
  const jsonErrors = wantsJson(argv);
  const program = buildProgram(
    argv,
    async (action) => {
      code = await action;
    },
    jsonErrors,
  );
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
