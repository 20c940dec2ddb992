/**
 * How a command travels into an E2B sandbox: as variables of the SDK's `bash -l -c`, which a
 * fixed wrapper turns back into the command and its environment.
 */
import { ApplicationFailure } from '@temporalio/common';

const ENV_PREFIX = '__FLOTILLA_ENV_';
const CMD_VAR = '__FLOTILLA_CMD';
/**
 * What exec actually runs, as `bash -l -c WRAPPER`. That login shell has envd's environment
 * (its PATH, USER, E2B_* variables, whatever the profile sets), so the command's environment is
 * rebuilt from nothing out of the variables sent under a prefix no profile touches. The command
 * travels as a variable too: envd logs the command line of every process it starts. It runs in a
 * session of its own because envd's kill reaches only the process it started: TERM to
 * this wrapper kills the command's whole tree, and so does the command's own exit. Bash makes
 * `&` jobs ignore SIGINT and SIGQUIT; `env --default-signal` gives the command default handlers.
 */
export const WRAPPER = `c= stop=
e=()
for n in \${!${ENV_PREFIX}@}; do e+=("\${n#${ENV_PREFIX}}=\${!n}"); done
trap 'stop=1; [ -z "$c" ] || kill -KILL -- -"$c" "$c" 2>/dev/null' TERM
setsid env -i --default-signal "\${e[@]}" /bin/bash -c "$${CMD_VAR}" &
c=$!
[ -z "$stop" ] || kill -KILL -- -"$c" "$c" 2>/dev/null
wait "$c"; s=$?
kill -KILL -- -"$c" 2>/dev/null
exit "$s"`;

export function commandEnv(command: string, env: Record<string, string>): Record<string, string> {
  const envs: Record<string, string> = { [CMD_VAR]: command };
  for (const [name, value] of Object.entries(env)) {
    // The wrapper finds the variables through bash, which only sees names that are identifiers.
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) {
      throw ApplicationFailure.nonRetryable(
        `environment variable ${JSON.stringify(name)} cannot be passed into an E2B sandbox`,
        'InvalidEnvName',
      );
    }
    envs[ENV_PREFIX + name] = value;
  }
  return envs;
}
