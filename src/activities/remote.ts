/** The only activities that talk to the user's remote; they run on the host, never in a sandbox. */
import { ApplicationFailure, Context } from '@temporalio/activity';
import { permanent } from '../contracts/failures';
import { type PushOutcome, permanentRemoteProblem, scrubSecrets } from '../git/remote';
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
      const reach = <T>(step: () => Promise<T>) => onRemote('cannot reach repository', input.url, step);
      const remoteBase = await reach(() => staging.remoteBranchSha(input.url, input.baseRef));
      if (remoteBase === null) {
        throw ApplicationFailure.nonRetryable(
          `repo.baseRef: branch "${input.baseRef}" does not exist in ${scrubSecrets(input.url)}`,
          'InvalidRequest',
        );
      }
      const baseSha = await reach(() => staging.fetchBranch(input.url, input.baseRef, runRef(input.runKey, 'base')));
      const targetSha =
        input.targetRef === input.baseRef
          ? baseSha
          : await reach(() => staging.remoteBranchSha(input.url, input.targetRef));
      return { baseSha, targetSha };
    },

    async pushResult(input: {
      url: string;
      targetRef: string;
      sha: string;
      expectedSha: string | null;
      /** The run's key (a run that rolled over keeps its first run's); absent in runs from before, whose key is their own workflow run's. */
      runKey?: string;
    }): Promise<PushOutcome> {
      const leader = Context.current().info.workflowExecution;
      if (!leader) throw permanent('InvalidRequest', 'pushResult runs for a leader workflow only');
      const staging = await deps.staging(input.runKey ?? runKeyOf(leader.workflowId, leader.runId));
      return onRemote('cannot push to repository', input.url, () =>
        staging.push(input.url, input.targetRef, input.sha, input.expectedSha),
      );
    },
  };
}

/**
 * Runs a step that reaches `url`, its failure saying what failed and where, without secrets. A
 * remote that can never work (missing, not a repository, refusing us) fails for good, so the run
 * ends at once naming it; anything else is retried.
 */
async function onRemote<T>(what: string, url: string, step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (err) {
    const text = scrubSecrets(err instanceof Error ? err.message : String(err));
    const problem = permanentRemoteProblem(text);
    const message = `${what} ${scrubSecrets(url)}: ${problem ?? text.trim()}`;
    throw problem ? permanent('RemoteRefused', message) : new Error(message);
  }
}
