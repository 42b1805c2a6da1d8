/**
 * Redelivery storms on the AWS path (test/support/storm-driver.ts): Nexmark Q5 and a keyed
 * process function with event-time timers behind a shuffle (poison-jobs.ts, two stages,
 * with its poison records) through the real operator handlers on DynamoDB Local and
 * fauxqs, while invocations of one group overlap (a visibility timeout shorter than the
 * processing: the first invocation is held and finishes after a newer one), 30 % of the
 * batches that succeeded are delivered again later and mixed across groups, and three
 * warm containers per stage with cached partitions take invocations at random.
 *
 * The output equals the embedded runtime's by the checker; each poison record reaches its
 * stage's DLQ once, from the operator that refuses it, with its error and exactly
 * maxAttempts attempts; nothing else reaches a DLQ. SLUICE_STORM_SEEDS=N runs N seeds.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import q5 from '../../examples/nexmark/q5.ts';
import type { SourceBinding } from '../../lib/api/sources.ts';
import type { Job } from '../../lib/api/stream.ts';
import { generateEvents, serializeEvent } from '../../lib/nexmark/index.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { embeddedOutput } from '../support/fault-runs.ts';
import { createRig } from '../support/handler-rig.ts';
import { runStorm } from '../support/storm-driver.ts';
import { poisonEvents, poisonJob, poisonOperator } from './poison-jobs.ts';
import { expectOneLetterPerPoison } from './poison-letters.ts';

const servers = { region: inject('awsRegion'), credentials: inject('awsCredentials'), dynamodb: inject('dynamodbEndpoint'), sqs: inject('fauxqsEndpoint') };
const SEEDS = Number(process.env.SLUICE_STORM_SEEDS ?? 2);
const MAX_ATTEMPTS = 3;

const dir = mkdtempSync(join(tmpdir(), 'sluice-storm-'));
const BIDS = join(dir, 'events.jsonl');
writeFileSync(BIDS, [...generateEvents(0, 600, { ratePerSec: 100 })].map(serializeEvent).join('\n') + '\n');

/** The job through the handlers under a storm; its output, the DLQs' letters and the storm's figures. */
async function storm(makeJob: () => Job, sources: Record<string, SourceBinding<any>>, sinkName: string, seed: number) {
  const rig = await createRig(makeJob, { servers, sinkName, seed, maxAttempts: MAX_ATTEMPTS });
  try {
    await rig.feed(sources);
    const stats = await runStorm({ seed, sqs: rig.clean.sqs, queues: rig.queues, container: rig.container, warm: 3, duplicateRate: 0.3, overlapRate: 0.3 });
    return { output: rig.sink.records, letters: await rig.deadLetters(), stats };
  } finally {
    rig.close();
  }
}

const seeds = Array.from({ length: SEEDS }, (_, i) => 11 + i);

describe('redelivery storms on the AWS path (seeded)', () => {
  for (const seed of seeds) {
    it(`Nexmark Q5, seed ${seed}: the reference output, no dead letters`, async () => {
      const make = () => q5({ parallelism: 2 });
      const sources = { events: { kind: 'file', path: BIDS } } as const;
      const expected = await embeddedOutput(make, sources, 'results');
      const run = await storm(make, sources, 'results', seed);
      console.log(`Q5 storm seed ${seed}: ${JSON.stringify(run.stats)}`);
      assertExactlyOnce(expected, run.output, { label: `Q5 storm seed ${seed}` });
      expect(run.letters, 'dead letters').toEqual([]);
      expect(run.stats.overlaps).toBeGreaterThan(0);
      expect(run.stats.duplicates).toBeGreaterThan(0);
    }, 120_000);

    it(`a keyed process function with timers and poison records, seed ${seed}: the reference output, each poison record one letter after ${MAX_ATTEMPTS} attempts`, async () => {
      const events = poisonEvents(seed, 1500);
      const make = () => poisonJob({ parallelism: 2 });
      const expected = await embeddedOutput(make, { events: { kind: 'items', items: events.filter((e) => poisonOperator(e) === undefined) } }, 'out');
      const run = await storm(make, { events: { kind: 'items', items: events } }, 'out', seed);
      console.log(`poison storm seed ${seed}: ${JSON.stringify(run.stats)}`);
      assertExactlyOnce(expected, run.output, { label: `poison storm seed ${seed}`, input: events });
      expect(run.letters.filter((d) => d.kind !== 'deadLetter'), 'messages redriven whole').toEqual([]);
      expectOneLetterPerPoison(events, run.letters.flatMap((d) => (d.kind === 'deadLetter' ? [d] : [])), `seed ${seed}`, MAX_ATTEMPTS);
      expect(run.stats.overlaps).toBeGreaterThan(0);
      expect(run.stats.duplicates).toBeGreaterThan(0);
    }, 120_000);
  }
});
