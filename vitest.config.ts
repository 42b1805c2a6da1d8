import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 120_000,
    pool: 'forks',
    // DynamoDB Local and fauxqs, once per run; endpoints reach tests through inject().
    globalSetup: ['test/support/global-setup.ts'],
  },
});
