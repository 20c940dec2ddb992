/**
 * What a person reviewing the push gate needs of the test output: how many tests passed and
 * failed. The common runners' summaries are recognised (node --test and other TAP producers,
 * vitest, jest, mocha, pytest, go test); for any other output, its first and last lines.
 *
 * Pure: runs in workflow code, on the tail of the output that is already in history.
 */

interface Counts {
  passed: number;
  failed: number;
  skipped?: number;
}

/** The number captured by `re` in `text`, or undefined. */
function count(text: string, re: RegExp): number | undefined {
  const m = re.exec(text);
  return m ? Number(m[1]) : undefined;
}

/** Lines matching `re` (which must have the g and m flags). */
function lines(text: string, re: RegExp): number {
  return text.match(re)?.length ?? 0;
}

/** "3 passed, 1 failed, 2 skipped" style counts within one summary line. */
function tally(line: string, names: { passed: string; failed: string; skipped: string }): Counts {
  const n = (word: string) => count(line, new RegExp(`(\\d+) (?:${word})\\b`)) ?? 0;
  const skipped = n(names.skipped);
  return { passed: n(names.passed), failed: n(names.failed), ...(skipped ? { skipped } : {}) };
}

const RUNNERS: { name: string; parse(text: string): Counts | undefined }[] = [
  {
    // node --test: "ℹ pass 3" (spec reporter) or "# pass 3" (TAP reporter, and other TAP producers).
    name: 'node --test',
    parse(text) {
      const passed = count(text, /^[ℹ#] pass (\d+)\s*$/m);
      const failed = count(text, /^[ℹ#] fail (\d+)\s*$/m);
      if (passed === undefined || failed === undefined) return undefined;
      const skipped = count(text, /^[ℹ#] skip(?:ped)? (\d+)\s*$/m);
      return { passed, failed, ...(skipped ? { skipped } : {}) };
    },
  },
  {
    // vitest: "      Tests  1 failed | 2 passed (3)"
    name: 'vitest',
    parse(text) {
      const line = /^\s*Tests\s{2,}(.*\(\d+\))\s*$/m.exec(text)?.[1];
      return line ? tally(line, { passed: 'passed', failed: 'failed', skipped: 'skipped' }) : undefined;
    },
  },
  {
    // jest: "Tests:       1 failed, 2 passed, 3 total"
    name: 'jest',
    parse(text) {
      const line = /^Tests:\s+(.*\d+ total)\s*$/m.exec(text)?.[1];
      return line ? tally(line, { passed: 'passed', failed: 'failed', skipped: 'skipped|todo' }) : undefined;
    },
  },
  {
    // mocha: "  2 passing (8ms)", "  1 failing", "  1 pending"
    name: 'mocha',
    parse(text) {
      const passed = count(text, /^\s*(\d+) passing\b/m);
      if (passed === undefined) return undefined;
      const skipped = count(text, /^\s*(\d+) pending\b/m);
      return { passed, failed: count(text, /^\s*(\d+) failing\b/m) ?? 0, ...(skipped ? { skipped } : {}) };
    },
  },
  {
    // pytest: "==== 1 failed, 2 passed, 1 skipped in 0.12s ===="
    name: 'pytest',
    parse(text) {
      const line = /^=+ (.*\d+ (?:passed|failed|errors?|skipped).*) in [\d.]+s\b.*=+\s*$/m.exec(text)?.[1];
      return line ? tally(line, { passed: 'passed', failed: 'failed|errors?', skipped: 'skipped' }) : undefined;
    },
  },
  {
    // go test -v: "--- PASS: TestX", "--- FAIL: TestY"; without -v, one "ok"/"FAIL" line per package.
    name: 'go test',
    parse(text) {
      const passed = lines(text, /^\s*--- PASS: /gm);
      const failed = lines(text, /^\s*--- FAIL: /gm);
      const skipped = lines(text, /^\s*--- SKIP: /gm);
      if (passed + failed > 0) return { passed, failed, ...(skipped ? { skipped } : {}) };
      const okPkgs = lines(text, /^ok\s+\S+\s+[\d.]+s/gm);
      const failPkgs = lines(text, /^FAIL\s+\S+\s+[\d.]+s/gm);
      return okPkgs + failPkgs > 0 ? { passed: okPkgs, failed: failPkgs } : undefined;
    },
  },
  {
    // Any other TAP: "ok 1 - …" and "not ok 2 - …" lines.
    name: 'TAP',
    parse(text) {
      const passed = lines(text, /^\s*ok \d+\b/gm);
      const failed = lines(text, /^\s*not ok \d+\b/gm);
      return passed + failed > 0 ? { passed, failed } : undefined;
    },
  },
];

const HEAD_TAIL = 3;

/** "3 passed, 1 failed (vitest)", or the output's first and last lines when no runner is recognised. */
export function summarizeTests(output: string): string {
  const text = output.replace(/\x1b\[[0-9;]*[A-Za-z]/g, '');
  for (const runner of RUNNERS) {
    const c = runner.parse(text);
    if (c) return `${c.passed} passed, ${c.failed} failed${c.skipped ? `, ${c.skipped} skipped` : ''} (${runner.name})`;
  }
  const all = text.trimEnd().split('\n');
  if (all.length <= 2 * HEAD_TAIL + 1) return all.join('\n');
  return [...all.slice(0, HEAD_TAIL), `… ${all.length - 2 * HEAD_TAIL} more line(s) …`, ...all.slice(-HEAD_TAIL)].join(
    '\n',
  );
}
