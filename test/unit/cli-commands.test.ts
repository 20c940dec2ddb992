/**
 * The command table: a command line that names a command builds that command alone, so each row
 * must build the command it names. Read in a process of its own under tsx, as the CLI runs: its
 * command modules are loaded by require, which vitest does not give TypeScript.
 */
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const script = `
const { COMMANDS } = require('./src/cli/index');
const { rootProgram } = require('./src/cli/help');
const built = COMMANDS.map(([name, add]) => {
  const program = rootProgram();
  add()(program, async () => undefined);
  return [name, program.commands.map((c) => c.name())];
});
process.stdout.write(JSON.stringify(built));
`;

describe('the command table', () => {
  it('builds, for each name, the command of that name alone; each name once', () => {
    const tsx = createRequire(__filename).resolve('tsx/cjs');
    const out = execFileSync(process.execPath, ['--require', tsx, '-e', script], {
      cwd: path.join(__dirname, '../..'),
      encoding: 'utf8',
    });
    const built = JSON.parse(out) as [string, string[]][];
    expect(built.length).toBeGreaterThan(20);
    for (const [name, commands] of built) expect(commands, name).toEqual([name]);
    expect(new Set(built.map(([name]) => name)).size).toBe(built.length);
  });
});
