/** Option parsers and help pieces more than one command uses. */
import { type Command, InvalidArgumentError, Option } from 'commander';

/** Runs a command's action; the program exits with the code it returns. */
export type Runner = (action: Promise<number>) => Promise<void>;

/** Adds one command to the program (cli/index.ts lists them in the order help shows them). */
export type AddCommand = (program: Command, run: Runner) => Command;

/**
 * Numbers on the command line are plain decimals: Number() alone would also take "0x10" (16),
 * "1e3", "0b11" and " 5 ", none of which a person means as dollars or a count.
 */
const DECIMAL = /^(\d+(\.\d*)?|\.\d+)$/;

export function positiveNumber(name: string) {
  return (value: string): number => {
    const n = Number(value);
    if (!DECIMAL.test(value) || !(n > 0) || !Number.isFinite(n))
      throw new InvalidArgumentError(`${name} must be a positive number of dollars, such as 2 or 0.5.`);
    return n;
  };
}

export function positiveInteger(name: string) {
  return (value: string): number => {
    const n = Number(value);
    if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < 1)
      throw new InvalidArgumentError(`${name} must be a positive whole number, such as 20.`);
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
