/**
 * Integration: in a sandbox of its own at the base commit, merge every worker's commits in plan
 * order (3-way), then run the setup and test commands. The sandbox is destroyed however it ends.
 */
import { CancellationScope, proxyActivities } from '@temporalio/workflow';
import type { Activities, SandboxRef } from '../activities';
import type { PlannedRequest, RunOutcome, RunResult } from '../spec';
import type { RunStatus } from './messages';
import { activityOptions, commandOptions } from './options';
import { firstLine, lastLines } from './text';

export interface IntegrationInput {
  req: PlannedRequest;
  runKey: string;
  baseSha: string;
  /** Updated as integration proceeds (phase). */
  status: RunStatus;
  /** Filled with the conflict or the test outcome. */
  result: RunResult;
  commandTimeoutMs: number;
  heartbeatTimeoutMs: number;
}

export type IntegrationOutcome =
  | { ok: true; sha: string; diffstat: string; testSummary: string }
  | { ok: false; outcome: RunOutcome; message: string };

export async function integrate(input: IntegrationInput): Promise<IntegrationOutcome> {
  const { req, runKey, baseSha, status, result, commandTimeoutMs } = input;
  const { provisionSandbox, seedWorkspace, mergeWorker, exportIntegrated, destroySandbox } = proxyActivities<Activities>(
    activityOptions(input.heartbeatTimeoutMs),
  );
  const { runCommand } = proxyActivities<Activities>(commandOptions(commandTimeoutMs, input.heartbeatTimeoutMs));
  status.phase = 'integrating';
  const sandbox: SandboxRef = { key: `${runKey}/integration`, ...req.sandbox };
  try {
    await provisionSandbox(sandbox);
    await seedWorkspace({ sandbox, runKey, baseSha, branch: `flotilla/${runKey}/integration`, author: 'Flotilla integration' });
    for (const w of result.workers) {
      if (!w.ref || !w.headSha) continue;
      const task = req.subTasks.find((t) => t.id === w.workerId)!;
      const merged = await mergeWorker({
        sandbox,
        runKey,
        workerId: w.workerId,
        ref: w.ref,
        headSha: w.headSha,
        baseSha,
        title: `Integrate ${w.workerId}: ${firstLine(task.prompt)}`,
      });
      if (merged.status === 'conflict') {
        result.conflict = { workerId: w.workerId, conflictsWith: merged.conflictsWith, files: merged.files };
        const others = merged.conflictsWith.length ? merged.conflictsWith.join(', ') : 'earlier workers';
        return { ok: false, outcome: 'conflict', message: `worker ${w.workerId} conflicts with ${others} in ${merged.files.join(', ')}` };
      }
    }
    status.phase = 'testing';
    if (req.setupCmd) {
      const setup = await runCommand({ sandbox, command: req.setupCmd, timeoutMs: commandTimeoutMs, label: 'setup' });
      if (setup.exitCode !== 0 || setup.timedOut) {
        result.test = { exitCode: setup.exitCode, tail: setup.tail, logRef: setup.logRef };
        return { ok: false, outcome: 'tests-failed', message: `the setup command failed on the integrated tree (exit ${setup.exitCode})` };
      }
    }
    const test = await runCommand({ sandbox, command: req.testCmd, timeoutMs: commandTimeoutMs, label: 'tests' });
    result.test = { exitCode: test.exitCode, tail: test.tail, logRef: test.logRef };
    if (test.exitCode !== 0 || test.timedOut) {
      const how = test.timedOut ? 'timed out' : `exited with code ${test.exitCode}`;
      return { ok: false, outcome: 'tests-failed', message: `the test command ${how} on the integrated tree` };
    }
    const exported = await exportIntegrated({ sandbox, runKey, baseSha });
    return { ok: true, sha: exported.sha, diffstat: exported.diffstat, testSummary: lastLines(test.tail, 5) };
  } finally {
    await CancellationScope.nonCancellable(() => destroySandbox(sandbox));
  }
}
