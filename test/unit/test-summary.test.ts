/**
 * The push gate's test summary: real output of node --test (both reporters) and pytest, run
 * here; the other runners' summary lines as they print them.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { summarizeTests } from '../../src/contracts/test-summary';
import { tempDir } from '../support/temp';
import { run } from '../support/processes';

describe('summarizeTests', () => {
  it('counts node --test results from the spec and TAP reporters', async () => {
    const dir = tempDir('node-test');
    writeFileSync(
      path.join(dir, 'a.test.js'),
      `const test = require('node:test'); const assert = require('node:assert');
test('one', () => {}); test('two', () => {}); test('three', () => assert.equal(1, 2)); test('four', { skip: true }, () => {});`,
    );
    for (const reporter of ['spec', 'tap']) {
      const r = await run(process.execPath, ['--test', `--test-reporter=${reporter}`, path.join(dir, 'a.test.js')]);
      expect(r.code).toBe(1);
      // What the workflow has is the tail of the output.
      expect(summarizeTests(r.out.slice(-2000))).toBe('2 passed, 1 failed, 1 skipped (node --test)');
    }
  });

  it('counts pytest results', async () => {
    const dir = tempDir('pytest');
    writeFileSync(
      path.join(dir, 'test_a.py'),
      'import pytest\ndef test_a(): pass\ndef test_b(): assert 1 == 2\n@pytest.mark.skip\ndef test_c(): pass\n',
    );
    const r = await run('python3', ['-m', 'pytest', '-p', 'no:cacheprovider', dir]);
    expect(r.code).toBe(1);
    expect(summarizeTests(r.out)).toBe('1 passed, 1 failed, 1 skipped (pytest)');
  });

  it.each([
    [
      'vitest',
      ' Test Files  1 failed (1)\n      Tests  1 failed | 2 passed | 1 skipped (4)\n   Start at  07:13:23\n',
      '2 passed, 1 failed, 1 skipped (vitest)',
    ],
    [
      'jest',
      'Test Suites: 1 failed, 1 total\nTests:       1 failed, 5 passed, 6 total\nSnapshots:   0 total\nTime:        1.2 s\n',
      '5 passed, 1 failed (jest)',
    ],
    [
      'mocha',
      '  3 passing (12ms)\n  1 pending\n  2 failing\n\n  1) suite\n       fails:\n',
      '3 passed, 2 failed, 1 skipped (mocha)',
    ],
    [
      'go test -v',
      '=== RUN   TestA\n--- PASS: TestA (0.00s)\n=== RUN   TestB\n--- FAIL: TestB (0.00s)\nFAIL\nFAIL\texample.com/x\t0.004s\n',
      '1 passed, 1 failed (go test)',
    ],
    ['go test', 'ok  \texample.com/x\t0.004s\nok  \texample.com/y\t0.010s\n', '2 passed, 0 failed (go test)'],
    ['bare TAP', 'TAP version 13\nok 1 - a\nnot ok 2 - b\nok 3 - c\n1..3\n', '2 passed, 1 failed (TAP)'],
    ['colours', '\x1b[32m  4 passing\x1b[39m (3ms)\n', '4 passed, 0 failed (mocha)'],
  ])('reads the %s summary', (_runner, output, expected) => {
    expect(summarizeTests(output)).toBe(expected);
  });

  it('shows the first and last lines of output it does not recognise', () => {
    const output = Array.from({ length: 20 }, (_, i) => `line ${i + 1}`).join('\n');
    expect(summarizeTests(output)).toBe('line 1\nline 2\nline 3\n… 14 more line(s) …\nline 18\nline 19\nline 20');
    expect(summarizeTests('all good\n')).toBe('all good');
  });
});
