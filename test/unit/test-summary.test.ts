/**
 * Test counts and names from a test command's output: real output of each runner (node --test
 * and pytest run here; the others as they printed it, kept verbatim in test-output/, see its
 * README), and the summary the push gate shows.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { MAX_TEST_NAME_CHARS, MAX_TEST_NAMES, parseTestOutput, summarizeTests } from '../../src/contracts/test-summary';
import { tempDir } from '../support/temp';
import { run } from '../support/processes';

const sample = (file: string) => readFileSync(path.join(__dirname, 'test-output', file), 'utf8');

/** The suite every sample ran: math > adds, subtracts (pass), multiplies (fails), divides (skipped). */
const MATH = {
  passed: ['math > adds', 'math > subtracts'],
  failed: ['math > multiplies'],
  skipped: ['math > divides'],
};

describe('parseTestOutput on real output', () => {
  it('reads node --test, both reporters, run here', async () => {
    const dir = tempDir('node-test');
    writeFileSync(
      path.join(dir, 'a.test.js'),
      `const { describe, test } = require('node:test'); const assert = require('node:assert');
describe('math', () => { test('adds', () => {}); test('subtracts', () => {});
  test('multiplies', () => assert.equal(1, 2)); test('divides', { skip: true }, () => {}); });`,
    );
    for (const reporter of ['spec', 'tap']) {
      const r = await run(process.execPath, ['--test', `--test-reporter=${reporter}`, path.join(dir, 'a.test.js')]);
      expect(r.code).toBe(1);
      expect(parseTestOutput(r.out)).toEqual({
        runner: 'node --test',
        unit: 'test',
        ...{ passed: 2, failed: 1, skipped: 1, total: 4 },
        names: { ...MATH, complete: true },
      });
      // What the workflow has is the tail of the output.
      expect(summarizeTests(r.out.slice(-2000))).toBe('2 passed, 1 failed, 1 skipped (node --test)');
    }
  });

  it('reads pytest, run here, with names under -v', async () => {
    const dir = tempDir('pytest');
    writeFileSync(
      path.join(dir, 'test_a.py'),
      'import pytest\ndef test_a(): pass\ndef test_b(): assert 1 == 2\n@pytest.mark.skip\ndef test_c(): pass\n',
    );
    const r = await run('python3', ['-m', 'pytest', '-p', 'no:cacheprovider', '-v', 'test_a.py'], {}, dir);
    expect(r.code).toBe(1);
    expect(parseTestOutput(r.out)).toEqual({
      runner: 'pytest',
      unit: 'test',
      ...{ passed: 1, failed: 1, skipped: 1, total: 3 },
      names: {
        passed: ['test_a.py::test_a'],
        failed: ['test_a.py::test_b'],
        skipped: ['test_a.py::test_c'],
        complete: true,
      },
    });
  });

  // Each runner's own output of the same suite; "splits" is a todo, "concatenates" passes.
  it.each([
    ['node-spec.txt', 'node --test', [3, 1, 2, 6], ['concatenates'], ['splits']],
    ['node-tap.txt', 'node --test', [3, 1, 2, 6], ['concatenates'], ['splits']],
    ['vitest-verbose.txt', 'vitest', [3, 1, 2, 6], ['concatenates'], ['splits']],
    ['jest-one.txt', 'jest', [2, 1, 1, 4], [], []],
    ['mocha.txt', 'mocha', [2, 1, 1, 4], [], []],
  ])('names every test in %s', (file, runner, [passed, failed, skipped, total], morePassed, moreSkipped) => {
    const prefix = file.startsWith('vitest') ? 'math.test.js > ' : '';
    const names = {
      passed: [...MATH.passed, ...morePassed].map((n) => prefix + n),
      failed: MATH.failed.map((n) => prefix + n),
      skipped: [...MATH.skipped, ...moreSkipped].map((n) => prefix + n),
      complete: true,
    };
    expect(parseTestOutput(sample(file))).toEqual({ runner, unit: 'test', passed, failed, skipped, total, names });
  });

  it('names suites nested in suites (node spec reporter)', () => {
    expect(parseTestOutput(sample('node-spec-pass.txt'))?.names).toEqual({
      passed: ['outer > inner > works', 'outer > also works'],
      ...{ failed: [], skipped: [], complete: true },
    });
  });

  it('reads TAP from other producers, suites before or after their tests', () => {
    expect(parseTestOutput(sample('mocha-tap.txt'))).toEqual({
      runner: 'TAP',
      ...{ unit: 'test', passed: 2, failed: 1, skipped: 1, total: 4 },
      names: {
        ...{ passed: ['math adds', 'math subtracts'], failed: ['math multiplies'] },
        ...{ skipped: ['math divides'], complete: true },
      },
    });
    const vitestTap = parseTestOutput(sample('vitest-tap.txt'));
    expect(vitestTap).toMatchObject({ runner: 'TAP', passed: 3, failed: 1, skipped: 2, total: 6 });
    expect(vitestTap?.names?.passed).toEqual([
      'math.test.js > math > adds',
      'math.test.js > math > subtracts',
      'math.test.js > concatenates',
    ]);
  });

  it.each([
    ['vitest-default.txt', 'vitest', [3, 1, 2, 6], ['math.test.js > math > multiplies']],
    ['jest.txt', 'jest', [3, 1, 2, 6], ['math > multiplies']],
    ['pytest.txt', 'pytest', [4, 1, 2, 7], ['test_math.py::TestMath::test_multiplies']],
    ['uvu.txt', 'uvu', [3, 1, 1, 5], ['math > multiplies']],
  ])('names only the failures in %s, as the runner does', (file, runner, [passed, failed, skipped, total], names) => {
    expect(parseTestOutput(sample(file))).toEqual({
      ...{ runner, unit: 'test', passed, failed, skipped, total },
      names: { passed: [], failed: names, skipped: [], complete: false },
    });
  });

  it('reads pytest -v and the short summary of -rA', () => {
    const passed = [
      'TestMath::test_adds',
      'TestMath::test_subtracts',
      'test_concatenates[a-b]',
      'test_concatenates[c d-e]',
    ];
    const verbose = parseTestOutput(sample('pytest-v.txt'));
    expect(verbose).toMatchObject({ passed: 4, failed: 1, skipped: 2, total: 7 });
    expect(verbose?.names).toEqual({
      passed: passed.map((n) => `test_math.py::${n}`),
      failed: ['test_math.py::TestMath::test_multiplies'],
      skipped: ['test_math.py::TestMath::test_divides', 'test_math.py::test_splits'],
      complete: true,
    });
    // -rA names the skipped tests by line only.
    const quiet = parseTestOutput(sample('pytest-q.txt'));
    expect(quiet?.names).toEqual({ ...verbose?.names, skipped: ['test_math.py::test_splits'], complete: false });
  });

  it('reads go test -v per test and subtest, and a plain go test per package', () => {
    expect(parseTestOutput(sample('go-v.txt'))).toEqual({
      ...{ runner: 'go test', unit: 'test', passed: 5, failed: 1, skipped: 1, total: 7 },
      names: {
        passed: ['TestAdds', 'TestTable', 'TestTable/small', 'TestTable/large', 'TestConcatenates'],
        ...{ failed: ['TestMultiplies'], skipped: ['TestDivides'], complete: true },
      },
    });
    expect(parseTestOutput(sample('go.txt'))).toEqual({
      ...{ runner: 'go test', unit: 'package', passed: 1, failed: 1, skipped: 0, total: 2 },
      names: {
        ...{ passed: ['example.com/samples/strs'], failed: ['example.com/samples/mathx'] },
        ...{ skipped: [], complete: true },
      },
    });
    expect(summarizeTests(sample('go.txt'))).toBe('1 package passed, 1 failed (go test)');
    expect(summarizeTests(sample('go-ok.txt'))).toBe('1 package passed, 0 failed (go test)');
  });
});

describe('parseTestOutput bounds', () => {
  it('keeps at most MAX_TEST_NAMES names of at most MAX_TEST_NAME_CHARS, failures first, and says so', () => {
    const long = 'x'.repeat(5000);
    const points = [`not ok 1 - ${long}`, ...Array.from({ length: 2000 }, (_, i) => `ok ${i + 2} - test ${i}`)];
    const c = parseTestOutput(`TAP version 13\n${points.join('\n')}\n1..2001\n`);
    expect(c).toMatchObject({ runner: 'TAP', passed: 2000, failed: 1, total: 2001 });
    expect(c?.names?.complete).toBe(false);
    expect(c?.names?.failed).toEqual([`${long.slice(0, MAX_TEST_NAME_CHARS - 1)}…`]);
    expect(c?.names?.passed).toHaveLength(MAX_TEST_NAMES - 1);
    expect(c?.names?.passed[0]).toBe('test 0');
  });

  it('recognises nothing in output that is no runner’s', () => {
    expect(parseTestOutput('all good\n')).toBeUndefined();
    expect(parseTestOutput('')).toBeUndefined();
  });
});

describe('summarizeTests', () => {
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
      'jest todo',
      'Tests:       1 failed, 1 skipped, 1 todo, 3 passed, 6 total\n',
      '3 passed, 1 failed, 2 skipped (jest)',
    ],
    [
      'mocha',
      '  3 passing (12ms)\n  1 pending\n  2 failing\n\n  1) suite\n       fails:\n',
      '3 passed, 2 failed, 1 skipped (mocha)',
    ],
    ['pytest -q', '..F\n1 failed, 2 passed in 0.05s\n', '2 passed, 1 failed (pytest)'],
    [
      'bare TAP',
      'TAP version 13\nok 1 - a\nnot ok 2 - b\nok 3 - c # SKIP\n1..3\n',
      '1 passed, 1 failed, 1 skipped (TAP)',
    ],
    ['a plain line', 'building…\nTests: 7 passed, 0 failed\n', '7 passed, 0 failed (plain)'],
    ['colours', '\x1b[32m  4 passing\x1b[39m (3ms)\n', '4 passed, 0 failed (mocha)'],
    ['Windows line ends', '  2 passing (3ms)\r\n  1 failing\r\n', '2 passed, 1 failed (mocha)'],
  ])('reads the %s summary', (_runner, output, expected) => {
    expect(summarizeTests(output)).toBe(expected);
  });

  it('shows the first and last lines of output it does not recognise', () => {
    const output = Array.from({ length: 20 }, (_, i) => `line ${i + 1}`).join('\n');
    expect(summarizeTests(output)).toBe('line 1\nline 2\nline 3\n… 14 more line(s) …\nline 18\nline 19\nline 20');
    expect(summarizeTests('all good\n')).toBe('all good');
  });
});
