/** Shared fixtures: a real worker on the suite's dev server, and real git repositories. */
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime, Worker, bundleWorkflowCode } from '@temporalio/worker';
import { simpleGit } from 'simple-git';
import { describe, expect, inject, it } from 'vitest';
import { type RunEnd, awaitRun } from '../../src/client/index';
import type { LeaderRequestInput } from '../../src/contracts/request';
import type { DepsOptions } from '../../src/activities/deps';
import { type FlotillaWorker, createFlotillaWorker } from '../../src/worker';
import { leaderWorkflow } from '../../src/workflows/index';

export function tempDir(prefix: string): string {
  return mkdtempSync(path.join(os.tmpdir(), `flotilla-${prefix}-`));
}

export class TestEnv {
  private running?: Promise<void>;

  private constructor(
    readonly client: Client,
    readonly connection: NativeConnection,
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
    const workflowBundle = await bundleWorkflowCode({
      workflowsPath: path.join(__dirname, '../../src/workflows/index.ts'),
      logger: quietLogger,
    });
    const worker = await createFlotillaWorker({
      connection,
      namespace: 'default',
      taskQueue,
      dataDir,
      workflowBundle,
      deps,
    });
    const client = new Client({ connection: await Connection.connect({ address }) });
    const env = new TestEnv(client, connection, worker, taskQueue, dataDir);
    env.running = worker.run();
    return env;
  }

  async stop(): Promise<void> {
    this.worker.shutdown();
    await this.running;
    await this.connection.close();
    await this.client.connection.close();
    rmSync(this.dataDir, { recursive: true, force: true });
  }

  /** Sandbox directories still on disk: every run should leave none behind. */
  sandboxesLeft(): string[] {
    const dir = path.join(this.dataDir, 'sandboxes');
    return existsSync(dir) ? readdirSync(dir) : [];
  }

  /** Every run started through this environment, for the replay check. */
  readonly runs: string[] = [];

  async start(request: LeaderRequestInput | unknown, workflowId = `run-${randomUUID()}`) {
    this.runs.push(workflowId);
    return this.client.workflow.start(leaderWorkflow, {
      taskQueue: this.taskQueue,
      workflowId,
      args: [request as LeaderRequestInput],
    });
  }

  /**
   * Replays the histories of every finished run (leaders and their workers) against the current
   * workflow code; returns how many replayed and the nondeterminism errors found.
   */
  async replayFinishedRuns(): Promise<{ replayed: number; errors: string[] }> {
    const fetch = async (workflowId: string) => ({
      workflowId,
      history: await this.client.workflow.getHandle(workflowId).fetchHistory(),
    });
    const finished = [];
    for (const id of this.runs) {
      if ((await this.client.workflow.getHandle(id).describe()).status.name !== 'RUNNING') finished.push(id);
    }
    const leaders = await Promise.all(finished.map(fetch));
    const children = await Promise.all(
      leaders.flatMap(({ history }) =>
        (history.events ?? []).flatMap((e) => {
          const started = e.childWorkflowExecutionStartedEventAttributes;
          return started?.workflowExecution?.workflowId ? [fetch(started.workflowExecution.workflowId)] : [];
        }),
      ),
    );
    const errors: string[] = [];
    let replayed = 0;
    const workflowsPath = path.join(__dirname, '../../src/workflows/index.ts');
    for await (const r of Worker.runReplayHistories({ workflowsPath, replayName: 'replay-check' }, [
      ...leaders,
      ...children,
    ])) {
      replayed++;
      if (r.error) errors.push(`${r.workflowId}: ${r.error}`);
    }
    return { replayed, errors };
  }

  /** Runs a leader to its end and returns what a user would see of it. */
  async run(request: LeaderRequestInput | unknown, workflowId?: string): Promise<RunEnd> {
    return awaitRun(await this.start(request, workflowId));
  }
}

let runtimeInstalled = false;
function installQuietRuntime(): void {
  if (runtimeInstalled) return;
  runtimeInstalled = true;
  Runtime.install({ logger: new DefaultLogger('ERROR') });
}

const quietLogger = {
  log: () => undefined,
  trace: () => undefined,
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: (msg: string) => console.error(msg),
};

/** A bare "remote" repository seeded with `files` on main, plus a way to inspect it. */
export async function makeRemote(files: Record<string, string>) {
  const root = tempDir('remote');
  const work = path.join(root, 'work');
  const url = path.join(root, 'remote.git');
  mkdirSync(work);
  for (const [name, content] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(work, name)), { recursive: true });
    writeFileSync(path.join(work, name), content, { mode: name.endsWith('.sh') ? 0o755 : 0o644 });
  }
  const git = simpleGit(work);
  await git.init(['-b', 'main']);
  await git.addConfig('user.name', 'Test').addConfig('user.email', 'test@example.com');
  await git.add('.').commit('initial');
  await simpleGit().clone(work, url, ['--bare']);
  const remote = simpleGit(url);
  return {
    url,
    root,
    async head(branch = 'main'): Promise<string | null> {
      const out = await remote.raw(['rev-parse', '--verify', '--quiet', `refs/heads/${branch}`]).catch(() => '');
      return out.trim() || null;
    },
    async show(ref: string, file: string): Promise<string | null> {
      return remote.raw(['show', `${ref}:${file}`]).catch(() => null);
    },
    async files(ref = 'main'): Promise<string[]> {
      return (await remote.raw(['ls-tree', '-r', '--name-only', ref])).split('\n').filter(Boolean);
    },
    /** Commits on `ref` that are not on `since`. */
    async log(ref: string, since: string): Promise<string[]> {
      return (await remote.raw(['log', '--format=%s', `${since}..${ref}`])).split('\n').filter(Boolean);
    },
    /** Moves main forward with a commit made elsewhere (someone else pushed). */
    async advance(file: string, content: string): Promise<string> {
      await git.pull(url, 'main').catch(() => undefined);
      writeFileSync(path.join(work, file), content);
      await git.add(file).commit(`outside change to ${file}`);
      await git.push(url, 'main');
      return (await git.revparse(['HEAD'])).trim();
    },
    cleanup() {
      rmSync(root, { recursive: true, force: true });
    },
  };
}

/** A shell agent that writes `content` to `file` and commits it. */
export function writeAgent(file: string, content: string, commit = true): string {
  const write = `mkdir -p "$(dirname '${file}')" && printf '%s\\n' '${content}' > '${file}'`;
  return commit ? `${write} && git add -A && git commit -qm 'write ${file}'` : write;
}

/** A manual gate, as requests in tests write it. */
export const manual = { mode: 'manual' as const };

/** A request whose sub-tasks are shell agents, each owning the directory named after it. */
export function shellRequest(
  objective: string,
  url: string,
  tasks: { id: string; command: string }[],
  extra: object = {},
) {
  return {
    objective,
    repo: { url, baseRef: 'main' },
    testCmd: 'true',
    subTasks: tasks.map((t) => ({
      id: t.id,
      prompt: `do ${t.id}`,
      ownedPaths: [t.id],
      agent: { kind: 'shell' as const, command: t.command },
    })),
    ...extra,
  };
}

/** A sub-task whose agent writes and commits `<id>/greeting.txt`. */
export const greet = (id: string) => ({ id, command: writeAgent(`${id}/greeting.txt`, `hello from ${id}`) });

/** Declares the check that every finished run of a test file replays deterministically. */
export function describeReplay(env: () => TestEnv, atLeast: number): void {
  describe('determinism', () => {
    it('every finished run of this file replays against the current workflow code', async () => {
      const { replayed, errors } = await env().replayFinishedRuns();
      expect(replayed).toBeGreaterThan(atLeast);
      expect(errors).toEqual([]);
    });
  });
}
