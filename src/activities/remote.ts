/** The only activities that talk to the user's remote; they run on the host, never in a sandbox. */
import { ApplicationFailure, Context } from '@temporalio/activity';
import { permanent } from '../contracts/failures';
import { type PushOutcome, scrubSecrets } from '../git/remote';
import { runRef } from '../git/staging';
import { runKeyOf } from '../contracts/names';
import type { ActivityDeps } from './deps';

export function remoteActivities(deps: ActivityDeps) {
  return {
    /**
     * Fetches the base branch into the staging repository and notes where the target branch is,
     * which becomes the push lease.
     */
    async resolveBase(input: { runKey: string; url: string; baseRef: string; targetRef: string }): Promise<{
      baseSha: string;
      targetSha: string | null;
    }> {
      const staging = await deps.staging(input.runKey);
      let remoteBase: string | null;
      try {
        remoteBase = await staging.remoteBranchSha(input.url, input.baseRef);
      } catch (err) {
        throw new Error(`cannot reach repository ${scrubSecrets(input.url)}: ${scrubSecrets(String(err))}`);
      }
      if (remoteBase === null) {
        throw ApplicationFailure.nonRetryable(
          `repo.baseRef: branch "${input.baseRef}" does not exist in ${scrubSecrets(input.url)}`,
          'InvalidRequest',
        );
      }
      const baseSha = await staging.fetchBranch(input.url, input.baseRef, runRef(input.runKey, 'base'));
      const targetSha =
        input.targetRef === input.baseRef ? baseSha : await staging.remoteBranchSha(input.url, input.targetRef);
      return { baseSha, targetSha };
    },

    async pushResult(input: {
      url: string;
      targetRef: string;
      sha: string;
      expectedSha: string | null;
    }): Promise<PushOutcome> {
      // The leader pushes, and its run key is its own workflow's (the input predates the shared store).
      const leader = Context.current().info.workflowExecution;
      if (!leader) throw permanent('InvalidRequest', 'pushResult runs for a leader workflow only');
      const staging = await deps.staging(runKeyOf(leader.workflowId, leader.runId));
      return staging.push(input.url, input.targetRef, input.sha, input.expectedSha);
    },
  };
}
