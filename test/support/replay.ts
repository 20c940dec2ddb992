/**
 * Replaying histories against the current workflow code (the suite's bundle): the committed
 * fixtures under test/history/<release>/, and every run a test file finished.
 */
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { temporal as proto } from '@temporalio/proto';
import { Worker } from '@temporalio/worker';
import { describe, expect, it } from 'vitest';
import { tracedWorkflowBundle, workflowBundle } from './bundle';
import { type TestEnv, installQuietRuntime } from './env';

type Histories = Parameters<typeof Worker.runReplayHistories>[1];

/** Where each release's fixtures live, one directory per release (v1, v2, …). */
export const HISTORY_ROOT = path.join(__dirname, '../history');

/**
 * Fixtures are protobuf's own object form of a History, as JSON. Not the Temporal CLI's proto3
 * JSON: the SDK's parser for that (historyFromJSON) fails with "type must be a Type" in this
 * dependency tree, where @temporalio/common and @temporalio/proto each carry a protobufjs copy.
 */
export const History = proto.api.history.v1.History;

/** The releases that have fixtures, oldest first. */
export const fixtureReleases = (): string[] => readdirSync(HISTORY_ROOT).sort();

/**
 * A release's histories: `<scenario>.leader.json` is the run `history-<scenario>` (and
 * `<scenario>.leader-<n>.json` the earlier histories of a run that rolled over), and
 * `<scenario>.<sub-task>.json` its child `history-<scenario>/<sub-task>`.
 */
export function fixtureHistories(release: string) {
  const dir = path.join(HISTORY_ROOT, release);
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort()
    .map((file) => {
      const [scenario, ...rest] = file.replace(/\.json$/, '').split('.');
      const name = rest.join('.');
      const history = History.fromObject(JSON.parse(readFileSync(path.join(dir, file), 'utf8')));
      // `leader-<n>`: an earlier history of a leader that rolled over, under the same workflow id.
      const leader = name === 'leader' || /^leader-\d+$/.test(name);
      return { workflowId: leader ? `history-${scenario}` : `history-${scenario}/${name}`, history };
    });
}

/** Replays `histories` on the workflow code (traced: with the tracing interceptors); returns how many replayed and every error. */
export async function replay(histories: Histories, replayName: string, traced = false) {
  installQuietRuntime();
  const errors: string[] = [];
  let replayed = 0;
  const bundle = traced ? tracedWorkflowBundle() : workflowBundle();
  for await (const r of Worker.runReplayHistories({ workflowBundle: bundle, replayName }, histories)) {
    replayed++;
    if (r.error) errors.push(`${r.workflowId}: ${r.error}`);
  }
  return { replayed, errors };
}

/** Replays the histories of every finished run `env` started, leaders and their children. */
export async function replayFinishedRuns(env: TestEnv) {
  const fetch = async (workflowId: string) => ({
    workflowId,
    history: await env.client.workflow.getHandle(workflowId).fetchHistory(),
  });
  const finished = [];
  for (const id of env.runs) {
    if ((await env.client.workflow.getHandle(id).describe()).status.name !== 'RUNNING') finished.push(id);
  }
  const leaders = await Promise.all(finished.map(fetch));
  const children = await Promise.all(
    leaders.flatMap(({ history }) =>
      (history.events ?? []).flatMap((e) => {
        const started = e.childWorkflowExecutionStartedEventAttributes?.workflowExecution?.workflowId;
        return started ? [fetch(started)] : [];
      }),
    ),
  );
  return replay([...leaders, ...children], 'replay-check');
}

/** Declares the check that more than `atLeast` finished runs of this file replay deterministically. */
export function describeReplay(env: () => TestEnv, atLeast: number): void {
  describe('determinism', () => {
    it('every finished run of this file replays against the current workflow code', async () => {
      const { replayed, errors } = await replayFinishedRuns(env());
      expect(replayed).toBeGreaterThan(atLeast);
      expect(errors).toEqual([]);
    });
  });
}
