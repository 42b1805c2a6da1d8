import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { LongPolesFirst } from './test/support/sequencer.ts';

const source = (path: string) => fileURLToPath(new URL(path, import.meta.url));

export default defineConfig({
  // Examples import `sluice` as a user's job does; in this repository that is the sources (tsconfig.json's paths).
  resolve: {
    alias: [
      { find: /^sluice$/, replacement: source('./lib/index.ts') },
      { find: /^sluice\/testing$/, replacement: source('./lib/testing/index.ts') },
      { find: /^sluice\/aws$/, replacement: source('./lib/aws/index.ts') },
      { find: /^sluice\/cdk$/, replacement: source('./infra/index.ts') },
    ],
  },
  test: {
    testTimeout: 30_000,
    hookTimeout: 120_000,
    pool: 'forks',
    // Two files at a time even on two cores: most test time waits on child processes and local servers.
    maxWorkers: 2,
    sequence: { sequencer: LongPolesFirst },
    projects: [
      {
        extends: true,
        test: { name: 'unit', include: ['test/**/*.test.ts'], exclude: ['test/aws/**', 'test/testing/local-aws/**', 'test/package/**'] },
      },
      {
        // Tests against real local servers (and the packed package, whose assembly runs use
        // them): DynamoDB Local and fauxqs start once for the
        // project; endpoints reach tests through inject(). Only this project pays for them.
        extends: true,
        test: { name: 'aws', include: ['test/aws/**/*.test.ts', 'test/testing/local-aws/**/*.test.ts', 'test/package/**/*.test.ts'], globalSetup: ['test/support/global-setup.ts'] },
      },
    ],
  },
});
