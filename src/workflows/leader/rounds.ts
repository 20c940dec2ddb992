/**
 * What review rounds (review.ts) and CI-fix rounds (checks.ts) share once their attempts have
 * settled: the round's tested commit through the push gate and pushed with the compare-and-swap
 * expecting the branch's last push, or why nothing was pushed.
 */
import { clip } from '../../contracts/text';
import { passGate } from './gates';
import type { PlanRun } from './plan-run';
import type { Run } from './run';
import { pushTo } from './steps';
import type { LeaderRequest } from '../../contracts/request';

export interface LandedRound {
  outcome: 'pushed' | 'unchanged' | 'failed';
  message: string;
  /** What the branch holds after the push (pushed only). */
  pushedSha?: string;
}

/** Pushes a round's settled plan on top of `headSha`, the branch's last push; a round that failed rewinds the integration to it. */
export async function landRound(
  run: Run,
  req: LeaderRequest,
  living: PlanRun,
  headSha: string,
  outcome: Awaited<ReturnType<PlanRun['revise']>>,
  // A PR's review round pushes through its ForgeRun (whose checks then follow); a CI-fix round and land: push straight.
  push = (tested: { sha: string; testSummary: string }, expected: string) => pushTo(run, req, tested.sha, expected),
): Promise<LandedRound> {
  if (!outcome.ok) {
    living.integration.rewind(headSha);
    return { outcome: 'failed', message: clip(outcome.message, 1000) };
  }
  if (outcome.sha === headSha) return { outcome: 'unchanged', message: 'no sub-task changed anything' };
  const { sha, diffstat, testSummary } = outcome;
  run.result.integratedSha = run.status.integratedSha = sha;
  await passGate(run, 'push', req.gates.push, { sha, diffstat, testSummary });
  const pushedSha = await push({ sha, testSummary }, headSha);
  return { outcome: 'pushed', pushedSha, message: `tests passed, pushed ${pushedSha}` };
}
