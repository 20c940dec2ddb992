/**
 * The scope check: which changed paths lie outside the paths a sub-task may change (its owned
 * paths and the request's shared paths). One check, made on the host in the staging repository:
 * by verifyWork on the work a sub-task hands over, and on every checkpoint of a running agent, so
 * an agent that writes outside its paths is stopped (or has those changes reverted) early.
 */
import { normalizeRepoPath, pathIsUnder } from '../contracts/names';
import { redact } from '../store/secrets';
import type { StagingRepo } from './staging';

/** A report names at most this many paths of a kind; the count says how many there were. */
export const MAX_LISTED_PATHS = 20;

/** Changed paths outside the allowed paths (at most MAX_LISTED_PATHS, redacted), and how many there were. */
export interface ScopeFindings {
  outOfScope: string[];
  outOfScopeCount: number;
}

/** Tallies changed paths against the allowed ones, one path at a time. */
export class ScopeCheck {
  private readonly allowed: string[];
  readonly findings: ScopeFindings = { outOfScope: [], outOfScopeCount: 0 };

  constructor(allowedPaths: readonly string[]) {
    this.allowed = allowedPaths.map(normalizeRepoPath);
  }

  /** Counts `path` when it is out of scope; returns whether it is. */
  note(path: string): boolean {
    if (this.allowed.some((a) => pathIsUnder(path, a))) return false;
    this.findings.outOfScopeCount++;
    if (this.findings.outOfScope.length < MAX_LISTED_PATHS) this.findings.outOfScope.push(redact(path));
    return true;
  }
}

/**
 * The paths `headSha` changes relative to `baseSha` outside `allowedPaths`, computed in staging:
 * the findings to report, and the raw paths themselves (at most `limit`) for a revert to act on.
 */
export async function scopeOf(
  staging: StagingRepo,
  c: { baseSha: string; headSha: string; allowedPaths: readonly string[] },
  limit = 0,
): Promise<ScopeFindings & { paths: string[] }> {
  const check = new ScopeCheck(c.allowedPaths);
  const paths: string[] = [];
  await staging.stream(['diff-tree', '-r', '-z', '--no-renames', '--name-only', c.baseSha, c.headSha], '\0', (path) => {
    if (path && check.note(path) && paths.length < limit) paths.push(path);
  });
  return { ...check.findings, paths };
}
