/**
 * What a test command's output says about its tests: how many passed, failed and were skipped,
 * and, where the runner prints them, which ones. The common runners are recognised: node --test
 * (spec and TAP reporters) and other TAP producers, vitest, jest, mocha, pytest, go test (plain
 * and -v), uvu, and a plain "N passed, N failed" line. For the push gate's summary, and for
 * comparing a run's tests with another's.
 *
 * Pure: runs in workflow code, on output that is already in history. The output is the test
 * process's (hostile); what comes back is bounded, whatever it holds.
 */

/** The tests a run named, by outcome; `complete` when every test counted is named, none cut. */
export interface TestNames {
  passed: string[];
  failed: string[];
  skipped: string[];
  complete: boolean;
}

export interface TestCounts {
  /** The runner whose output this is: "vitest", "node --test", "TAP", … */
  runner: string;
  /** What is counted: tests, or packages (plain `go test` prints no per-test lines). */
  unit: 'test' | 'package';
  passed: number;
  /** Failed, errored and cancelled. */
  failed: number;
  /** Skipped, todo, pending and expected failures. */
  skipped: number;
  /** What the runner printed as its total, or the sum of the three. */
  total: number;
  /** The names the runner printed, if any. */
  names?: TestNames;
}

/** Names kept in all (failed first, then skipped, then passed), and characters of each. */
export const MAX_TEST_NAMES = 300;
export const MAX_TEST_NAME_CHARS = 200;

type Outcome = 'passed' | 'failed' | 'skipped';
interface Named {
  name: string;
  outcome: Outcome;
}
interface Parsed {
  passed: number;
  failed: number;
  skipped: number;
  total?: number;
  unit?: 'package';
  named?: Named[];
}

/** The number captured by `re` in `text`, or undefined. */
function count(text: string, re: RegExp): number | undefined {
  const m = re.exec(text);
  return m ? Number(m[1]) : undefined;
}

/** The sum of every "N word" in `line` whose word is one of `words`. */
function sum(line: string, words: string): number {
  let n = 0;
  for (const m of line.matchAll(new RegExp(`(\\d+) (?:${words})\\b`, 'g'))) n += Number(m[1]);
  return n;
}

function tallyOf(named: Named[]): Parsed {
  const n = (o: Outcome) => named.filter((t) => t.outcome === o).length;
  return { passed: n('passed'), failed: n('failed'), skipped: n('skipped'), named };
}

/** One line of an indented report: a suite heading, a test with its outcome, or neither. */
type TreeLine = { suite: string } | Named | undefined;

/**
 * Test names from a report that nests tests under suite headings by indentation (jest, mocha,
 * node's spec reporter): each test is named by its suites and its title, joined by " > ". A line
 * at a suite's indentation carrying the suite's title ends it (node prints one).
 */
function treeNames(lines: string[], read: (text: string) => TreeLine): Named[] {
  const suites: { indent: number; title: string }[] = [];
  const named: Named[] = [];
  for (const line of lines) {
    const item = read(line.trim());
    if (!item) continue;
    const indent = line.length - line.trimStart().length;
    const title = 'suite' in item ? item.suite : item.name;
    let closes = false;
    while (suites.length && suites[suites.length - 1].indent >= indent) {
      const s = suites.pop()!;
      closes = s.indent === indent && s.title === title;
    }
    if ('suite' in item) suites.push({ indent, title });
    else if (!closes) named.push({ name: [...suites.map((s) => s.title), title].join(' > '), outcome: item.outcome });
  }
  return named;
}

/**
 * TAP test points. Subtests are named under their parent, whether it is printed after them
 * (node, TAP 13) or opens a block before them ("ok 1 - suite {", TAP 14): a point with
 * subtests is a suite, not a test. A comment after " # " is not part of the name.
 */
function tapNames(text: string): Named[] {
  const levels = new Map<number, Named[]>();
  const blocks: { indent: number; name: string }[] = [];
  const inBlocks: Named[] = [];
  for (const m of text.matchAll(/^( *)(not )?ok\b(?: \d+)?(?: -)? ?(.*)$/gm)) {
    const indent = m[1].length;
    const [title, comment = ''] = m[3].split(/ #(.*)/);
    while (blocks.length && blocks[blocks.length - 1].indent >= indent) blocks.pop();
    const name = [...blocks.map((b) => b.name), title.trim()].join(' > ');
    const outcome = /^\s*(skip|todo)\b/i.test(comment) ? 'skipped' : m[2] ? 'failed' : 'passed';
    if (/\{\s*$/.test(m[3])) blocks.push({ indent, name: title.trim() });
    else if (blocks.length) inBlocks.push({ name, outcome });
    if (blocks.length) continue;
    const children = [...levels]
      .filter(([level]) => level > indent)
      .flatMap(([level, named]) => {
        levels.delete(level);
        return named;
      });
    const mine = levels.get(indent) ?? [];
    if (children.length) mine.push(...children.map((c) => ({ ...c, name: `${name} > ${c.name}` })));
    else mine.push({ name, outcome });
    levels.set(indent, mine);
  }
  return [...inBlocks, ...[...levels].sort(([a], [b]) => a - b).flatMap(([, named]) => named)];
}

/** A title without the duration a runner prints after it: "adds (2 ms)", "adds 1ms". */
function untimed(title: string): string {
  return title.replace(/\s+\(?\d+(?:\.\d+)?\s?m?s\)?$/, '');
}

function nodeSpecLine(text: string): TreeLine {
  const m = /^([✔✖﹣▶]) (.*?)(?: # (SKIP|TODO)\b.*)?$/u.exec(text);
  if (!m) return undefined;
  const title = untimed(m[2]);
  if (m[1] === '▶') return { suite: title };
  return { name: title, outcome: m[3] || m[1] === '﹣' ? 'skipped' : m[1] === '✖' ? 'failed' : 'passed' };
}

function nodeTest(text: string): Parsed | undefined {
  const n = (word: string) => count(text, new RegExp(`^[ℹ#] ${word} (\\d+)\\s*$`, 'm'));
  const [passed, failed, cancelled] = [n('pass'), n('fail'), n('cancelled')];
  if (passed === undefined || failed === undefined || cancelled === undefined) return undefined;
  const spec = /^ℹ tests /m.exec(text);
  const named = spec ? treeNames(text.slice(0, spec.index).split('\n'), nodeSpecLine) : tapNames(text);
  const skipped = (n('skipped') ?? 0) + (n('todo') ?? 0);
  return { passed, failed: failed + cancelled, skipped, total: n('tests'), named };
}

function vitestName(m: RegExpMatchArray): Named {
  const outcome = m[1] === '✓' ? 'passed' : m[1] === '×' ? 'failed' : 'skipped';
  return { name: untimed(m[2].trim()), outcome };
}

function vitest(text: string): Parsed | undefined {
  const m = /^\s*Tests\s{2,}(.*)\((\d+)\)\s*$/m.exec(text);
  if (!m) return undefined;
  // Only the verbose reporter names every test, as "file > suite > title".
  const named = [...text.matchAll(/^\s*([✓×↓□]) (.+ > .+)$/gmu)].map(vitestName);
  for (const f of text.matchAll(/^\s*FAIL\s+(.+ > .+?)\s*$/gm)) named.push({ name: f[1], outcome: 'failed' });
  const [passed, failed, skipped] = [sum(m[1], 'passed'), sum(m[1], 'failed'), sum(m[1], 'skipped|todo')];
  return { passed, failed, skipped, total: Number(m[2]), named };
}

function jestLine(text: string): TreeLine {
  const m = /^([✓✕○✎]) (?:skipped |todo )?(.*)$/u.exec(text);
  if (!m) return { suite: text };
  return { name: untimed(m[2]), outcome: m[1] === '✓' ? 'passed' : m[1] === '✕' ? 'failed' : 'skipped' };
}

function jest(text: string): Parsed | undefined {
  const line = /^Tests:\s+(.*)\b(\d+) total\s*$/m.exec(text);
  if (!line) return undefined;
  // A file's tests are listed (verbose, or a run of one file) from its PASS/FAIL line to a blank line.
  const named = [...text.matchAll(/^(?:PASS|FAIL) \S.*\n((?:.+\n)+)/gm)].flatMap((m) =>
    treeNames(m[1].split('\n'), jestLine),
  );
  for (const f of text.matchAll(/^\s*● (.+?)\s*$/gm)) {
    if (!/^(Console|Test suite failed to run)$/.test(f[1]))
      named.push({ name: f[1].replace(/ › /g, ' > '), outcome: 'failed' });
  }
  const [passed, failed, skipped] = [sum(line[1], 'passed'), sum(line[1], 'failed'), sum(line[1], 'skipped|todo')];
  return { passed, failed, skipped, total: Number(line[2]), named };
}

function mochaLine(text: string): TreeLine {
  const m = /^(✔|✓|\d+\)|-) (.*)$/u.exec(text);
  if (!m) return text ? { suite: text } : undefined;
  return { name: untimed(m[2]), outcome: m[1] === '-' ? 'skipped' : /\d/.test(m[1]) ? 'failed' : 'passed' };
}

function mocha(text: string): Parsed | undefined {
  const passing = /^\s*(\d+) passing\b/m.exec(text);
  if (!passing) return undefined;
  const tree = text
    .slice(0, passing.index)
    .split('\n')
    .filter((l) => /^ {2,}\S/.test(l));
  const failed = count(text, /^\s*(\d+) failing\b/m) ?? 0;
  const skipped = count(text, /^\s*(\d+) pending\b/m) ?? 0;
  return { passed: Number(passing[1]), failed, skipped, named: treeNames(tree, mochaLine) };
}

const PYTEST_OUTCOMES: Record<string, Outcome> = {
  PASSED: 'passed',
  XPASS: 'passed',
  FAILED: 'failed',
  ERROR: 'failed',
  SKIPPED: 'skipped',
  XFAIL: 'skipped',
};

function pytest(text: string): Parsed | undefined {
  const words = 'passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?';
  const line = new RegExp(`^=*\\s*(\\d+ (?:${words})(?:, \\d+ (?:${words}))*) in [\\d.]+s\\b`, 'm').exec(text)?.[1];
  if (!line) return undefined;
  const named: Named[] = [];
  // -v: "path::test PASSED [ 14%]"; the short summary (-rA, and failures always): "FAILED path::test - why".
  for (const m of text.matchAll(/^(\S+::.+?) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b.*$/gm))
    named.push({ name: m[1], outcome: PYTEST_OUTCOMES[m[2]] });
  for (const m of text.matchAll(/^(PASSED|FAILED|ERROR|XFAIL|XPASS) (\S+::.+?)(?: - .*)?$/gm))
    named.push({ name: m[2], outcome: PYTEST_OUTCOMES[m[1]] });
  const [passed, failed, skipped] = [
    sum(line, 'passed|xpassed'),
    sum(line, 'failed|errors?'),
    sum(line, 'skipped|xfailed'),
  ];
  return { passed, failed, skipped, named };
}

const GO_OUTCOMES: Record<string, Outcome> = { PASS: 'passed', FAIL: 'failed', SKIP: 'skipped' };

function goTest(text: string): Parsed | undefined {
  // -v prints a line per test and subtest; a plain run, only the failing ones and a line per package.
  if (/^=== RUN /m.test(text) || /^\s*--- (?:PASS|SKIP): /m.test(text)) {
    const named = [...text.matchAll(/^\s*--- (PASS|FAIL|SKIP): (\S+)/gm)].map((m) => ({
      name: m[2],
      outcome: GO_OUTCOMES[m[1]],
    }));
    return tallyOf(named);
  }
  const named = [...text.matchAll(/^(ok|FAIL)\s+(\S+)\s+(?:[\d.]+s|\(cached\)|\[build failed\])/gm)].map((m) => ({
    name: m[2],
    outcome: m[1] === 'ok' ? ('passed' as const) : ('failed' as const),
  }));
  return named.length ? { ...tallyOf(named), unit: 'package' } : undefined;
}

function uvu(text: string): Parsed | undefined {
  const ran = count(text, /^\s*Total:\s+(\d+)\s*$/m);
  const passed = count(text, /^\s*Passed:\s+(\d+)\s*$/m);
  if (ran === undefined || passed === undefined) return undefined;
  const skipped = count(text, /^\s*Skipped:\s+(\d+)\s*$/m) ?? 0;
  // uvu's total counts the tests it ran; it names only the failing ones: FAIL  suite  "title".
  const named = [...text.matchAll(/^\s*FAIL\s+(?:(.*?)\s+)?"(.*)"\s*$/gm)].map((m) => ({
    name: m[1] ? `${m[1]} > ${m[2]}` : m[2],
    outcome: 'failed' as const,
  }));
  return { passed, failed: Math.max(0, ran - passed), skipped, total: ran + skipped, named };
}

function tap(text: string): Parsed | undefined {
  const named = tapNames(text);
  return named.length ? tallyOf(named) : undefined;
}

/** "Tests: 3 passed, 1 failed, 2 skipped" on a line of its own, as any script may print. */
function plain(text: string): Parsed | undefined {
  const m = /^(?:\w+: )?(\d+) passed, (\d+) failed(?:, (\d+) skipped)?\s*$/m.exec(text);
  return m ? { passed: Number(m[1]), failed: Number(m[2]), skipped: Number(m[3] ?? 0) } : undefined;
}

/** In order: a runner's summary lines before another's that could be mistaken for them. */
const RUNNERS: [string, (text: string) => Parsed | undefined][] = [
  ['node --test', nodeTest],
  ['vitest', vitest],
  ['jest', jest],
  ['mocha', mocha],
  ['pytest', pytest],
  ['uvu', uvu],
  ['go test', goTest],
  ['TAP', tap],
  ['plain', plain],
];

function bounded(name: string): string {
  return name.length <= MAX_TEST_NAME_CHARS ? name : `${name.slice(0, MAX_TEST_NAME_CHARS - 1)}…`;
}

/** The names, deduplicated and bounded; complete when there is one for every test counted. */
function namesOf(p: Parsed): TestNames | undefined {
  if (!p.named?.length) return undefined;
  const lists: TestNames = { passed: [], failed: [], skipped: [], complete: true };
  let room = MAX_TEST_NAMES;
  for (const outcome of ['failed', 'skipped', 'passed'] as const) {
    const all = [...new Set(p.named.filter((t) => t.outcome === outcome).map((t) => t.name))];
    lists[outcome] = all.slice(0, room).map(bounded);
    room -= lists[outcome].length;
    const cut = lists[outcome].length < all.length || lists[outcome].some((n, i) => n !== all[i]);
    if (cut || all.length !== p[outcome]) lists.complete = false;
  }
  return lists;
}

/** The counts (and names) in a test command's output, or undefined when no runner is recognised. */
export function parseTestOutput(output: string): TestCounts | undefined {
  const text = output.replace(/\x1b\[[0-9;]*[A-Za-z]/g, '').replace(/\r\n?/g, '\n');
  for (const [runner, parse] of RUNNERS) {
    const p = parse(text);
    if (!p) continue;
    const names = namesOf(p);
    const total = p.total ?? p.passed + p.failed + p.skipped;
    const counts: TestCounts = {
      runner,
      unit: p.unit ?? 'test',
      passed: p.passed,
      failed: p.failed,
      skipped: p.skipped,
      total,
    };
    return names ? { ...counts, names } : counts;
  }
  return undefined;
}

/** "3 passed, 1 failed, 2 skipped (vitest)"; "2 packages passed, 0 failed (go test)". */
export function formatTestCounts(c: TestCounts): string {
  const what = c.unit === 'package' ? (c.passed === 1 ? 'package ' : 'packages ') : '';
  const skipped = c.skipped ? `, ${c.skipped} skipped` : '';
  return `${c.passed} ${what}passed, ${c.failed} failed${skipped} (${c.runner})`;
}

const HEAD_TAIL = 3;

/** The counts in a test command's output, or its first and last lines when no runner is recognised. */
export function summarizeTests(output: string): string {
  const counts = parseTestOutput(output);
  if (counts) return formatTestCounts(counts);
  const all = output
    .replace(/\x1b\[[0-9;]*[A-Za-z]/g, '')
    .trimEnd()
    .split('\n');
  if (all.length <= 2 * HEAD_TAIL + 1) return all.join('\n');
  return [...all.slice(0, HEAD_TAIL), `… ${all.length - 2 * HEAD_TAIL} more line(s) …`, ...all.slice(-HEAD_TAIL)].join(
    '\n',
  );
}
