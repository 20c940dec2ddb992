/**
 * Early stops (issue 18) in words: why a running agent was stopped, and what it is told when
 * Flotilla reverted its changes outside its paths. Pure: the sub-task workflow and the
 * activities both use them.
 */

/** A scope check's findings: the first paths outside the sub-task's, and how many there were. */
interface OutOfScope {
  outOfScope: string[];
  outOfScopeCount: number;
}

/** "a.txt, b/c.txt and 3 more". */
export function pathList(found: OutOfScope): string {
  const more = found.outOfScopeCount - found.outOfScope.length;
  return found.outOfScope.join(', ') + (more > 0 ? ` and ${more} more` : '');
}

/** The reason of an attempt stopped at a checkpoint for writing outside its paths. */
export function outsidePathsReason(found: OutOfScope): string {
  return `wrote outside its paths: ${pathList(found)}`;
}

/** Minutes as people read them: "3", "0.05", "1.5". */
function minutes(ms: number): string {
  return String(Math.round((ms / 60_000) * 1000) / 1000);
}

/** The reason of an attempt whose agent printed nothing for `idleMs`. */
export function idleReason(idleMs: number): string {
  return `idle for ${minutes(idleMs)} minutes`;
}

/** The reason of an attempt whose agent showed no progress over `checkpoints` checkpoints. */
export function stalledReason(checkpoints: number, intervalMs: number): string {
  return `stalled: ${checkpoints} checkpoint(s) in a row (${minutes(checkpoints * intervalMs)} minutes) with an unchanged workspace and no new output`;
}

/** What the agent is told when its changes outside its paths were reverted. */
export function revertNotice(found: OutOfScope, allowedPaths: readonly string[]): string {
  return [
    `Flotilla reverted your changes to ${found.outOfScopeCount} path(s) outside the paths this sub-task may change (${allowedPaths.join(', ')}): ${pathList(found)}.`,
    'They were restored as they were when you started (files you created there were removed). Change only the paths you own and the shared paths.',
  ].join('\n');
}
