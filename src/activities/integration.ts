/**
 * Integration on the host: the hidden tests fetched, the sub-tasks' commits merged in the staging
 * repository (src/git/merge.ts), integrated commits recorded, and a redone sub-task's workspace
 * moved onto the integration head. The test gate is in tests.ts, the fixers in fixers.ts.
 */
import { permanent } from '../contracts/failures';
import { type MergeRun, type SubTaskHead, changedPaths, diffstat, linesChanged, mergeWorkers } from '../git/merge';
import { filesAtOraclePaths, oraclePaths, readOracles } from '../git/oracle';
import { scrubSecrets } from '../git/remote';
import { type SubTaskSeed, isOnSeed, moveOntoSeed } from '../git/seeding';
import { runKeyOfRef, runRef } from '../git/staging';
import { redact } from '../store/secrets';
import { type ActivityDeps, type SandboxRef, openWorkspace } from './deps';

export type { MergeRun, SubTaskHead, SubTaskSeed };
export type { TestRun } from './tests';
export type { FixerRound } from './fixers';

/** The merges, and what a sub-task that builds on the integration head is given. */
export function integrateActivities(deps: ActivityDeps) {
  return {
    ...oracleActivities(deps),

    /**
     * Merges the sub-tasks in order onto `into`, in the staging repository (see mergeWorkers in
     * src/git/merge.ts); stops at the first conflict. A retry recomputes the same commits. With
     * `name`, a clean merge is also named `refs/flotilla/<run>/<name>` (a living plan's
     * integration head), saving the activity that would name it. With `measure`, a clean merge
     * also says how many lines it changes on `into` (a best-of-N candidate's size).
     */
    async mergeWorkers(input: {
      runKey: string;
      baseSha: string;
      into: string;
      workers: SubTaskHead[];
      at: number;
      name?: string;
      measure?: boolean;
    }): Promise<MergeRun & { ref?: string; linesChanged?: number }> {
      const staging = await deps.staging(input.runKey);
      const merged = await mergeWorkers(staging.dir, input);
      if (merged.sha !== input.into) await staging.share(input.runKey, merged.sha);
      if (merged.status !== 'merged') return merged;
      const size = input.measure ? { linesChanged: await linesChanged(staging.dir, input.into, merged.sha) } : {};
      if (!input.name) return { ...merged, ...size };
      const ref = runRef(input.runKey, input.name);
      await staging.setRef(ref, merged.sha);
      return { ...merged, ref, ...size };
    },

    /**
     * The files that changed from `from` to `to` (a sub-task's seed and its head), the first
     * `max` of them, for the prompt of a sub-task that builds on it.
     */
    async changedFiles(input: {
      runKey: string;
      from: string;
      to: string;
      max: number;
    }): Promise<{ files: string[]; count: number }> {
      const staging = await deps.staging(input.runKey);
      const all = await changedPaths(staging.dir, input.from, input.to);
      return { files: all.slice(0, input.max).map((p) => redact(p)), count: all.length };
    },

    /**
     * Moves a freshly seeded sub-task workspace onto `seed`, so a redone sub-task starts from the
     * integrated tree. A workspace already there (or past it) is left alone.
     */
    async checkoutSeed(input: { sandbox: SandboxRef; baseSha: string; seed: SubTaskSeed }): Promise<void> {
      const ws = await openWorkspace(deps, input.sandbox);
      if (await isOnSeed(ws, input.seed.sha)) return;
      await moveOntoSeed(ws, await deps.staging(runKeyOfRef(input.seed.ref)), input);
    },
  };
}

/** The hidden tests: fetched where no agent sees them, and kept out of every tree that is recorded. */
function oracleActivities(deps: ActivityDeps) {
  return {
    /**
     * Fetches the hidden tests into the staging repository. History learns only the commit and
     * how many files it has; their names and contents stay on the host.
     */
    async fetchOracle(input: { runKey: string; url: string; ref: string }): Promise<{ sha: string; count: number }> {
      const staging = await deps.staging(input.runKey);
      let sha: string;
      try {
        sha = await staging.fetchBranch(input.url, input.ref, runRef(input.runKey, 'oracle'));
      } catch (err) {
        const why = scrubSecrets(err instanceof Error ? err.message : String(err))
          .split('\n')[0]
          .slice(0, 300);
        throw permanent(
          'RemoteRefused',
          `cannot fetch the hidden tests (oracle.ref ${input.ref} of oracle.repo): ${why}`,
        );
      }
      return { sha, count: (await readOracles(staging.dir, sha)).length };
    },

    /**
     * Names an integration commit `refs/flotilla/<run>/<name>` for a redone sub-task or the push;
     * returns a diffstat against the base for the people who approve it. A tree with a file at a
     * hidden test path is never recorded.
     */
    async recordIntegrated(input: {
      runKey: string;
      baseSha: string;
      sha: string;
      name: string;
      oracleSha?: string;
    }): Promise<{ sha: string; ref: string; diffstat: string }> {
      const staging = await deps.staging(input.runKey);
      const oracles = await oraclePaths(staging.dir, input.oracleSha);
      const clash = oracles.length ? await filesAtOraclePaths(staging.dir, input.sha, oracles) : 0;
      if (clash)
        throw permanent(
          'OracleExposed',
          `refusing to record the integrated tree: ${clash} of its files are at hidden test paths`,
        );
      const ref = runRef(input.runKey, input.name);
      await staging.setRef(ref, input.sha);
      return { sha: input.sha, ref, diffstat: await diffstat(staging.dir, input.baseSha, input.sha) };
    },
  };
}
