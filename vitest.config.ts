import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    testTimeout: 30_000,
    hookTimeout: 120_000,
    pool: 'forks',
    projects: [
      {
        extends: true,
        test: { name: 'unit', include: ['test/**/*.test.ts'], exclude: ['test/aws/**'] },
      },
      {
        // Tests against real local servers: DynamoDB Local and fauxqs start once for the
        // project; endpoints reach tests through inject(). Only this project pays for them.
        extends: true,
        test: { name: 'aws', include: ['test/aws/**/*.test.ts'], globalSetup: ['test/support/global-setup.ts'] },
      },
    ],
  },
});
