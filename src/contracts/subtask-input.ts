/**
 * The sub-task workflow's input, checked when it starts. The leader always sends a whole one,
 * but a sub-task workflow started by hand (`temporal workflow start --type workerWorkflow`) may
 * not, and without this check its first workflow task fails for ever on a missing field. Loose
 * on purpose: what a later release adds passes through, and every earlier release's input passes.
 */
import { z } from 'zod';
import { describeIssues } from './request';

const duration = z.number().positive();

const SubTaskInputShape = z.looseObject({
  runKey: z.string().min(1),
  objective: z.string(),
  task: z.looseObject({
    id: z.string().min(1),
    prompt: z.string(),
    ownedPaths: z.array(z.string()),
    sharedPaths: z.array(z.string()),
  }),
  agent: z.looseObject({ kind: z.string() }),
  baseSha: z.string().min(1),
  seed: z.looseObject({ sha: z.string() }).optional(),
  sandbox: z.looseObject({ provider: z.string(), network: z.boolean() }),
  setupCmd: z.string().optional(),
  workerTimeoutMs: duration,
  commandTimeoutMs: duration,
  heartbeatTimeoutMs: duration,
  suspendTimeoutMs: duration,
  budgetUsd: z.number().optional(),
  maxTurns: z.number().optional(),
  policy: z.looseObject({}).optional(),
  progressToken: z.string().min(1),
  hostTimeoutMs: duration.optional(),
  checkpointIntervalMs: duration.optional(),
  others: z.array(z.string()).optional(),
  idleMs: duration.optional(),
  stallCheckpoints: z.number().int().positive().optional(),
});

/** Every problem of a sub-task workflow's input, one line each naming the field; none when it is whole. */
export function subTaskInputProblems(input: unknown): string[] {
  const parsed = SubTaskInputShape.safeParse(input, { reportInput: true });
  return parsed.success ? [] : describeIssues(parsed.error.issues, '(input)');
}
