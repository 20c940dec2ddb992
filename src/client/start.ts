/** Starting a run: its id, the request as the leader's input, and what the Web UI shows of it. */
import { randomBytes } from 'node:crypto';
import type { Client, WorkflowHandle } from '@temporalio/client';
import type { LeaderRequest } from '../contracts/request';
import type { leaderWorkflow } from '../workflows/leader/leader';

/** A readable, unique workflow id: flotilla-20261130-142501-a1b2. */
export function newRunId(now = new Date()): string {
  const stamp = now.toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
  return `flotilla-${stamp}-${randomBytes(2).toString('hex')}`;
}

export async function startRun(
  client: Client,
  request: LeaderRequest,
  opts: { taskQueue: string; workflowId?: string },
): Promise<WorkflowHandle<typeof leaderWorkflow>> {
  return client.workflow.start('leaderWorkflow', {
    taskQueue: opts.taskQueue,
    workflowId: opts.workflowId ?? newRunId(),
    args: [request],
    ...runMetadata(request),
  }) as Promise<WorkflowHandle<typeof leaderWorkflow>>;
}

/** What the Web UI shows for a run: the objective in its list, where it lands and what was asked on its page. */
export function runMetadata(request: LeaderRequest): { staticSummary: string; staticDetails: string } {
  const target = request.repo.targetRef ?? request.repo.baseRef;
  const tasks = (request.subTasks ?? []).map((t) => `- **${t.id}**: ${t.prompt.split('\n')[0]}`);
  // A run on an issue has its objective from the issue, which the worker reads.
  const objective = request.issue
    ? `issue ${request.issue}${request.objective ? `: ${request.objective}` : ''}`
    : request.objective;
  const lands = request.land?.kind === 'pr' ? `a pull request into ${target}` : target;
  return {
    staticSummary: `flotilla: ${objective.split('\n')[0]}`.slice(0, 200),
    staticDetails: [
      `**Objective**: ${objective}`,
      `**Repository**: ${request.repo.url} (${request.repo.baseRef} → ${lands})`,
      ...(tasks.length ? ['**Sub-tasks**:', ...tasks] : ['**Sub-tasks**: planned by the agent']),
    ].join('\n'),
  };
}
