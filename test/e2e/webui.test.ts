/**
 * What the Temporal Web UI shows of a run, read through the same API the UI reads: describe
 * (static summary and details), the `__temporal_workflow_metadata` query (current details) and
 * the history's user metadata (activity and timer summaries).
 */
import { randomUUID } from 'node:crypto';
import { defaultPayloadConverter } from '@temporalio/common';
import type { temporal } from '@temporalio/proto';
import { beforeAll, describe, expect, it } from 'vitest';
import { awaitRun, startRun } from '../../src/client/index';
import { parseLeaderRequest } from '../../src/contracts/request';
import { type RunStatus } from '../../src/contracts/messages';
import { TestEnv } from '../support/env';
import { flotilla, waitFor } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { describeReplay } from '../support/replay';
import { shell, shellRequest, subTask, withGates, writeAgent } from '../support/requests';
import { waitForStatus } from '../support/runs';

let env: TestEnv;
beforeAll(async () => {
  env = await TestEnv.start();
});

type Payload = temporal.api.common.v1.IPayload | null | undefined;
const text = (p: Payload): string | undefined =>
  p ? defaultPayloadConverter.fromPayload<string>(p as never) : undefined;

interface WorkflowMetadata {
  currentDetails?: string;
}

async function currentDetails(workflowId: string): Promise<string> {
  const meta = await env.client.workflow.getHandle(workflowId).query<WorkflowMetadata>('__temporal_workflow_metadata');
  return meta.currentDetails ?? '';
}

const waitForPhase = (workflowId: string, phase: RunStatus['phase']) =>
  waitForStatus(env.client.workflow.getHandle(workflowId), phase, (s) => s.phase === phase);

/** The summaries of the activities a workflow scheduled, in order. */
async function activitySummaries(workflowId: string): Promise<string[]> {
  const { events } = await env.client.workflow.getHandle(workflowId).fetchHistory();
  return (events ?? [])
    .filter((e) => e.activityTaskScheduledEventAttributes)
    .map((e) => text(e.userMetadata?.summary) ?? '');
}

describe('the Web UI', () => {
  it('names the run, its gates with the command that passes them, and what each activity runs', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const greeting = (id: string) =>
      subTask(id, writeAgent(`${id}/greeting.txt`, `hello from ${id}`), {
        prompt: `write the ${id} greeting\nin detail`,
      });
    const request = parseLeaderRequest(
      shellRequest(remote.url, [greeting('api'), greeting('web')], {
        objective: 'greet in two languages\nwith a second line the summary leaves out',
        testCmd: 'test -f api/greeting.txt',
        ...withGates('plan', 'push'),
      }),
    );
    const workflowId = `run-${randomUUID()}`;
    env.runs.push(workflowId);
    const handle = await startRun(env.client, request, { taskQueue: env.taskQueue, workflowId });

    // ---- Static summary and details: the run's list row and its page ----
    const described = await handle.describe();
    expect(await described.staticSummary()).toBe('flotilla: greet in two languages');
    const details = await described.staticDetails();
    expect(details).toContain(`**Repository**: ${remote.url} (main → main)`);
    expect(details).toContain('- **api**: write the api greeting');
    expect(details).toContain('- **web**: write the web greeting');

    // ---- The plan gate ----
    await waitForPhase(workflowId, 'awaiting-plan-approval');
    const atPlan = await waitFor('the plan gate details', async () => (await currentDetails(workflowId)) || undefined);
    expect(atPlan).toContain('Waiting for a person at the plan gate');
    expect(atPlan).toContain(`\`flotilla approve ${workflowId} --gate plan\``);
    expect(atPlan).toContain(`\`flotilla reject ${workflowId} --gate plan --reason "why"\``);
    const planTimer = (await handle.fetchHistory()).events?.find((e) => e.timerStartedEventAttributes);
    expect(text(planTimer?.userMetadata?.summary)).toBe('plan gate: waiting for a person');
    expect((await flotilla(env.taskQueue, ['approve', workflowId, '--gate', 'plan'])).code).toBe(0);

    // ---- The push gate: the exact command, with the SHA ----
    const s = await waitForPhase(workflowId, 'awaiting-push-approval');
    const sha = s.gate!.sha!;
    const atPush = await waitFor('the push gate details', async () => {
      const d = await currentDetails(workflowId);
      return d.includes('push gate') ? d : undefined;
    });
    expect(atPush).toContain(`\`flotilla approve ${workflowId} --gate push --sha ${sha}\``);
    // Each sub-task is merged as it ends: one merge names both when they end together.
    const summaries = await activitySummaries(workflowId);
    expect(summaries).toContain('tests: test -f api/greeting.txt');
    const merged = summaries.filter((m) => m.startsWith('merge ')).flatMap((m) => m.slice(6).split(', '));
    expect(merged.sort()).toEqual(['api', 'web']);

    // The workers: each child is named by its sub-task, and its agent run by worker and run number.
    const worker = await env.client.workflow.getHandle(`${workflowId}/api`).describe();
    expect(await worker.staticSummary()).toBe('worker api: write the api greeting');
    expect(await worker.staticDetails()).toContain(`**Sub-task** api of run ${workflowId}`);
    expect(await activitySummaries(`${workflowId}/api`)).toContain('agent shell on api, run 1');

    // ---- Finished: no gate is left open ----
    expect((await flotilla(env.taskQueue, ['approve', workflowId, '--gate', 'push', '--sha', sha])).code).toBe(0);
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(await currentDetails(workflowId)).toBe('');
    expect(await (await handle.describe()).staticSummary()).toBe('flotilla: greet in two languages');
  });

  it('a suspended worker shows the resume command; a repair round and the tests after it say which round they are', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    // Over its budget until resumed; then writes the answer. The tests want a file only the repair writes.
    const spender = `if [ -n "\${FLOTILLA_RESUME_MESSAGE:-}" ]; then mkdir -p spender && echo "$FLOTILLA_RESUME_MESSAGE" > spender/answer.txt && git add -A && git commit -qm answer; else echo '::flotilla {"costUsd": 2}'; sleep 30; fi`;
    const request = parseLeaderRequest(
      shellRequest(remote.url, [subTask('spender', spender)], {
        testCmd: 'test -f spender/fixed.txt',
        limits: { workerBudgetUsd: 1 },
        repair: { agent: shell('echo fixed > spender/fixed.txt'), maxRounds: 2 },
      }),
    );
    const workflowId = `run-${randomUUID()}`;
    env.runs.push(workflowId);
    const handle = await startRun(env.client, request, { taskQueue: env.taskQueue, workflowId });

    const worker = `${workflowId}/spender`;
    const suspended = await waitFor('the suspension details', async () => {
      const d = await currentDetails(worker).catch(() => '');
      return d.includes('Suspended') ? d : undefined;
    });
    expect(suspended).toContain('the agent used its budget ($2.00 of $1.00)');
    expect(suspended).toContain(`\`flotilla resume ${workflowId} --subtask spender --message "..."\``);
    expect(
      (
        await flotilla(env.taskQueue, [
          'resume',
          workflowId,
          '--subtask',
          'spender',
          '--message',
          'blue',
          '--add-budget',
          '5',
        ])
      ).code,
    ).toBe(0);

    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(await currentDetails(worker)).toBe('');
    expect(await activitySummaries(worker)).toEqual(
      expect.arrayContaining(['agent shell on spender, run 1', 'agent shell on spender, run 2']),
    );
    const leader = await activitySummaries(workflowId);
    const at = (summary: string) => leader.indexOf(summary);
    expect(at('tests: test -f spender/fixed.txt')).toBeGreaterThan(-1);
    expect(at('repair round 1 by shell')).toBeGreaterThan(at('tests: test -f spender/fixed.txt'));
    expect(at('tests, repair round 1: test -f spender/fixed.txt')).toBeGreaterThan(at('repair round 1 by shell'));
  });
});

describeReplay(() => env, 0);
