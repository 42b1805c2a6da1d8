/**
 * Store faults on the AWS path: 1 %, 5 % and 10 % of the operator handlers' DynamoDB, SQS
 * and S3 calls fail, chosen by a seeded hash (test/support/aws-faults.ts):
 * TransactWriteItems cancelled with a TransactionConflict reason, throttling
 * (ProvisionedThroughputExceeded, ThrottlingException, SQS RequestThrottled, S3 SlowDown)
 * and ambiguous timeouts (a write that landed, the client saw an error). Nexmark Q5 and a
 * keyed process function with event-time timers behind a shuffle (poison-jobs.ts, its
 * good records only, fed through the ingest handler) run through the real handlers on
 * DynamoDB Local and fauxqs (test/support/fault-runs.ts, shared with infra-faults.test.ts).
 *
 * Each run's output equals the embedded runtime's (the checker: none lost, duplicated or
 * unexpected) and no message reaches a DLQ: every record is good,
 * so every fault is one to retry. SLUICE_STORE_FAULT_SEEDS=N runs N seeds per case.
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
import { SERVICES } from '../support/aws-faults.ts';
import { embeddedOutput, runWithFaults } from '../support/fault-runs.ts';
import { poisonEvents, poisonJob, poisonOperator } from './poison-jobs.ts';

const servers = { region: inject('awsRegion'), credentials: inject('awsCredentials'), dynamodb: inject('dynamodbEndpoint'), sqs: inject('fauxqsEndpoint') };
const SEEDS = Number(process.env.SLUICE_STORE_FAULT_SEEDS ?? 1);

const dir = mkdtempSync(join(tmpdir(), 'sluice-store-faults-'));
const BIDS = join(dir, 'events.jsonl');
writeFileSync(BIDS, [...generateEvents(0, 800, { ratePerSec: 100 })].map(serializeEvent).join('\n') + '\n');

interface Case {
  readonly name: string;
  readonly make: () => Job;
  readonly sources: (seed: number) => Record<string, SourceBinding<any>>;
  readonly sinkName: string;
}

const CASES: readonly Case[] = [
  { name: 'Nexmark Q5', make: () => q5({ parallelism: 2 }), sources: () => ({ events: { kind: 'file', path: BIDS } }), sinkName: 'results' },
  {
    name: 'a keyed process function with timers',
    make: () => poisonJob({ parallelism: 2 }),
    sources: (seed) => ({ events: { kind: 'items', items: poisonEvents(seed, 600).filter((e) => poisonOperator(e) === undefined) } }),
    sinkName: 'out',
  },
];

describe('store faults on DynamoDB, SQS and S3 calls (seeded)', () => {
  for (const rate of [0.01, 0.05, 0.1]) {
    for (const c of CASES) {
      for (let s = 0; s < SEEDS; s++) {
        const seed = Math.round(rate * 100) * 100 + s; // distinct per rate
        it(`${c.name}, ${rate * 100} % of calls failing, seed ${seed}: the reference output, no dead letters`, async () => {
          const sources = c.sources(seed);
          const expected = await embeddedOutput(c.make, sources, c.sinkName);
          const run = await runWithFaults(c.make, { servers, seed, rate, sources, sinkName: c.sinkName, everyKind: true });
          console.log(`${c.name} at ${rate * 100} %, seed ${seed}: ${JSON.stringify(run.faults)}, ${run.counts.groupRetries ?? 0} group retries`);
          expect(run.deadLetters.map((m) => m.Body?.slice(0, 200)), 'dead letters').toEqual([]);
          assertExactlyOnce(expected, run.output, { label: `${c.name} at ${rate * 100} %, seed ${seed}` });
          expect(run.counts.stalledPartitions ?? 0).toBe(0);
          // Every kind met the handlers, and every service failed some calls.
          for (const kind of ['throttle', 'conflict', 'landed']) expect(run.faults.byKind[kind] ?? 0, kind).toBeGreaterThan(0);
          for (const service of SERVICES) expect(run.faults.byService[service] ?? 0, service).toBeGreaterThan(0);
        }, 120_000);
      }
    }
  }
});
