/** `flotilla init`'s guess of a project's test and setup commands, from the files it holds. */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { detectCommands } from '../../src/cli/init';
import { tempDir } from '../support/temp';

describe('detectCommands', () => {
  it('finds the test command of the usual project layouts', () => {
    const project = (files: Record<string, string>) => {
      const dir = tempDir('layout');
      for (const [name, content] of Object.entries(files)) {
        mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
        writeFileSync(path.join(dir, name), content);
      }
      return dir;
    };
    expect(
      detectCommands(project({ 'package.json': '{"scripts":{"test":"vitest run"}}', 'package-lock.json': '{}' })),
    ).toEqual({ testCmd: 'npm test', setupCmd: 'npm ci' });
    // npm's placeholder is no test command; the Makefile's is.
    expect(
      detectCommands(
        project({
          'package.json': '{"scripts":{"test":"echo \\"Error: no test specified\\" && exit 1"}}',
          Makefile: 'test:\n\tnode t.js\n',
        }),
      ),
    ).toEqual({ testCmd: 'make test' });
    expect(detectCommands(project({ 'pyproject.toml': '[project]\nname = "x"\n' }))).toEqual({
      testCmd: 'python3 -m pytest',
    });
    expect(detectCommands(project({ 'go.mod': 'module x\n' }))).toEqual({ testCmd: 'go test ./...' });
    expect(detectCommands(project({ 'README.md': 'x' }))).toEqual({});
  });
});
