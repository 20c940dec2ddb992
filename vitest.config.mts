import { defineConfig } from 'vitest/config';

// Two tiers: `unit` needs no server and runs in seconds; `e2e` runs against a real Temporal dev
// server (started once by the global setup), real git and real sandboxes. `npm test` runs both.
export default defineConfig({
  test: {
    // The Temporal native bridge is not thread-safe under worker threads.
    pool: 'forks',
    // Two files at a time, whatever the core count (vitest's default is cores - 1: one file on
    // CI's two cores); most of an e2e test's time is waiting on agents, timers and git.
    maxWorkers: 2,
    // "After" hooks run last-registered first: test/support/cleanup.ts releases what a file made
    // after the file's own afterAll hooks, and what a test made newest first.
    sequence: { hooks: 'stack' },
    projects: [
      {
        extends: true,
        test: { name: 'unit', include: ['test/unit/**/*.test.ts'], testTimeout: 30_000 },
      },
      {
        extends: true,
        test: {
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          globalSetup: ['test/support/global-setup.ts'],
          testTimeout: 120_000,
          hookTimeout: 180_000,
        },
      },
    ],
  },
});
