/**
 * One real Temporal dev server for the whole suite (started from the installed `temporal`
 * binary through Flotilla's own embedding helper), on a free port with a throwaway database.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { ensureTemporal, type TemporalTarget } from '../../src/temporal/server';
import { freePort } from './ports';

declare module 'vitest' {
  export interface ProvidedContext {
    temporalAddress: string;
  }
}

let server: TemporalTarget | undefined;
let dir: string | undefined;

export async function setup(project: TestProject): Promise<void> {
  if (process.env.TEMPORAL_ADDRESS) {
    project.provide('temporalAddress', process.env.TEMPORAL_ADDRESS);
    return;
  }
  dir = mkdtempSync(path.join(os.tmpdir(), 'flotilla-temporal-'));
  // The UI listens on port + 1000; pick a port whose neighbour is very likely free too.
  let port = await freePort();
  while (port + 1000 > 65535) port = await freePort();
  server = await ensureTemporal({ dataDir: dir, port });
  project.provide('temporalAddress', server.address);
}

export async function teardown(): Promise<void> {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
}
