/** The host's checks of a sandbox's commits that need no repository. */
import { describe, expect, it } from 'vitest';
import { leavesRepository } from '../../src/git/verify';

describe('symbolic link targets', () => {
  it('inside the repository are fine; absolute, up and out, or into .git are not', () => {
    expect(leavesRepository('a/link', 'b.txt')).toBe(false);
    expect(leavesRepository('a/b/link', '../../c.txt')).toBe(false);
    expect(leavesRepository('a/link', '/etc/passwd')).toBe(true);
    expect(leavesRepository('a/link', '../../etc')).toBe(true);
    expect(leavesRepository('link', '..')).toBe(true);
    expect(leavesRepository('a/link', '../.git/hooks')).toBe(true);
    expect(leavesRepository('link', '.git')).toBe(true);
  });
});
