/**
 * Where a data directory keeps its staging repository, in a module of its own: `flotilla status`
 * names it without loading the staging code (simple-git and the bundle plumbing).
 */
import path from 'node:path';

/** Where the data directory `dataDir` keeps its staging repository. */
export function stagingDirOf(dataDir: string): string {
  return path.join(dataDir, 'staging.git');
}
