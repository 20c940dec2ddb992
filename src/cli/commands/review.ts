/**
 * The review phase of a run (request.review): `revise` starts a revision round with a comment,
 * `finish` ends the phase, and with it the run, at its last push. Both are Updates, refused with
 * the run's reason outside the review phase.
 */
import { EXIT } from '../exit';
import { type AddCommand, example, positiveInteger } from '../options';
import { steer, who } from './steer';

async function reviseCommand(
  id: string,
  o: { comment: string; path?: string; line?: number; by?: string },
): Promise<number> {
  const comment = {
    body: o.comment,
    kind: 'comment' as const,
    ...(o.path && { path: o.path }),
    ...(o.line && { line: o.line }),
  };
  await steer(id, (client, m) => m.revise(client, id, { comments: [comment], by: who(o.by) }));
  return EXIT.ok;
}

async function finishCommand(id: string, o: { reason?: string; by?: string }): Promise<number> {
  await steer(id, (client, m) => m.finish(client, id, { by: who(o.by), reason: o.reason }));
  return EXIT.ok;
}

export const revise: AddCommand = (program, run) =>
  program
    .command('revise')
    .description('start a review round: the comment goes to the sub-task that owns its file, and the result is pushed')
    .argument('<id>', 'the run id')
    .requiredOption('--comment <text>', 'what to change')
    .option('--path <file>', 'the file the comment is on (it goes to the sub-task that owns it)')
    .option('--line <n>', 'the line the comment is on', positiveInteger('--line'))
    .option('--by <name>', 'who comments (default: $USER)')
    .addHelpText(
      'after',
      example(
        'flotilla revise RUN --comment "rename x to count" --path src/a.ts --line 12',
        'flotilla revise RUN --comment "add a changelog entry"',
      ),
    )
    .action((id, o) => run(reviseCommand(id, o)));

export const finish: AddCommand = (program, run) =>
  program
    .command('finish')
    .description('end the review phase; the run ends with its last push')
    .argument('<id>', 'the run id')
    .option('--reason <text>', 'why; kept in the result')
    .option('--by <name>', 'who finishes (default: $USER)')
    .addHelpText('after', example('flotilla finish RUN --reason "approved"'))
    .action((id, o) => run(finishCommand(id, o)));
