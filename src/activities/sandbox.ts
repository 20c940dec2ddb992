/** Sandbox lifecycle and workspace seeding. */
import { tail } from '../store/artifacts';
import { runRef } from '../git/staging';
import { SANDBOX_OBJECTS, acquireRunObjects, releaseRunObjects } from '../git/run-mirror';
import type { Isolation } from '../contracts/reports';
import type { Sandbox } from '../sandbox/types';
import { type ActivityDeps, type SandboxRef, openSandbox, runOfSandbox, sandboxOptions } from './deps';
import { type CommandReport, execTracked, runScript, sh } from './exec';

/** Written into .git when seeding completed; its presence means the workspace may hold progress. */
export const SEEDED_MARKER = '.git/flotilla-seeded';
/** The seed script's exit code when the workspace was seeded before. */
const EXIT_SEEDED = 87;

/**
 * How a sandbox gets the run's base commit: a script fragment to run right after `git init` in
 * its workspace, which leaves the commit's objects readable there. A local sandbox borrows them,
 * read-only, from its run's object store through git alternates (git/run-mirror.ts): no history is
 * copied. A cloud sandbox gets the commit alone, as a shallow repository, from a bundle uploaded
 * to its scratch directory now.
 */
export async function baseObjects(
  deps: ActivityDeps,
  sb: Sandbox,
  c: { sandboxKey: string; runKey: string; baseSha: string },
): Promise<string> {
  const staging = await deps.staging(c.runKey);
  const baseRef = runRef(c.runKey, 'base');
  if (sb.isolation === 'e2b') {
    const bundle = `${sb.scratch}/base.bundle`;
    await staging.withBundleFile(async (file) => {
      await staging.createShallowBundle(file, baseRef);
      await sb.copyIn(file, bundle);
    });
    return `echo ${sh(c.baseSha)} > .git/shallow
git fetch -q ${sh(bundle)} ${sh(`+${baseRef}:refs/flotilla/base`)}
rm -f ${sh(bundle)}`;
  }
  const objects = await acquireRunObjects(deps.dataDir, c.sandboxKey, staging.dir, baseRef);
  return `${lendObjects(sb, objects)}
git update-ref refs/flotilla/base ${sh(c.baseSha)}`;
}

/**
 * Points a local workspace's alternates at its run's store (where its sandbox sees it), so the
 * base's objects are there whatever the agent did to that file; empty for a cloud sandbox or a
 * run with no store here.
 */
export function lendObjects(sb: Sandbox, hostObjects: string | undefined): string {
  if (sb.isolation === 'e2b' || !hostObjects) return '';
  return `mkdir -p .git/objects/info && echo ${sh(sb.isolation === 'bubblewrap' ? SANDBOX_OBJECTS : hostObjects)} > .git/objects/info/alternates`;
}

export function sandboxActivities(deps: ActivityDeps) {
  return {
    /** Keyed: a retry, or a later attempt after a crash, gets the same sandbox back. */
    async provisionSandbox(ref: SandboxRef): Promise<{ isolation: Isolation }> {
      const sb = await deps.provider(ref).provision(ref.key, sandboxOptions(ref));
      return { isolation: sb.isolation };
    },

    /** Before a run starts: how its sandboxes would be isolated, or IsolationUnavailable when they would not be. */
    async checkIsolation(ref: SandboxRef): Promise<{ isolation: Isolation }> {
      return { isolation: deps.provider(ref).checkIsolation() };
    },

    /** The run's object store on this host goes with the last sandbox that used it. */
    async destroySandbox(ref: SandboxRef): Promise<void> {
      await deps.provider(ref).destroy(ref.key);
      await releaseRunObjects(deps.dataDir, ref.key);
    },

    /** While its worker is suspended, a cloud sandbox is paused (files kept, nothing billed). */
    async pauseSandbox(ref: SandboxRef): Promise<void> {
      await deps.provider(ref).pause?.(ref.key);
    },

    async resumeSandbox(ref: SandboxRef): Promise<void> {
      await deps.provider(ref).resume?.(ref.key);
    },

    /**
     * Checks out the run's base commit on `branch`. A workspace that was seeded before is left
     * exactly as it is, because it may already hold the worker's progress; only a seed that never
     * finished is wiped and redone.
     */
    async seedWorkspace(input: {
      sandbox: SandboxRef;
      runKey: string;
      baseSha: string;
      branch: string;
      /** Identity for commits made in this workspace. */
      author: string;
    }): Promise<{ reused: boolean }> {
      const sb = await openSandbox(deps, input.sandbox);
      const base = await baseObjects(deps, sb, {
        sandboxKey: input.sandbox.key,
        runKey: input.runKey,
        baseSha: input.baseSha,
      });
      // One command: the "seeded before?" check and the checkout (each command starts a sandbox).
      const r = await runScript(
        sb,
        `if [ -f ${SEEDED_MARKER} ]; then rm -f ${sh(`${sb.scratch}/base.bundle`)}; exit ${EXIT_SEEDED}; fi
find . -mindepth 1 -maxdepth 1 -exec rm -rf {} +
git init -q .
${base}
git checkout -q -b ${sh(input.branch)} ${sh(input.baseSha)}
git config user.name ${sh(input.author)}
git config user.email flotilla@localhost
git config commit.gpgsign false
touch ${SEEDED_MARKER}`,
      );
      if (r.exitCode === EXIT_SEEDED) return { reused: true };
      if (r.exitCode !== 0)
        throw new Error(
          `seeding the workspace failed (exit ${r.exitCode}${r.timedOut ? ', timed out' : ''}): ${tail(r.output, 1500)}`,
        );
      return { reused: false };
    },

    /** Runs a setup or test command in the workspace and reports its outcome by reference. */
    async runCommand(input: {
      sandbox: SandboxRef;
      command: string;
      timeoutMs: number;
      label: string;
    }): Promise<CommandReport> {
      const sb = await openSandbox(deps, input.sandbox);
      return execTracked(deps, sb, input.command, {
        timeoutMs: input.timeoutMs,
        label: input.label,
        run: runOfSandbox(input.sandbox),
      });
    },
  };
}
