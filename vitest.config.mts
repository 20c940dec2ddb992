import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // The Temporal native bridge is not thread-safe under worker threads.
    pool: 'forks',
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 120_000,
    hookTimeout: 180_000,
    include: ['test/**/*.test.ts'],
  },
});
