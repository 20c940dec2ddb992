/** Sandbox lifecycle and workspace seeding. */
import { runRef } from '../gitstore';
import type { Isolation } from '../spec';
import { type ActivityDeps, type SandboxRef, openSandbox, sandboxOptions } from './deps';
import { type CommandReport, execTracked, script, sh } from './exec';

/** Written into .git when seeding completed; its presence means the workspace may hold progress. */
export const SEEDED_MARKER = '.git/flotilla-seeded';

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

    async destroySandbox(ref: SandboxRef): Promise<void> {
      await deps.provider(ref).destroy(ref.key);
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
      const probe = await sb.exec(`test -f ${SEEDED_MARKER}`, { timeoutMs: 30_000 });
      if (probe.exitCode === 0) return { reused: true };
      const staging = await deps.staging(input.runKey);
      const baseRef = runRef(input.runKey, 'base');
      const bundle = `${sb.scratch}/base.bundle`;
      await sb.writeFile(bundle, await staging.createBundle(baseRef));
      await script(
        sb,
        `find . -mindepth 1 -maxdepth 1 -exec rm -rf {} +
git init -q .
git fetch -q ${sh(bundle)} ${sh(`${baseRef}:refs/flotilla/base`)}
git checkout -q -b ${sh(input.branch)} ${sh(input.baseSha)}
git config user.name ${sh(input.author)}
git config user.email flotilla@localhost
git config commit.gpgsign false
rm -f ${sh(bundle)}
touch ${SEEDED_MARKER}`,
        'seeding the workspace',
      );
      return { reused: false };
    },

    /** Runs a setup or test command in the workspace and reports its outcome by reference. */
    async runCommand(input: { sandbox: SandboxRef; command: string; timeoutMs: number; label: string }): Promise<CommandReport> {
      const sb = await openSandbox(deps, input.sandbox);
      return execTracked(deps, sb, input.command, { timeoutMs: input.timeoutMs, label: input.label });
    },
  };
}
