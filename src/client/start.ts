/** Starting a run: its id, the request as the leader's input, and what the Web UI shows of it. */
import { randomBytes } from 'node:crypto';
import type { Client, WorkflowHandle } from '@temporalio/client';
import { planPartSignal } from '../contracts/messages';
import { PART_BYTES, digestOf, partsOf } from '../contracts/plan-parts';
import type { LeaderRequest } from '../contracts/request';
import type { LeaderInput } from '../contracts/rollover';
import type { leaderWorkflow } from '../workflows/leader/leader';

/** A readable, unique workflow id: flotilla-20261130-142501-a1b2. */
export function newRunId(now = new Date()): string {
  const stamp = now.toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
  return `flotilla-${stamp}-${randomBytes(2).toString('hex')}`;
}

/**
 * Starts the run. A plan too large for one payload (over PART_BYTES as JSON) is sent in parts:
 * the request names each by its SHA-256 (planParts) and the parts follow as planPart signals,
 * so no event of the run's history holds more than one part (contracts/plan-parts.ts).
 */
export async function startRun(
  client: Client,
  request: LeaderRequest,
  opts: { taskQueue: string; workflowId?: string },
): Promise<WorkflowHandle<typeof leaderWorkflow>> {
  const { subTasks, ...head } = request;
  const parts = subTasks && Buffer.byteLength(JSON.stringify(subTasks)) > PART_BYTES ? partsOf(subTasks) : undefined;
  const input: LeaderInput = parts ? { ...head, planParts: parts.map(digestOf) } : request;
  const handle = (await client.workflow.start('leaderWorkflow', {
    taskQueue: opts.taskQueue,
    workflowId: opts.workflowId ?? newRunId(),
    args: [input],
    ...runMetadata(request),
  })) as WorkflowHandle<typeof leaderWorkflow>;
  for (const [part, text] of (parts ?? []).entries()) await handle.signal(planPartSignal, { part, text });
  return handle;
}

/** Sub-tasks the Web UI's details of a run list. */
const DETAILS_TASKS = 50;

/** What the Web UI shows for a run: the objective in its list, where it lands and what was asked on its page. */
export function runMetadata(request: LeaderRequest): { staticSummary: string; staticDetails: string } {
  const target = request.repo.targetRef ?? request.repo.baseRef;
  const all = request.subTasks ?? [];
  // A thousand sub-tasks would make this one payload the size of the plan: the first ones, and a count.
  const tasks = all.slice(0, DETAILS_TASKS).map((t) => `- **${t.id}**: ${t.prompt.split('\n')[0].slice(0, 200)}`);
  if (all.length > DETAILS_TASKS)
    tasks.push(`- … and ${all.length - DETAILS_TASKS} more (the run's \`plan\` query lists them all)`);
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
