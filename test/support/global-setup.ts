/**
 * What the whole e2e suite shares, made once: one real Temporal dev server (started from the
 * installed `temporal` binary through Flotilla's own embedding helper) on a free port with a
 * throwaway database, and the workflow code bundled by webpack, plain and traced, for every
 * worker and replay the tests run in their own process (test/support/bundle.ts).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { bundleWorkflowCode } from '@temporalio/worker';
import type { TestProject } from 'vitest/node';
import { TRACED_WORKFLOW_MODULES } from '../../src/temporal/telemetry';
import { PRELOADED_WORKFLOW_MODULES } from '../../src/temporal/workflow-bundle';
import { ensureTemporal, type TemporalTarget } from '../../src/temporal/server';
import { freeServerPort } from './ports';

declare module 'vitest' {
  export interface ProvidedContext {
    temporalAddress: string;
    /** The suite server's HTTP API, when the suite started it ('' for a server given by TEMPORAL_ADDRESS). */
    temporalHttpUrl: string;
    /** Files holding the bundled workflow code, without and with the tracing interceptors. */
    workflowBundle: string;
    tracedWorkflowBundle: string;
  }
}

let server: TemporalTarget | undefined;
let dir: string | undefined;

export async function setup(project: TestProject): Promise<void> {
  dir = mkdtempSync(path.join(os.tmpdir(), 'flotilla-suite-'));
  const [address, [plain, traced]] = await Promise.all([
    process.env.TEMPORAL_ADDRESS ?? startServer(dir),
    bundleWorkflows(dir),
  ]);
  project.provide('temporalAddress', address);
  project.provide('temporalHttpUrl', (!process.env.TEMPORAL_ADDRESS && server?.httpUrl) || '');
  project.provide('workflowBundle', plain);
  project.provide('tracedWorkflowBundle', traced);
}

export async function teardown(): Promise<void> {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
}

async function startServer(root: string): Promise<string> {
  const port = await freeServerPort();
  server = await ensureTemporal({ dataDir: path.join(root, 'temporal'), port });
  return server.address;
}

/** Bundles the workflows as the build does (scripts/bundle-workflows.js), from the sources. */
async function bundleWorkflows(root: string): Promise<[string, string]> {
  const workflowsPath = path.join(__dirname, '../../src/workflows/index.ts');
  const files: [string, string] = [path.join(root, 'workflow-bundle.js'), path.join(root, 'workflow-bundle-traced.js')];
  const preloadModules = PRELOADED_WORKFLOW_MODULES;
  const plain = await bundleWorkflowCode({ workflowsPath, preloadModules, logger: quietLogger });
  writeFileSync(files[0], plain.code);
  const traced = await bundleWorkflowCode({
    workflowsPath,
    preloadModules,
    workflowInterceptorModules: TRACED_WORKFLOW_MODULES,
    logger: quietLogger,
  });
  writeFileSync(files[1], traced.code);
  return files;
}

const quietLogger = {
  log: () => undefined,
  trace: () => undefined,
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: (msg: string) => console.error(msg),
};
