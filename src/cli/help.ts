/** The program's own help: what it is, the variables it reads, its exit codes. */
import { Command } from 'commander';
import { packageVersion } from '../config/settings';
import { VARIABLES } from '../config/variables';
import { paintErr, paintOut } from './output';
import { colourEnabled } from './terminal';

/** The variables a CLI user needs at hand (docs/configuration.md has them all). */
const environment = Object.entries(VARIABLES)
  .flatMap(([name, v]) => ('help' in v && v.help ? [`  ${name.padEnd(22)}  ${v.help}`] : []))
  .join('\n');

const ENVIRONMENT = `
Environment:
${environment}

Exit codes:
  0  done (for start --wait, result, watch: the run pushed)
  1  the run ended without pushing, or something failed
  2  bad input: an unknown command or option, a bad request file or setting, no such run
  3  cannot reach Temporal, or no worker polls the run's task queue`;

/**
 * The program without its commands: name, version, help and error manners. With `jsonErrors`
 * commander prints no errors of its own: they are written as JSON when the program fails (exit.ts).
 */
export function rootProgram(jsonErrors = false): Command {
  return new Command('flotilla')
    .description('Run a team of coding agents on one repository as a single durable job, on Temporal.')
    .version(packageVersion(), '-v, --version', 'print the version')
    .helpOption('-h, --help', 'show help (also after any command)')
    .helpCommand('help [command]', 'show help for a command')
    .showHelpAfterError(jsonErrors ? false : '(add --help for usage)')
    .showSuggestionAfterError(true)
    .configureOutput({
      getOutHasColors: () => colourEnabled(process.stdout),
      getErrHasColors: () => colourEnabled(process.stderr),
      outputError: (text, write) => {
        if (!jsonErrors) write(paintErr('red', text));
      },
    })
    .configureHelp({ styleTitle: (t) => paintOut('bold', t), styleCommandText: (t) => paintOut('cyan', t) })
    .exitOverride()
    .addHelpText('after', ENVIRONMENT);
}
