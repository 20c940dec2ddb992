/**
 * Retention: `flotilla gc` removes what finished runs leave under the data directory — their
 * staging refs (refs/flotilla/<runKey>/...), their sandboxes, and artifacts — once they have been
 * closed longer than a threshold. Temporal is the only judge of "closed": a run it lists as open,
 * or a runKey it does not know (a run just started, another namespace, a visibility lag), keeps
 * everything. A candidate is confirmed with describe() (authoritative, unlike the list) before
 * anything of it is removed.
 *
 * Artifacts are content-addressed and shared: a run, even one started today, may store a log
 * whose content another run stored long ago. So each run that stores an artifact claims it
 * (ArtifactStore.claim), and an artifact goes once every run that claimed it is removed here.
 * Artifacts no run claimed (stored before claims existed) are pruned only when nothing is kept:
 * no open run, no run closed within the threshold, no unknown run; then files older than the
 * threshold (by mtime) go.
 *
 * The worker runs this every hour when FLOTILLA_RETENTION is set (startRetention).
 *
 * With a shared store (FLOTILLA_STAGING_URL) its refs count as well as this host's: a removed run's
 * refs go from both, and when nothing is kept the store's artifact refs go too (the store keeps no
 * dates and claims are this host's: any artifact there belongs to a run that closed before the
 * threshold, or to one Temporal does not know, which is kept and so keeps them all). Sandboxes and
 * artifact files are this host's.
 */
import { existsSync } from 'node:fs';
import { lstat, readdir, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { ArtifactStore } from '../store/artifacts';
import { ConfigError, setting, stagingUrl } from '../config/settings';
import { checkpointRecordsOf } from '../git/checkpoint-packs';
import { StagingRepo, compact, deleteLocalRefs, listRefs, stagingDirOf } from '../git/staging';
import { runKeyOf } from '../contracts/names';

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
  removedRuns: {
    workflowId: string;
    runId: string;
    runKey: string;
    closedAt: string;
    refs: number;
    sandboxes: string[];
    artifacts?: number;
  }[];
  /** Runs whose state is kept, and why. */
  keptRuns: { runKey: string; workflowId?: string; reason: string }[];
  artifacts: { removed: number; kept: number; reason?: string };
  /** What is (or would be) removed from the shared store, when there is one. */
  sharedStore?: { refs: number; artifacts: number };
  freedBytes: number;
}

interface KnownRun {
  workflowId: string;
  runId: string;
  closedAt?: Date;
}

async function leaderRuns(client: Client): Promise<Map<string, KnownRun>> {
  const runs = new Map<string, KnownRun>();
  for await (const wf of client.workflow.list({ query: "WorkflowType = 'leaderWorkflow'" })) {
    // The runs of a chain that rolled over share their first run's key: it is open while any of them
    // is, and closed once the last closed (a chain's earlier runs closed as they continued as new).
    const key = runKeyOf(wf.workflowId, wf.raw.firstRunId || wf.runId);
    const closedAt = wf.status.name === 'RUNNING' ? undefined : wf.closeTime;
    const known = runs.get(key);
    if (known && (!known.closedAt || (closedAt && known.closedAt > closedAt))) continue;
    runs.set(key, { workflowId: wf.workflowId, runId: wf.runId, closedAt });
  }
  return runs;
}

/**
 * Confirms with the authoritative describe() that a run is closed, and since when. A run that
 * rolled over (closed as continued-as-new) goes on in its workflow id's latest history, which
 * keeps its key: it is closed once that one is.
 */
async function closedSince(client: Client, run: KnownRun): Promise<Date | undefined> {
  const describe = (runId?: string) =>
    client.workflow
      .getHandle(run.workflowId, runId)
      .describe()
      .catch(() => undefined);
  let d = await describe(run.runId);
  if (d?.status.name === 'CONTINUED_AS_NEW') d = await describe();
  return d && d.status.name !== 'RUNNING' && d.status.name !== 'CONTINUED_AS_NEW' ? d.closeTime : undefined;
}

/** Where the shared store keeps artifacts (see artifactRef): not a run. */
const ARTIFACT_REFS = 'refs/flotilla/artifacts/';

/** The runKey of every refs/flotilla/<runKey>/<name> ref here (and in the shared store), with its refs. */
async function stagingRefs(stagingDir: string, shared?: StagingRepo): Promise<Map<string, string[]>> {
  const local = existsSync(path.join(stagingDir, 'HEAD')) ? await listRefs(stagingDir, 'refs/flotilla/') : [];
  return byRun([...local, ...(shared ? await shared.sharedRefs('refs/flotilla/') : [])]);
}

function byRun(refs: string[]): Map<string, string[]> {
  const byKey = new Map<string, Set<string>>();
  for (const ref of refs) {
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

/**
 * A local sandbox's directory name after its run's key (LocalSandboxProvider.dirFor: the key
 * `<runKey>/<role>` with "/" as "_", cut at 80 characters, then "-" and a hash): what follows
 * "<runKey>_" is one of the roles the workflows give sandboxes.
 */
const ROLE_AND_HASH = /^(?:worker_.*|planner.*|integration.*)-[0-9a-f]{10}$/;

/** The run a sandbox belongs to: the longest key that its name starts with, followed by a role (keys can prefix keys). */
function ownerOf(sandbox: string, keys: string[]): string | undefined {
  return keys
    .filter((k) => sandbox.startsWith(`${k}_`) && ROLE_AND_HASH.test(sandbox.slice(k.length + 1)))
    .sort((a, b) => b.length - a.length)[0];
}

/** What the data directory and the shared store hold, by run, and what Temporal knows of the runs. */
interface Found {
  stagingDir: string;
  sandboxDir: string;
  runObjectsDir: string;
  shared?: StagingRepo;
  runs: Map<string, KnownRun>;
  refs: Map<string, string[]>;
  sandboxes: string[];
  artifacts: ArtifactStore;
  claims: Map<string, Set<string>>;
}

/** Temporal's runs are listed first: a run started after that has refs it did not list, and is kept. */
async function survey(client: Client, o: GcOptions): Promise<Found> {
  const stagingDir = stagingDirOf(o.dataDir);
  const sandboxDir = path.join(o.dataDir, 'sandboxes');
  const url = 'stagingUrl' in o ? o.stagingUrl : stagingUrl();
  const shared = url ? await StagingRepo.open(o.dataDir, url) : undefined;
  const runs = await leaderRuns(client);
  const refs = await stagingRefs(stagingDir, shared);
  const sandboxes = await list(sandboxDir);
  const artifacts = new ArtifactStore(path.join(o.dataDir, 'artifacts'));
  const claims = await artifacts.claims();
  const runObjectsDir = path.join(o.dataDir, 'run-objects');
  return { stagingDir, sandboxDir, runObjectsDir, shared, runs, refs, sandboxes, artifacts, claims };
}

/**
 * Sorts every run that left something here into the report: kept (open, closed within the
 * threshold, or unknown to Temporal) or removed (closed longer ago, confirmed by describe()).
 * Returns the run keys of the removed ones.
 */
async function judgeRuns(client: Client, f: Found, o: GcOptions, now: number, report: GcReport): Promise<Set<string>> {
  const keys = [
    ...new Set([
      ...f.refs.keys(),
      ...f.claims.keys(),
      ...f.sandboxes.map((s) => ownerOf(s, [...f.runs.keys(), ...f.refs.keys()]) ?? s),
    ]),
  ];
  const removable = new Set<string>();
  for (const key of keys) {
    const run = f.runs.get(key);
    if (!run) {
      report.keptRuns.push({ runKey: key, reason: 'Temporal lists no leader run with this key; kept to be safe' });
      continue;
    }
    const closedAt = run.closedAt && (await closedSince(client, run));
    if (!closedAt) report.keptRuns.push({ runKey: key, workflowId: run.workflowId, reason: 'open' });
    else if (now - closedAt.getTime() < o.olderThanMs)
      report.keptRuns.push({
        runKey: key,
        workflowId: run.workflowId,
        reason: `closed ${closedAt.toISOString()}, within the threshold`,
      });
    else {
      removable.add(key);
      report.removedRuns.push({
        workflowId: run.workflowId,
        runId: run.runId,
        runKey: key,
        closedAt: closedAt.toISOString(),
        refs: f.refs.get(key)?.length ?? 0,
        sandboxes: f.sandboxes.filter((s) => ownerOf(s, keys) === key),
        artifacts: f.claims.get(key)?.size ?? 0,
      });
    }
  }
  return removable;
}

/** What goes with the removed runs. */
interface Doomed {
  refs: string[];
  /** Sandbox directories, run mirrors and checkpoint records. */
  dirs: string[];
  artifacts: string[];
  /** The shared store's artifact refs, when no run is kept. */
  sharedArtifacts: string[];
  stagingBytes: number;
}

/** Lists what removing `removable` takes and counts it into the report (the bytes, the shared store's share). */
async function doom(f: Found, removable: Set<string>, cutoff: number, report: GcReport): Promise<Doomed> {
  const stagingBytes = await sizeOf(f.stagingDir);
  const refs = [...removable].flatMap((k) => f.refs.get(k) ?? []);
  const sandboxes = report.removedRuns.flatMap((r) => r.sandboxes.map((s) => path.join(f.sandboxDir, s)));
  // A run mirror (src/git/run-mirror.ts) normally went as its run ended; not on a host the run's
  // end could not reach (and `.users`, what an earlier release kept beside it).
  const mirrors = [...removable].flatMap((k) => [`${k}.git`, `${k}.users`].map((n) => path.join(f.runObjectsDir, n)));
  // What this host recorded of the run's checkpoints' packs (those packs go with the compaction).
  const records = [...removable].map((k) => checkpointRecordsOf(f.stagingDir, k));
  const artifacts = await unclaimedArtifacts(f.artifacts, f.claims, removable, cutoff, report);
  for (const file of [...sandboxes, ...mirrors, ...artifacts.map((hex) => f.artifacts.pathOf(`sha256:${hex}`))])
    report.freedBytes += await sizeOf(file);
  const sharedArtifacts = f.shared && report.keptRuns.length === 0 ? await f.shared.sharedRefs(ARTIFACT_REFS) : [];
  if (f.shared) report.sharedStore = { refs: refs.length, artifacts: sharedArtifacts.length };
  return { refs, dirs: [...sandboxes, ...mirrors, ...records], artifacts, sharedArtifacts, stagingBytes };
}

/** Removes what `doom` listed. */
async function remove(f: Found, removable: Set<string>, d: Doomed, report: GcReport): Promise<void> {
  // Refs go in one transaction (and one push per thousand); then reflogs and unreachable objects, so their space comes back.
  if (f.shared) await f.shared.deleteRefs([...d.refs, ...(await stillUnclaimed(f.shared, f.refs, d.sharedArtifacts))]);
  else if (d.refs.length > 0) await deleteLocalRefs(f.stagingDir, d.refs);
  if (d.refs.length > 0) {
    await compact(f.stagingDir);
    report.freedBytes += Math.max(0, d.stagingBytes - (await sizeOf(f.stagingDir)));
  }
  for (const dir of d.dirs) await rm(dir, { recursive: true, force: true });
  // The store re-reads the claims before it removes: a run may have claimed one since.
  const pruned = await f.artifacts.prune(d.artifacts, removable);
  report.artifacts = {
    ...report.artifacts,
    removed: pruned.removed,
    kept: report.artifacts.kept + d.artifacts.length - pruned.removed,
  };
}

export async function collectGarbage(client: Client, o: GcOptions): Promise<GcReport> {
  const now = (o.now ?? new Date()).getTime();
  const found = await survey(client, o);
  const report: GcReport = {
    dryRun: o.dryRun,
    removedRuns: [],
    keptRuns: [],
    artifacts: { removed: 0, kept: 0 },
    freedBytes: 0,
  };
  const removable = await judgeRuns(client, found, o, now, report);
  const doomed = await doom(found, removable, now - o.olderThanMs, report);
  if (!o.dryRun) await remove(found, removable, doomed, report);
  return report;
}

/**
 * `artifacts` (listed when no run was kept), unless a run has appeared in the shared store since
 * gc listed it: every run has its base ref before it writes a log, so a new one may have named any
 * of them, and they all stay.
 */
async function stillUnclaimed(
  shared: StagingRepo,
  listed: Map<string, string[]>,
  artifacts: string[],
): Promise<string[]> {
  if (artifacts.length === 0) return [];
  const now = byRun(await shared.sharedRefs('refs/flotilla/'));
  return [...now.keys()].every((key) => listed.has(key)) ? artifacts : [];
}

/**
 * The artifacts that can go: those claimed only by removed runs, and, if nothing is kept, those
 * no run claimed that are older than `cutoff` (see the module comment).
 */
async function unclaimedArtifacts(
  store: ArtifactStore,
  claims: Map<string, Set<string>>,
  removed: Set<string>,
  cutoff: number,
  report: GcReport,
): Promise<string[]> {
  const stored = await store.stored();
  const keptClaims = new Set([...claims].filter(([k]) => !removed.has(k)).flatMap(([, hexes]) => [...hexes]));
  const removedClaims = new Set([...claims].filter(([k]) => removed.has(k)).flatMap(([, hexes]) => [...hexes]));
  const doomed = stored.filter((hex) => removedClaims.has(hex) && !keptClaims.has(hex));
  const unclaimed = stored.filter((hex) => !removedClaims.has(hex) && !keptClaims.has(hex));
  let reason: string | undefined;
  if (unclaimed.length > 0 && report.keptRuns.length > 0) {
    reason = `${unclaimed.length} artifact(s) no run claimed, kept while ${report.keptRuns.length} run(s) are: a kept run may name them`;
  } else {
    for (const hex of unclaimed) {
      const s = await stat(store.pathOf(`sha256:${hex}`)).catch(() => undefined);
      if (s && s.mtimeMs <= cutoff) doomed.push(hex);
    }
  }
  report.artifacts = { removed: doomed.length, kept: stored.length - doomed.length, ...(reason ? { reason } : {}) };
  return doomed;
}

/** The lines `flotilla gc` prints. */
export function formatGc(r: GcReport): string {
  const verb = r.dryRun ? 'would remove' : 'removed';
  const lines = r.removedRuns.map(
    (x) =>
      `${verb} ${x.workflowId} (closed ${x.closedAt}): ${x.refs} staging ref(s), ${x.sandboxes.length} sandbox(es), ${x.artifacts ?? 0} artifact claim(s)`,
  );
  for (const k of r.keptRuns) lines.push(`kept ${k.workflowId ?? k.runKey}: ${k.reason}`);
  lines.push(
    `artifacts: ${verb} ${r.artifacts.removed}, kept ${r.artifacts.kept}${r.artifacts.reason ? ` (${r.artifacts.reason})` : ''}`,
  );
  if (r.sharedStore)
    lines.push(`shared store: ${verb} ${r.sharedStore.refs} staging ref(s) and ${r.sharedStore.artifacts} artifact(s)`);
  lines.push(`${r.dryRun ? 'would free' : 'freed'} ${(r.freedBytes / 1024).toFixed(1)} KiB`);
  return lines.join('\n');
}

// --- The automatic policy: the worker runs gc itself -------------------------------------------

export interface RetentionPolicy {
  /** FLOTILLA_RETENTION, as given: runs closed longer than this lose their state. */
  setting: string;
  olderThanMs: number;
  /** How often the worker collects (FLOTILLA_RETENTION_INTERVAL, default an hour). */
  everyMs: number;
}

/** The worker's retention policy from the environment; undefined (off) without FLOTILLA_RETENTION. */
export function retentionPolicy(env: NodeJS.ProcessEnv = process.env): RetentionPolicy | undefined {
  const retention = setting('FLOTILLA_RETENTION', env);
  if (!retention) return undefined;
  return {
    setting: retention.text,
    olderThanMs: retention.ms,
    everyMs: setting('FLOTILLA_RETENTION_INTERVAL', env)?.ms ?? 3_600_000,
  };
}

/**
 * Temporal forgets a closed run after its namespace's retention, and gc keeps what Temporal cannot
 * vouch for: a policy at least that long would never remove anything. Refused, naming both.
 */
export async function checkRetention(client: Client, namespace: string, policy: RetentionPolicy): Promise<void> {
  const described = await client.workflowService.describeNamespace({ namespace });
  const ttl = described.config?.workflowExecutionRetentionTtl;
  const ttlMs = ttl ? Number(ttl.seconds ?? 0) * 1000 + Math.floor((ttl.nanos ?? 0) / 1e6) : 0;
  if (ttlMs > 0 && policy.olderThanMs >= ttlMs) {
    const hours = `${+(ttlMs / 3_600_000).toFixed(1)}h`;
    throw new ConfigError(
      `FLOTILLA_RETENTION=${policy.setting} is not shorter than the retention of namespace "${namespace}" (${hours}): Temporal forgets a closed run ` +
        `after ${hours}, and gc never removes what it cannot confirm is closed. Set FLOTILLA_RETENTION below ${hours}, or raise the namespace's retention`,
    );
  }
}

interface RetentionLog {
  info(line: string): void;
  debug(line: string): void;
  warn(line: string): void;
}

/**
 * Runs gc now (once the caller's worker has started polling) and then every `policy.everyMs`,
 * on this host's data directory: each host prunes its own sandboxes. One line says what went; a
 * failure is logged and the next pass tries again, the worker goes on.
 */
export function startRetention(
  client: Client,
  dataDir: string,
  policy: RetentionPolicy,
  log: RetentionLog,
): { stop(): Promise<void> } {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let pass = Promise.resolve();
  const collect = async () => {
    try {
      const r = await collectGarbage(client, { dataDir, olderThanMs: policy.olderThanMs, dryRun: false });
      if (r.removedRuns.length || r.artifacts.removed) log.info(retentionLine(r, policy.setting));
      else log.debug(`retention: nothing to remove (${r.keptRuns.length} run(s) kept)`);
    } catch (err) {
      log.warn(
        `retention: gc failed, tried again in ${Math.round(policy.everyMs / 1000)}s: ${err instanceof Error ? err.message : String(err)}`,
      );
    }
    if (!stopped) timer = setTimeout(() => (pass = collect()), policy.everyMs);
  };
  // Deferred, so the caller's worker is polling before the first pass spawns git.
  timer = setTimeout(() => (pass = collect()), 0);
  return {
    stop: async () => {
      stopped = true;
      clearTimeout(timer);
      await pass;
    },
  };
}

function retentionLine(r: GcReport, setting: string): string {
  const sum = (f: (x: GcReport['removedRuns'][number]) => number) => r.removedRuns.reduce((n, x) => n + f(x), 0);
  return (
    `retention (runs closed over ${setting}): removed ${r.removedRuns.length} run(s): ${sum((x) => x.refs)} staging ref(s), ` +
    `${sum((x) => x.sandboxes.length)} sandbox(es), ${r.artifacts.removed} artifact(s); freed ${(r.freedBytes / 1024).toFixed(1)} KiB`
  );
}
