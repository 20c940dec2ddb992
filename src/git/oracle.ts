/**
 * Hidden ("oracle") tests, host-side: read from the commit fetched into the staging
 * repository, checked, and turned into a redactor for the output of the test runs they take
 * part in, so that neither their names nor their text reach history, artifacts or an agent.
 */
import { permanent } from '../contracts/failures';
import { pathIsUnder, repoPathProblem } from '../contracts/names';
import type { Sandbox } from '../sandbox/types';
import { listTree, readBlob } from './merge';

const MAX_FILES = 64;
const MAX_BYTES = 512 * 1024;
/** An output line sharing this many consecutive characters with an oracle file is withheld. */
const WINDOW = 16;
const REDACTED_NAME = '[hidden test]';
const REDACTED_LINE = '[hidden test output withheld]';

export interface OracleFile {
  path: string;
  executable: boolean;
  content: Buffer;
}

/** The oracle files of `sha`, or why they cannot be used (without naming them: names are secret too). */
export async function oracleFiles(dir: string, sha: string): Promise<{ files: OracleFile[] } | { problem: string }> {
  const entries = await listTree(dir, sha);
  if (entries.length === 0) return { problem: 'the hidden tests commit holds no files' };
  if (entries.length > MAX_FILES)
    return { problem: `the hidden tests commit holds ${entries.length} files; at most ${MAX_FILES}` };
  const odd = entries.filter((e) => e.mode !== '100644' && e.mode !== '100755');
  if (odd.length)
    return {
      problem: `${odd.length} hidden test entr(ies) are symbolic links or submodules; only regular files can be placed`,
    };
  const badPaths = entries.filter((e) => repoPathProblem(e.path) !== undefined);
  if (badPaths.length) return { problem: `${badPaths.length} hidden test path(s) cannot be placed in a repository` };
  const files = await Promise.all(
    entries.map(async (e) => ({ path: e.path, executable: e.mode === '100755', content: await readBlob(dir, e.oid) })),
  );
  const bytes = files.reduce((sum, f) => sum + f.content.length, 0);
  if (bytes > MAX_BYTES) return { problem: `the hidden tests are ${bytes} bytes; at most ${MAX_BYTES}` };
  return { files };
}

/** The oracle files of `sha` (none without one); a commit that cannot be used is an invalid request. */
export async function readOracles(dir: string, sha: string | undefined): Promise<OracleFile[]> {
  if (!sha) return [];
  const read = await oracleFiles(dir, sha);
  if ('problem' in read) throw permanent('InvalidRequest', `oracle: ${read.problem}`);
  return read.files;
}

/** The paths of the oracle files of `sha` (none without one). */
export async function oraclePaths(dir: string, sha: string | undefined): Promise<string[]> {
  return sha ? (await listTree(dir, sha)).map((e) => e.path) : [];
}

/** How many files of `treeish` are at, under or above an oracle path. */
export async function filesAtOraclePaths(dir: string, treeish: string, oracles: string[]): Promise<number> {
  return (await listTree(dir, treeish)).filter((e) => clashesWithOracle(e.path, oracles)).length;
}

/**
 * Writes the oracle files into the sandbox's workspace, read-only. The owner of a file can still
 * make it writable again, so this is a tripwire; alteredOracles after the run is the guarantee.
 */
export async function placeOracles(sb: Sandbox, files: OracleFile[]): Promise<void> {
  // Owned by the host's user, not the sandbox's: test code cannot chmod them back and rewrite them.
  for (const f of files)
    await sb.writeFile(`${sb.workspace}/${f.path}`, f.content, { readOnly: true, executable: f.executable });
}

/** How many oracle files are no longer exactly what was placed (changed, replaced or gone). */
export async function alteredOracles(sb: Sandbox, files: OracleFile[]): Promise<number> {
  let altered = 0;
  for (const f of files) {
    const now = await sb.readFile(`${sb.workspace}/${f.path}`).catch(() => undefined);
    if (!now || !Buffer.from(now).equals(f.content)) altered++;
  }
  return altered;
}

/** True when `path` is an oracle path, lies under one, or holds one. */
export function clashesWithOracle(path: string, oraclePaths: string[]): boolean {
  return oraclePaths.some((o) => pathIsUnder(path, o) || pathIsUnder(o, path));
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/**
 * Withholds from `text` every line that quotes an oracle file (a test title, an assertion
 * message, a source line: any run of WINDOW characters it shares with one), and replaces
 * their paths and file names. Output that encodes an oracle some other way is not caught.
 */
/** Counts a test runner prints ("12 passed, 3 failed"): the only words of a hidden test run that are shown. */
const COUNT = /\b(\d{1,6}) (passed|failed|passing|failing|skipped|pending|errors?|tests?)\b/gi;

/**
 * What people and agents are shown of a test run the hidden tests took part in, in place of its
 * output: redaction cannot recognise their text once a test process encodes it, so none of the
 * text is shown, only the counts the runner printed in `tail` (the last of each kind). The full
 * log, redacted, stays on the worker's host for its operator.
 */
export function withheldOutput(tail: string): string {
  const counts = new Map<string, string>();
  for (const m of tail.matchAll(COUNT)) counts.set(m[2].toLowerCase(), m[1]);
  const said = [...counts].map(([word, n]) => `${n} ${word}`).join(', ');
  return [
    "[flotilla: hidden tests took part in this run, so its output is withheld; its full log stays on the worker's host]",
    ...(said ? [`[flotilla: the test runner reported ${said}]`] : []),
  ].join('\n');
}

export function oracleRedactor(files: OracleFile[]): (text: string) => string {
  if (files.length === 0) return (text) => text;
  const windows = new Set<string>();
  for (const f of files) {
    for (const line of f.content.toString('utf8').split('\n')) {
      const t = line.trim();
      for (let i = 0; i + WINDOW <= t.length; i++) windows.add(t.slice(i, i + WINDOW));
    }
  }
  const names = [...new Set(files.flatMap((f) => [f.path, f.path.split('/').pop()!]))]
    .filter((n) => n.length >= 4)
    .sort((a, b) => b.length - a.length);
  const nameRe = new RegExp(names.map(escapeRegExp).join('|'), 'g');
  const quotes = (line: string) => {
    for (let i = 0; i + WINDOW <= line.length; i++) if (windows.has(line.slice(i, i + WINDOW))) return true;
    return false;
  };
  return (text) =>
    text
      .split('\n')
      .map((line) => (quotes(line) ? REDACTED_LINE : names.length ? line.replace(nameRe, REDACTED_NAME) : line))
      .join('\n');
}
