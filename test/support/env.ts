/**
 * A real Flotilla worker in this process, on the suite's dev server (its own task queue and data
 * directory), with a client to start runs on it. Stopped when the test that made it ends, or,
 * made outside a test, when the file's tests are done.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { inject } from 'vitest';
import { type RunEnd, awaitRun } from '../../src/client/index';
import type { LeaderRequestInput } from '../../src/contracts/request';
import type { DepsOptions } from '../../src/activities/deps';
import { type FlotillaWorker, createFlotillaWorker } from '../../src/worker';
import { leaderWorkflow } from '../../src/workflows/index';
import { workflowBundle } from './bundle';
import { releaseAtEnd } from './cleanup';
import { tempDir } from './temp';

export class TestEnv {
  /** Every run started through this environment, for the replay check. */
  readonly runs: string[] = [];

  private constructor(
    readonly client: Client,
    readonly worker: FlotillaWorker,
    readonly taskQueue: string,
    readonly dataDir: string,
  ) {}

  static async start(deps?: DepsOptions): Promise<TestEnv> {
    installQuietRuntime();
    const address = inject('temporalAddress');
    const dataDir = tempDir('data');
    const taskQueue = `test-${randomUUID()}`;
    const connection = await NativeConnection.connect({ address });
    releaseAtEnd(() => connection.close());
    const client = new Client({ connection: await Connection.connect({ address }) });
    releaseAtEnd(() => client.connection.close());
    const worker = await createFlotillaWorker({
      connection,
      namespace: 'default',
      taskQueue,
      dataDir,
      workflowBundle: workflowBundle(),
      deps,
    });
    const running = worker.run();
    releaseAtEnd(async () => {
      worker.shutdown();
      await running;
    });
    return new TestEnv(client, worker, taskQueue, dataDir);
  }

  /** Sandbox directories still on disk: every run should leave none behind. */
  sandboxesLeft(): string[] {
    const dir = path.join(this.dataDir, 'sandboxes');
    return existsSync(dir) ? readdirSync(dir) : [];
  }

  /** The text of a log this environment's worker stored as an artifact (`sha256:<hex>`). */
  artifact(logRef: string): string {
    return readFileSync(path.join(this.dataDir, 'artifacts', `${logRef.slice('sha256:'.length)}.log`), 'utf8');
  }

  async start(request: LeaderRequestInput | unknown, workflowId = `run-${randomUUID()}`) {
    this.runs.push(workflowId);
    return this.client.workflow.start(leaderWorkflow, {
      taskQueue: this.taskQueue,
      workflowId,
      args: [request as LeaderRequestInput],
    });
  }

  /** Runs a leader to its end and returns what a user would see of it. */
  async run(request: LeaderRequestInput | unknown, workflowId?: string): Promise<RunEnd> {
    return awaitRun(await this.start(request, workflowId));
  }
}

let runtimeInstalled = false;
/** The SDK's own logs at ERROR only: a test's output is what it asserts. */
export function installQuietRuntime(): void {
  if (runtimeInstalled) return;
  runtimeInstalled = true;
  Runtime.install({ logger: new DefaultLogger('ERROR') });
}
