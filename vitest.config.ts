import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { LongPolesFirst } from './test/support/sequencer.ts';

const source = (path: string) => fileURLToPath(new URL(path, import.meta.url));

/** Unit files that replace modules (vi.mock): they need a module graph of their own. */
const OWN_MODULES = ['test/local/watermark-callback.test.ts'];
const NOT_UNIT = ['test/aws/**', 'test/testing/local-aws/**', 'test/package/**'];

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
        // A worker keeps its modules from one file to the next: evaluating the shared graph
        // afresh for every file (and a new process each) took about half of these files' time.
        extends: true,
        test: { name: 'unit', include: ['test/**/*.test.ts'], exclude: [...NOT_UNIT, ...OWN_MODULES], isolate: false },
      },
      {
        extends: true,
        test: { name: 'unit-isolated', include: OWN_MODULES },
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
