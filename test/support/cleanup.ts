/**
 * Releasing what a test made however it ends: a resource made inside a test is released when
 * that test finishes (passed, failed or timed out); one made outside a test (a beforeAll, the
 * file's top level) once the file's tests and its own afterAll hooks are done. Newest first, so
 * a worker stops before the directory it works in goes.
 *
 * Every helper in test/support that makes something to release registers it here; tests do
 * not call cleanup() or stop() at their end.
 */
import { TestRunner, afterAll, onTestFinished } from 'vitest';

const fileScope: (() => unknown)[] = [];

// This module is first imported while vitest collects a test file (each file gets its own module
// graph), so the hook belongs to that file. Registered before the file's own afterAll hooks, it
// runs after them: vitest runs "after" hooks last-registered first (sequence.hooks: 'stack').
afterAll(() => releaseAll(fileScope.splice(0)));

/** Calls `release` when the current test ends, or, outside a test, when the file's tests are done. */
export function releaseAtEnd(release: () => unknown): void {
  if (TestRunner.getCurrentTest()) onTestFinished(() => releaseAll([release]));
  else fileScope.push(release);
}

/** Runs every release, newest first, even when one fails; then fails with all their errors. */
async function releaseAll(releases: (() => unknown)[]): Promise<void> {
  const errors: unknown[] = [];
  for (const release of releases.reverse()) {
    try {
      await release();
    } catch (err) {
      errors.push(err);
    }
  }
  if (errors.length === 1) throw errors[0];
  if (errors.length > 1) throw new AggregateError(errors, `${errors.length} releases failed`);
}
