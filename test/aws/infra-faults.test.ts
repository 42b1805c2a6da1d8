/**
 * Infrastructure faults never turn into dead letters: Nexmark Q5 and Q8 through the real
 * operator handlers, polled by the local event source mapping, against DynamoDB Local and
 * fauxqs, while the handlers' own DynamoDB, SQS and S3 calls fail:
 *
 * - 5 % of each service's calls, chosen by a seeded hash of the call's number (not a
 *   period: a retry loop of a fixed number of calls would meet the same fault every
 *   time), each throttled or (a transaction) cancelled by a TransactionConflict before
 *   it reaches the server, or timed out, a timed-out write half the time after the
 *   server applied it (the write landed, the handler sees an error);
 * - a sustained throttle of each partition: the first OUTAGE deliveries of every message
 *   group fail on DynamoDB, so each group is received more than OUTAGE times, more than
 *   the old receive limit of 10 at which SQS moved unprocessed input to the DLQ.
 *
 * The harness is test/support/fault-runs.ts, the fault plan test/support/aws-faults.ts
 * (test/aws/store-faults.test.ts runs it at other rates). The result: no message in any
 * DLQ, the embedded runtime's output, every group received more than OUTAGE times, the
 * backoff counted.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import q5 from '../../examples/nexmark/q5.ts';
import q8 from '../../examples/nexmark/q8.ts';
import type { SourceBinding } from '../../lib/api/sources.ts';
import type { Job } from '../../lib/api/stream.ts';
import { generateEvents, serializeEvent } from '../../lib/nexmark/index.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { THROTTLES } from '../support/aws-faults.ts';
import { embeddedOutput, type FaultRun, runWithFaults } from '../support/fault-runs.ts';

const SEED = 27;
/** Share of calls that fail. */
const FAULT_RATE = 0.05;
/** Deliveries of each message group that fail on DynamoDB (a sustained throttle). */
const OUTAGE = 15;

const servers = { region: inject('awsRegion'), credentials: inject('awsCredentials'), dynamodb: inject('dynamodbEndpoint'), sqs: inject('fauxqsEndpoint') };

const dir = mkdtempSync(join(tmpdir(), 'sluice-infra-faults-'));
const EVENTS = join(dir, 'events.jsonl');
writeFileSync(EVENTS, [...generateEvents(0, 1500, { ratePerSec: 100 })].map(serializeEvent).join('\n') + '\n');
const sources: Record<string, SourceBinding<any>> = { events: { kind: 'file', path: EVENTS } };

const faultyRun = (make: () => Job) =>
  runWithFaults(make, {
    servers,
    seed: SEED,
    rate: FAULT_RATE,
    sources,
    sinkName: 'results',
    outage: OUTAGE,
    outageError: (service) => (service === 'dynamodb' ? THROTTLES.dynamodb[0]() : undefined),
    forceThird: true,
  });
const embedded = (make: () => Job) => embeddedOutput(make, sources, 'results');

function expectNoLoss(run: FaultRun, expected: unknown[]): void {
  expect(run.deadLetters).toEqual([]);
  assertExactlyOnce(expected, run.output);
  // Each service failed calls, some after the write landed; every group was throttled for OUTAGE deliveries.
  for (const service of ['dynamodb', 'sqs', 's3']) expect(run.faults.byService[service] ?? 0, service).toBeGreaterThan(0);
  expect(run.faults.byKind.landed ?? 0).toBeGreaterThan(0);
  expect(run.receives.size).toBeGreaterThan(0);
  for (const [group, n] of run.receives) expect(n, `receives of group ${group}`).toBeGreaterThan(OUTAGE);
  // The groups backed off (their visibility changed) rather than coming back at once, and none stalled.
  expect(run.counts.groupRetries).toBeGreaterThan(OUTAGE);
  expect(run.handlerVisibility).toBeGreaterThan(0);
  expect(run.counts.stalledPartitions ?? 0).toBe(0);
  expect(run.errors.filter((e) => /stalled/.test(e))).toEqual([]);
}

describe('infrastructure faults end in backoff, never in a DLQ', () => {
  it('Nexmark Q5 with 5 % of DynamoDB, SQS and S3 calls failing and every group throttled for 15 deliveries', async () => {
    const make = () => q5({ parallelism: 2 });
    const expected = await embedded(make);
    expect(expected.length).toBeGreaterThan(5);
    const run = await faultyRun(make);
    console.log(`Q5 with faults: ${JSON.stringify(run.faults)}, ${run.counts.groupRetries} group retries, max receives ${JSON.stringify(Object.fromEntries(run.receives))}`);
    expectNoLoss(run, expected);
  }, 90_000);

  it('Nexmark Q8 the same way', async () => {
    const make = () => q8({ parallelism: 2 });
    const expected = await embedded(make);
    expect(expected.length).toBeGreaterThan(2);
    const run = await faultyRun(make);
    console.log(`Q8 with faults: ${JSON.stringify(run.faults)}, ${run.counts.groupRetries} group retries`);
    expectNoLoss(run, expected);
  }, 90_000);
});
