/** Running a sub-task's agent and collecting what it did. */
import { CI_FIX_FILE } from '../contracts/checks';
import { CommitPolicy } from '../contracts/request';
import { type CollectedWork, bundleWork, importWork, noCommits } from '../git/collect';
import { type ActivityDeps, type SandboxRef, openSandbox, openWorkspace, runOfSandbox } from './deps';
import { readMapping } from './ci-fix';
import { type AgentRunInput, type AgentRunReport, runHarness } from './invocation';

/** How long looking at a CI-fix agent's mapping file in its sandbox may take. */
const MAPPING_LOOK_MS = 30_000;

export type { AgentRunReport } from './invocation';

export function agentActivities(deps: ActivityDeps) {
  return {
    /** One invocation of a sub-task's agent in its sandbox. */
    async runAgent(input: AgentRunInput & { sandbox: SandboxRef }): Promise<AgentRunReport> {
      const sb = await openSandbox(deps, input.sandbox);
      const run = runOfSandbox(input.sandbox);
      if (!input.ciFix) return runHarness(deps, sb, input, run, input.sandbox.key);
      // A CI-fix round's agent says what it did about each check in a file the host then validates.
      const file = `${sb.scratch}/${CI_FIX_FILE}`;
      const extraEnv = { ...input.extraEnv, FLOTILLA_CI_FIX_FILE: file };
      const report = await runHarness(deps, sb, { ...input, extraEnv }, run, input.sandbox.key);
      return { ...report, ciFix: await readMapping(sb, file, input.ciFix.checks, MAPPING_LOOK_MS) };
    },

    /**
     * Collects the sub-task's commits into the staging repository, checked there (see
     * src/git/collect.ts). Work that cannot be collected is a permanent failure saying why. Safe
     * to repeat.
     */
    async collectWork(input: {
      sandbox: SandboxRef;
      runKey: string;
      workerId: string;
      baseSha: string;
      /** The sub-task's ownedPaths plus the request's sharedPaths. */
      allowedPaths: string[];
      /** The request's policy; runs started before it existed get the defaults. */
      policy?: Partial<CommitPolicy>;
    }): Promise<CollectedWork> {
      const work = { ...input, sandboxKey: input.sandbox.key, policy: CommitPolicy.parse(input.policy ?? {}) };
      const ws = await openWorkspace(deps, input.sandbox);
      const bundle = await bundleWork(ws, deps.dataDir, work);
      if (!bundle) return noCommits(input.baseSha);
      return importWork(ws, await deps.staging(input.runKey), work, bundle);
    },
  };
}
