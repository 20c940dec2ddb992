/** The program's own help: what it is, the variables it reads, its exit codes. */
import { Command } from 'commander';
import { packageVersion } from '../config/settings';
import { paintErr, paintOut } from './output';
import { colourEnabled } from './terminal';

const ENVIRONMENT = `
Environment:
  TEMPORAL_ADDRESS        use this Temporal cluster (host:port) instead of the embedded dev server
  TEMPORAL_NAMESPACE      its namespace (default "default")
  TEMPORAL_UI_URL         its Web UI, for links (the embedded server's is known)
  FLOTILLA_TEMPORAL_PORT  port of the embedded dev server (default 7233; Web UI on port + 1000)
  FLOTILLA_TASK_QUEUE     task queue of runs and workers (default "flotilla"); both must agree
  FLOTILLA_HOME           data directory (default ~/.flotilla)
  FLOTILLA_STAGING_URL    worker, gc: the shared store of run state every worker host reaches
  FLOTILLA_DEPLOYMENT     worker: poll as a version of this worker deployment, runs pinned to it
  FLOTILLA_BUILD_ID       worker: that version's build ID (default: package version + workflow code hash)
  FLOTILLA_REGISTER_SEARCH_ATTRIBUTES  worker: 1 registers Flotilla's search attributes at start (else: flotilla setup-cluster)
  NO_COLOR                no colours, even on a terminal

Exit codes:
  0  done (for start --wait, result, watch: the run pushed)
  1  the run ended without pushing, or something failed
  2  bad input: an unknown command or option, a bad request file, no such run
  3  cannot reach Temporal, or no worker polls the run's task queue`;

/** The program without its commands: name, version, help and error manners. */
export function rootProgram(): Command {
  return new Command('flotilla')
    .description('Run a team of coding agents on one repository as a single durable job, on Temporal.')
    .version(packageVersion(), '-v, --version', 'print the version')
    .helpOption('-h, --help', 'show help (also after any command)')
    .helpCommand('help [command]', 'show help for a command')
    .showHelpAfterError('(add --help for usage)')
    .showSuggestionAfterError(true)
    .configureOutput({
      getOutHasColors: () => colourEnabled(process.stdout),
      getErrHasColors: () => colourEnabled(process.stderr),
      outputError: (text, write) => write(paintErr('red', text)),
    })
    .configureHelp({ styleTitle: (t) => paintOut('bold', t), styleCommandText: (t) => paintOut('cyan', t) })
    .exitOverride()
    .addHelpText('after', ENVIRONMENT);
}
