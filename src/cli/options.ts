/** Option parsers and help pieces more than one command uses. */
import { type Command, InvalidArgumentError, Option } from 'commander';

/** Runs a command's action; the program exits with the code it returns. */
export type Runner = (action: Promise<number>) => Promise<void>;

/** Adds one command to the program (cli/index.ts lists them in the order help shows them). */
export type AddCommand = (program: Command, run: Runner) => Command;

export function positiveNumber(name: string) {
  return (value: string): number => {
    const n = Number(value);
    if (!(n > 0) || !Number.isFinite(n))
      throw new InvalidArgumentError(`${name} must be a positive number of dollars.`);
    return n;
  };
}

export function positiveInteger(name: string) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`${name} must be a positive whole number.`);
    return n;
  };
}

/** `--gate plan|push`, the same on approve and reject. */
export function gateOption(): Option {
  return new Option('--gate <gate>', 'the gate to pass').choices(['plan', 'push']).makeOptionMandatory();
}

export function example(...lines: string[]): string {
  return `\nExample:\n${lines.map((l) => `  $ ${l}`).join('\n')}`;
}
