/**
 * Edits made in a sandbox from a commit of the staging repository. A fixer's (resolver, repair
 * agent) come back to the host as a tree, checked there before the host commits it; a test run's
 * are only reported, and discarded.
 */
import { scrubSecrets } from './remote';
import { addedMarkers, changedPaths, commitTree, diffstat, treeOf } from './merge';
import { clashesWithOracle, oraclePaths } from './oracle';
import { SharedStoreError } from './shared-store';
import { type StagingRepo, runRef } from './staging';
import { BUNDLE_REF, bundleScript } from './bundles';
import { cleanHostTree } from './host-tree';
import type { TestRunTrace } from './host-checkout';
import { type Workspace, sh } from './workspace';

/** A report names at most this many offending paths. */
const MAX_LISTED_PATHS = 20;

function listed(paths: string[]): string {
  const more = paths.length > MAX_LISTED_PATHS ? ` and ${paths.length - MAX_LISTED_PATHS} more` : '';
  return paths.slice(0, MAX_LISTED_PATHS).join(', ') + more;
}

/**
 * Brings the fixer's working tree back to the host as a commit of the staging repository and
 * returns its tree. The commit is only the transport (whatever the agent did to HEAD, its
 * history and metadata are dropped); the tree is checked before the host commits it.
 */
async function bringBack(
  ws: Workspace,
  staging: StagingRepo,
  c: { runKey: string; from: string },
): Promise<{ tree: string } | { problem: string }> {
  const bundle = `${ws.sb.scratch}/edits.bundle`;
  try {
    await ws.script(
      `git add -A
git -c user.name=fixer -c user.email=fixer@localhost -c commit.gpgsign=false commit -q --no-verify --allow-empty -m 'fixer edits'
git update-ref ${BUNDLE_REF} HEAD
${bundleScript(bundle, c.from)}`,
      'collecting the edits',
    );
    const { head } = await staging.withBundleFile(async (file) => {
      await ws.sb.copyOut(bundle, file);
      return staging.importBundle(file, runRef(c.runKey, 'edits'), { what: "the fixer's edits", seed: c.from });
    });
    return { tree: await treeOf(staging.dir, head) };
  } catch (err) {
    if (err instanceof SharedStoreError) throw err;
    // The agent controls the workspace's .git: a failure here is its doing, and fails its round.
    return {
      problem: `its edits could not be collected: ${scrubSecrets(err instanceof Error ? err.message : String(err)).slice(0, 300)}`,
    };
  }
}

/**
 * Problems with `tree` as a change of `from`: conflict markers, .rej files, paths it may not
 * change. Hidden test paths are counted, never named: the reason goes into history.
 */
async function editProblems(
  dir: string,
  c: { from: string; tree: string; allowed: (path: string) => boolean; oraclePaths: string[] },
): Promise<{ changed: string[]; problems: string[] }> {
  const changed = await changedPaths(dir, c.from, c.tree);
  const problems: string[] = [];
  const markers = await addedMarkers(dir, c.from, c.tree);
  if (markers.length) problems.push(`conflict markers left at ${listed(markers)}`);
  const hidden = changed.filter((p) => clashesWithOracle(p, c.oraclePaths));
  if (hidden.length) problems.push(`changed ${hidden.length} path(s) reserved for the hidden tests`);
  const rest = changed.filter((p) => !hidden.includes(p));
  const rejects = rest.filter((p) => /\.(rej|orig)$/.test(p));
  if (rejects.length) problems.push(`.rej or .orig files left: ${listed(rejects)}`);
  const outside = rest.filter((p) => !c.allowed(p) && !rejects.includes(p));
  if (outside.length) problems.push(`changed paths it may not change: ${listed(outside)}`);
  return { changed, problems };
}

export interface FixerEdits {
  runKey: string;
  /** The commit the fixer's workspace was checked out at (its HEAD and index). */
  from: string;
  /** What the fixer may change. */
  allowed: (path: string) => boolean;
  /** The hidden tests' commit in the staging repository: their paths are off limits. */
  oracleSha?: string;
  /** Set when a round that changes nothing fails: the reason. */
  unchanged?: string;
  /** The commit the host makes of an accepted tree. */
  commit: { parents: string[]; message: string; at: number };
  /** The paths the diffstat of the result covers (all, when absent). */
  diffPaths?: string[];
}

/**
 * Brings a fixer's edits back and checks them; when they pass, the host commits their tree (on
 * `commit.parents`, shared with the run's next activities) and returns the commit and a diffstat
 * against `from`, else why they were refused.
 */
export async function acceptEdits(
  ws: Workspace,
  staging: StagingRepo,
  c: FixerEdits,
): Promise<{ sha: string; diffstat: string } | { problem: string }> {
  const back = await bringBack(ws, staging, { runKey: c.runKey, from: c.from });
  if ('problem' in back) return back;
  const { changed, problems } = await editProblems(staging.dir, {
    from: c.from,
    tree: back.tree,
    allowed: c.allowed,
    oraclePaths: await oraclePaths(staging.dir, c.oracleSha),
  });
  if (problems.length) return { problem: problems.join('; ') };
  if (c.unchanged && changed.length === 0) return { problem: c.unchanged };
  const sha = await commitTree(staging.dir, { tree: back.tree, ...c.commit });
  await staging.share(c.runKey, sha);
  return { sha, diffstat: await diffstat(staging.dir, c.from, sha, c.diffPaths) };
}

/**
 * What a test run committed or changed in its checkout of `sha`, in words (hidden test paths
 * left out, the rest redacted with `redact`, no file named when there are hidden tests);
 * undefined when nothing. `trace` is what was found after the run: where HEAD is (undefined when
 * git could not read it) and the paths that differ from `sha`.
 */
export function testRunChangesLine(
  trace: TestRunTrace,
  sha: string,
  oracles: string[],
  redact: (t: string) => string,
): string | undefined {
  const changed = trace.changed.filter((p) => p && !clashesWithOracle(p, oracles));
  const said: string[] = [];
  if (trace.head === undefined) said.push('the test run left the checkout unreadable by git');
  else if (trace.head !== sha)
    said.push(`the test run moved HEAD to ${trace.head.slice(0, 12)}: its commits were discarded`);
  // With hidden tests, the names a test process gives files could spell them out.
  if (changed.length)
    said.push(
      `the test run changed ${changed.length} file(s), discarded${oracles.length ? ' (names withheld: hidden tests took part)' : `: ${listed(changed)}`}`,
    );
  return said.length ? redact(said.join('; ')) : undefined;
}

/** What a test run did to its checkout, asked of git in the sandbox (a sandbox the host cannot read: E2B). */
export async function testRunChanges(ws: Workspace): Promise<TestRunTrace> {
  // Both commands whatever the first does: the exit code is the status's.
  const r = await ws.run(
    'set +e\ngit rev-parse HEAD; git -c core.quotepath=off status --porcelain --no-renames --untracked-files=all -z',
    { timeoutMs: 60_000 },
  );
  const [headLine, ...rest] = r.output.split('\n');
  const changed = rest
    .join('\n')
    .split('\0')
    .filter(Boolean)
    .map((e) => e.slice(3));
  return { head: r.exitCode === 0 ? headLine.trim() : undefined, changed };
}

/** Puts the checkout back at `sha` after a command ran in it (what it left untracked stays). */
export async function resetCheckout(ws: Workspace, sha: string, what: string): Promise<void> {
  await ws.script(`git reset -q --hard ${sh(sha)}`, what);
}

/**
 * After a test run: a local sandbox's checkout is left as the run left it, since the next checkout
 * (host-tree.ts) resets whatever differs and a sandbox that is not used again is destroyed; with
 * `hidden` tests, every untracked and ignored file goes at once (the hidden tests with them), by
 * the host. Elsewhere git in the sandbox puts the checkout back at `sha` and cleans it.
 */
export async function discardTestRun(ws: Workspace, sha: string, stagingDir: string, hidden: boolean): Promise<void> {
  if (ws.sb.host) {
    if (hidden) await cleanHostTree(ws.sb.host, stagingDir);
    return;
  }
  await ws.script(
    `git reset -q --hard ${sh(sha)} 2>/dev/null || true\ngit clean -ffdxq 2>/dev/null || true`,
    'cleaning up after the tests',
  );
}
