/** What activities need from the host, built once per worker process. */
import path from 'node:path';
import { ApplicationFailure } from '@temporalio/activity';
import { ArtifactStore } from '../artifacts';
import { StagingRepo } from '../gitstore';
import { LocalSandboxProvider } from '../sandbox/local';
import type { Sandbox, SandboxProvider } from '../sandbox/types';

/** How a workflow names a sandbox: a stable key plus the options it was made with. */
export interface SandboxRef {
  key: string;
  provider: 'local';
  network: boolean;
}

export interface ActivityDeps {
  dataDir: string;
  providers: Record<SandboxRef['provider'], SandboxProvider>;
  artifacts: ArtifactStore;
  staging: () => Promise<StagingRepo>;
}

export function defaultDeps(dataDir: string): ActivityDeps {
  let staging: Promise<StagingRepo> | undefined;
  return {
    dataDir,
    providers: { local: new LocalSandboxProvider(path.join(dataDir, 'sandboxes')) },
    artifacts: new ArtifactStore(path.join(dataDir, 'artifacts')),
    staging: () => (staging ??= StagingRepo.open(dataDir)),
  };
}

/** The existing sandbox for `ref`; a missing one is a hard failure, since retrying cannot bring it back. */
export async function openSandbox(deps: ActivityDeps, ref: SandboxRef): Promise<Sandbox> {
  const sb = await deps.providers[ref.provider].find(ref.key, { network: ref.network });
  if (!sb) throw ApplicationFailure.nonRetryable(`sandbox ${ref.key} does not exist (was it destroyed?)`, 'SandboxMissing');
  return sb;
}
