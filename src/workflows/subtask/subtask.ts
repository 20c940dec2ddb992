/**
 * The sub-task workflow: a sandbox of its own, the agent invoked in it, its commits collected
 * and checked against the paths it may change. An agent that runs out of budget or turns, asks a
 * question, or is paused by an operator suspends the sub-task instead of failing it: the sandbox
 * is kept and the sub-task waits for `resume`. An invocation that fails (exits non-zero, times
 * out, or its activity fails for good) still has its work collected into staging first,
 * reported as `salvaged` (unverified) so a person can recover it. The sandbox is destroyed
 * however the sub-task ends.
 */
import type { SandboxRef } from '../../activities';
import type { SubTaskSeed } from '../../activities/integration';
import { permanent } from '../../contracts/failures';
import type { AgentSpec, CommitPolicy } from '../../contracts/request';
import { subTaskInputProblems } from '../../contracts/subtask-input';
import type { SubTaskReport } from '../../contracts/reports';
import { SubTaskWorkflow } from './sub-task-workflow';

/** The child's input: a payload in history, so its field names never change. */
export interface SubTaskInput {
  runKey: string;
  objective: string;
  task: { id: string; prompt: string; ownedPaths: string[]; sharedPaths: string[] };
  agent: AgentSpec;
  baseSha: string;
  /** Start from this commit instead of the base: the integrated tree, for a sub-task redone on top of it. */
  seed?: SubTaskSeed;
  sandbox: Omit<SandboxRef, 'key'>;
  setupCmd?: string;
  /** The time limit of one invocation of the agent (named before "sub-task" and "invocation"). */
  workerTimeoutMs: number;
  commandTimeoutMs: number;
  heartbeatTimeoutMs: number;
  budgetUsd?: number;
  maxTurns?: number;
  suspendTimeoutMs: number;
  /** What the sub-task's commits may contain (absent in runs started before it existed). */
  policy?: CommitPolicy;
  /** Proves to the leader that progress comes from this child; nobody else has it. */
  progressToken: string;
  /** How long the sandbox's host may take to pick up an activity before it counts as lost (absent: the default). */
  hostTimeoutMs?: number;
  /** How often the running agent's work is checkpointed (absent: the default). */
  checkpointIntervalMs?: number;
  /**
   * The sub-task this workflow is an attempt of, when `task.id` names a later attempt
   * (`api.attempt2`): its agent is told the sub-task's own id, as on the first attempt.
   */
  attemptOf?: string;
  /**
   * The plan's other sub-tasks, one line each and bounded (otherSubTaskLines), for the agent's
   * brief; absent in runs started before the brief, whose agents are told none.
   */
  others?: string[];
  /** The agent is stopped when it prints nothing for this long (limits.idleMinutes; absent: never). */
  idleMs?: number;
  /** The agent is stopped as stalled after this many checkpoints without change (limits.stallCheckpoints; absent: never). */
  stallCheckpoints?: number;
  /** A CI-fix round's attempt (leader/checks.ts): the failing checks its agent must map; its report carries the mapping. */
  ciFix?: { checks: string[] };
}

/**
 * The sub-task workflow. Its name is the workflow type in every history, from before the word
 * "sub-task": it never changes.
 */
export async function workerWorkflow(input: SubTaskInput): Promise<SubTaskReport> {
  // Before anything reads it: a child started by hand with a partial input fails at once, naming
  // the fields, rather than failing every workflow task on the first one missing.
  const problems = subTaskInputProblems(input);
  if (problems.length) throw permanent('InvalidRequest', `invalid sub-task input: ${problems.join('; ')}`);
  // Every handler is registered before the first await.
  const subTask = new SubTaskWorkflow(input);
  try {
    await subTask.claimHost();
    const unprepared = await subTask.onHost(() => subTask.prepare());
    if (unprepared) return unprepared;
    const finished = await subTask.invokeAndCollect();
    return 'status' in finished ? finished : subTask.verdict(finished);
  } finally {
    await subTask.destroySandbox();
    await subTask.progressDelivered();
  }
}

/** Child workflow id of a sub-task: deterministic, so a replayed leader finds its children. */
export function subTaskWorkflowId(leaderId: string, taskId: string): string {
  return `${leaderId}/${taskId}`;
}
