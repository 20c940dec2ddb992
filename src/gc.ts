/**
 * Retention: `flotilla gc` removes what finished runs leave under the data directory — their
 * staging refs (refs/flotilla/<runKey>/...), their sandboxes, and artifacts — once they have been
 * closed longer than a threshold. Temporal is the only judge of "closed": a run it lists as open,
 * or a runKey it does not know (a run just started, another namespace, a visibility lag), keeps
 * everything. A candidate is confirmed with describe() (authoritative, unlike the list) before
 * anything of it is removed.
 *
 * Artifacts are content-addressed and shared: ArtifactStore.put skips content already stored, so
 * any run, even one started today, may name a file written long ago. Without reading every kept
 * run's history there is no safe per-run rule, so artifacts are pruned only when nothing is kept:
 * no open run, no run closed within the threshold, no unknown staging ref; then files older than
 * the threshold (by mtime) go.
 *
 * With a shared store (FLOTILLA_STAGING_URL) its refs count as well as this host's: a removed run's
 * refs go from both, and when nothing is kept the store's artifact refs go too (the store keeps no
 * dates; any artifact there belongs to a run that closed before the threshold, or to one Temporal
 * does not know, which is kept and so keeps them all). Sandboxes and artifact files are this host's.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { lstat, readdir, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { simpleGit } from 'simple-git';
import { stagingUrl } from './config';
import { StagingRepo } from './gitstore';
import { runKeyOf } from './spec';

export interface GcOptions {
  dataDir: string;
  olderThanMs: number;
  dryRun: boolean;
  now?: Date;
  /** The shared store's URL; by default FLOTILLA_STAGING_URL (none when unset). */
  stagingUrl?: string;
}

export interface GcReport {
  dryRun: boolean;
  /** Runs closed longer than the threshold: their refs and sandboxes are (or would be) removed. */
  removedRuns: { workflowId: string; runId: string; runKey: string; closedAt: string; refs: number; sandboxes: string[] }[];
  /** Runs whose state is kept, and why. */
  keptRuns: { runKey: string; workflowId?: string; reason: string }[];
  artifacts: { removed: number; kept: number; reason?: string };
  /** What is (or would be) removed from the shared store, when there is one. */
  sharedStore?: { refs: number; artifacts: number };
  freedBytes: number;
}

const UNITS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** "7d", "12h", "30m", "45s" or "0": milliseconds, or an error naming the option. */
export function parseAge(text: string): number {
  const m = /^(\d+)([smhd])?$/.exec(text.trim());
  if (!m || (!m[2] && m[1] !== '0')) throw new Error(`--older-than must be a whole number with a unit (s, m, h or d), such as 7d or 12h, or 0; not "${text}"`);
  return Number(m[1]) * UNITS[m[2] ?? 's'];
}

interface KnownRun {
  workflowId: string;
  runId: string;
  closedAt?: Date;
}

async function leaderRuns(client: Client): Promise<Map<string, KnownRun>> {
  const runs = new Map<string, KnownRun>();
  for await (const wf of client.workflow.list({ query: "WorkflowType = 'leaderWorkflow'" })) {
    const closedAt = wf.status.name === 'RUNNING' ? undefined : wf.closeTime;
    runs.set(runKeyOf(wf.workflowId, wf.runId), { workflowId: wf.workflowId, runId: wf.runId, closedAt });
  }
  return runs;
}

/** Confirms with the authoritative describe() that a run is closed, and since when. */
async function closedSince(client: Client, run: KnownRun): Promise<Date | undefined> {
  const d = await client.workflow.getHandle(run.workflowId, run.runId).describe().catch(() => undefined);
  return d && d.status.name !== 'RUNNING' ? d.closeTime : undefined;
}

/** Where the shared store keeps artifacts (see artifactRef): not a run. */
const ARTIFACT_REFS = 'refs/flotilla/artifacts/';

/** The runKey of every refs/flotilla/<runKey>/<name> ref here (and in the shared store), with its refs. */
async function stagingRefs(stagingDir: string, shared?: StagingRepo): Promise<Map<string, string[]>> {
  const byKey = new Map<string, Set<string>>();
  const local = existsSync(path.join(stagingDir, 'HEAD'))
    ? (await simpleGit({ baseDir: stagingDir }).raw(['for-each-ref', '--format=%(refname)', 'refs/flotilla/'])).split('\n')
    : [];
  for (const ref of [...local, ...(shared ? await shared.sharedRefs('refs/flotilla/') : [])]) {
    const m = /^refs\/flotilla\/([^/]+)\/.+$/.exec(ref);
    if (m && !ref.startsWith(ARTIFACT_REFS)) byKey.set(m[1], (byKey.get(m[1]) ?? new Set()).add(ref));
  }
  return new Map([...byKey].map(([key, refs]) => [key, [...refs]]));
}

async function sizeOf(file: string): Promise<number> {
  const s = await lstat(file).catch(() => undefined);
  if (!s) return 0;
  if (!s.isDirectory()) return s.size;
  let total = 0;
  for (const name of await readdir(file).catch(() => [] as string[])) total += await sizeOf(path.join(file, name));
  return total;
}

async function list(dir: string): Promise<string[]> {
  return existsSync(dir) ? readdir(dir) : [];
}

/** The run a sandbox belongs to: the longest runKey that prefixes its name (keys can prefix keys). */
function ownerOf(sandbox: string, keys: string[]): string | undefined {
  return keys.filter((k) => sandbox === k || sandbox.startsWith(`${k}-`)).sort((a, b) => b.length - a.length)[0];
}

export async function collectGarbage(client: Client, o: GcOptions): Promise<GcReport> {
  const now = (o.now ?? new Date()).getTime();
  const stagingDir = path.join(o.dataDir, 'staging.git');
  const sandboxDir = path.join(o.dataDir, 'sandboxes');
  const artifactDir = path.join(o.dataDir, 'artifacts');
  const url = 'stagingUrl' in o ? o.stagingUrl : stagingUrl();
  const shared = url ? await StagingRepo.open(o.dataDir, url) : undefined;
  const runs = await leaderRuns(client);
  const refs = await stagingRefs(stagingDir, shared);
  const sandboxes = await list(sandboxDir);
  const report: GcReport = { dryRun: o.dryRun, removedRuns: [], keptRuns: [], artifacts: { removed: 0, kept: 0 }, freedBytes: 0 };

  const keys = [...new Set([...refs.keys(), ...sandboxes.map((s) => ownerOf(s, [...runs.keys(), ...refs.keys()]) ?? s)])];
  const removable = new Set<string>();
  for (const key of keys) {
    const run = runs.get(key);
    if (!run) {
      report.keptRuns.push({ runKey: key, reason: 'Temporal lists no leader run with this key; kept to be safe' });
      continue;
    }
    const closedAt = run.closedAt && (await closedSince(client, run));
    if (!closedAt) report.keptRuns.push({ runKey: key, workflowId: run.workflowId, reason: 'open' });
    else if (now - closedAt.getTime() < o.olderThanMs) report.keptRuns.push({ runKey: key, workflowId: run.workflowId, reason: `closed ${closedAt.toISOString()}, within the threshold` });
    else {
      removable.add(key);
      const own = sandboxes.filter((s) => ownerOf(s, keys) === key);
      report.removedRuns.push({ workflowId: run.workflowId, runId: run.runId, runKey: key, closedAt: closedAt.toISOString(), refs: refs.get(key)?.length ?? 0, sandboxes: own });
    }
  }

  const stagingBefore = await sizeOf(stagingDir);
  const doomedRefs = [...removable].flatMap((k) => refs.get(k) ?? []);
  const doomedSandboxes = report.removedRuns.flatMap((r) => r.sandboxes.map((s) => path.join(sandboxDir, s)));
  const doomedArtifacts = await oldArtifacts(artifactDir, now - o.olderThanMs, report);
  const doomedShared = shared && report.keptRuns.length === 0 ? await shared.sharedRefs(ARTIFACT_REFS) : [];
  if (shared) report.sharedStore = { refs: doomedRefs.length, artifacts: doomedShared.length };
  for (const file of [...doomedSandboxes, ...doomedArtifacts]) report.freedBytes += await sizeOf(file);
  if (o.dryRun) return report;

  // Refs go in one transaction (and one push per thousand); then reflogs and unreachable objects, so their space comes back.
  if (shared) await shared.deleteRefs([...doomedRefs, ...doomedShared]);
  else if (doomedRefs.length > 0) deleteRefs(stagingDir, doomedRefs);
  if (doomedRefs.length > 0) {
    const git = simpleGit({ baseDir: stagingDir });
    await git.raw(['reflog', 'expire', '--expire=now', '--all']);
    await git.raw(['gc', '--quiet', '--prune=now']);
    report.freedBytes += Math.max(0, stagingBefore - (await sizeOf(stagingDir)));
  }
  for (const file of [...doomedSandboxes, ...doomedArtifacts]) await rm(file, { recursive: true, force: true });
  return report;
}

function deleteRefs(stagingDir: string, doomed: string[]): void {
  const r = spawnSync('git', ['update-ref', '--stdin'], { cwd: stagingDir, input: doomed.map((ref) => `delete ${ref}\n`).join('') });
  if (r.status !== 0) throw new Error(`git update-ref failed in ${stagingDir}: ${r.stderr.toString().trim()}`);
}

/** Artifact files older than `cutoff`, if nothing is kept (see the module comment). */
async function oldArtifacts(dir: string, cutoff: number, report: GcReport): Promise<string[]> {
  const files = (await list(dir)).filter((n) => /^[0-9a-f]{64}\.log$/.test(n)).map((n) => path.join(dir, n));
  if (report.keptRuns.length > 0) {
    report.artifacts = { removed: 0, kept: files.length, reason: `${report.keptRuns.length} run(s) kept; a kept run may name any artifact` };
    return [];
  }
  const doomed: string[] = [];
  for (const file of files) {
    const s = await stat(file).catch(() => undefined);
    if (s && s.mtimeMs <= cutoff) doomed.push(file);
  }
  report.artifacts = { removed: doomed.length, kept: files.length - doomed.length };
  return doomed;
}

/** The lines `flotilla gc` prints. */
export function formatGc(r: GcReport): string {
  const verb = r.dryRun ? 'would remove' : 'removed';
  const lines = r.removedRuns.map((x) => `${verb} ${x.workflowId} (closed ${x.closedAt}): ${x.refs} staging ref(s), ${x.sandboxes.length} sandbox(es)`);
  for (const k of r.keptRuns) lines.push(`kept ${k.workflowId ?? k.runKey}: ${k.reason}`);
  lines.push(`artifacts: ${verb} ${r.artifacts.removed}, kept ${r.artifacts.kept}${r.artifacts.reason ? ` (${r.artifacts.reason})` : ''}`);
  if (r.sharedStore) lines.push(`shared store: ${verb} ${r.sharedStore.refs} staging ref(s) and ${r.sharedStore.artifacts} artifact(s)`);
  lines.push(`${r.dryRun ? 'would free' : 'freed'} ${(r.freedBytes / 1024).toFixed(1)} KiB`);
  return lines.join('\n');
}
