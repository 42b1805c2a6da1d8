/**
 * Infrastructure faults never turn into dead letters: Nexmark Q5 and Q8 through the real
 * operator handlers, polled by the local event source mapping, against DynamoDB Local and
 * fauxqs, while the handlers' own DynamoDB, SQS and S3 calls fail:
 *
 * - 5 % of each service's calls, chosen by a seeded hash of the call's number (not a
 *   period: a retry loop of a fixed number of calls would meet the same fault every
 *   time), each throttled before it reaches the server or timed out, a timed-out write
 *   half the time after the server applied it (the write landed, the handler sees an
 *   error);
 * - a sustained throttle of each partition: the first OUTAGE deliveries of every message
 *   group fail on DynamoDB, so each group is received more than OUTAGE times, more than
 *   the old receive limit of 10 at which SQS moved unprocessed input to the DLQ.
 *
 * The event source and the ingest function use clean clients (Lambda's poller and the
 * endpoint are not under test). Source partitions log their input to S3 (as with
 * checkpoints deployed) and large envelopes spill there, so the handlers use S3 too. The result: no message in any DLQ, the embedded
 * runtime's output, every group received more than OUTAGE times, the backoff counted.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { SQSClient } from '@aws-sdk/client-sqs';
import type { Logger } from '@aws-lambda-powertools/logger';
import type { Metrics } from '@aws-lambda-powertools/metrics';
import type { Context, SQSEvent } from 'aws-lambda';
import { afterAll, describe, expect, inject, it } from 'vitest';
import q5 from '../../examples/nexmark/q5.ts';
import q8 from '../../examples/nexmark/q8.ts';
import { type Sink, Sinks } from '../../lib/api/sinks.ts';
import type { SourceBinding, SourceDef } from '../../lib/api/sources.ts';
import type { Job } from '../../lib/api/stream.ts';
import { systemClock } from '../../lib/api/types.ts';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { createIngestHandler } from '../../lib/aws/ingest/ingest-handler.ts';
import { SqsEventSource } from '../../lib/testing/local-aws/event-source.ts';
import { type FeederContext, feedSource } from '../../lib/testing/local-aws/feeder.ts';
import { queueDepth } from '../../lib/testing/local-aws/queues.ts';
import { createOperatorHandler } from '../../lib/aws/operator/operator-handler.ts';
import { createBucket, S3BlobStore } from '../../lib/aws/s3/s3-blob-store.ts';
import { createStageQueues, StaticQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { SqsTransport } from '../../lib/aws/sqs/sqs-transport.ts';
import { compile } from '../../lib/graph/compile.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { createReader } from '../../lib/transport/sources.ts';
import { generateEvents, serializeEvent } from '../../lib/nexmark/index.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { MAX_RECEIVE_COUNT } from '../../infra/stages.ts';
import { drainQueue, unique } from './helpers.ts';

const SEED = 27;
/** Share of calls that fail. */
const FAULT_RATE = 0.05;
/** Deliveries of each message group that fail on DynamoDB (a sustained throttle). */
const OUTAGE = 15;

const region = inject('awsRegion');
const credentials = inject('awsCredentials');
const endpoints = { dynamodb: inject('dynamodbEndpoint'), sqs: inject('fauxqsEndpoint') };
const made: { destroy(): void }[] = [];
const client = <T extends { destroy(): void }>(c: T): T => (made.push(c), c);
const clean = {
  dynamodb: client(new DynamoDBClient({ region, credentials, endpoint: endpoints.dynamodb })),
  sqs: client(new SQSClient({ region, credentials, endpoint: endpoints.sqs, useQueueUrlAsEndpoint: false })),
  s3: client(new S3Client({ region, credentials, endpoint: endpoints.sqs, forcePathStyle: true })),
};
afterAll(() => made.forEach((c) => c.destroy()));

const dir = mkdtempSync(join(tmpdir(), 'sluice-infra-faults-'));
const EVENTS = join(dir, 'events.jsonl');
writeFileSync(EVENTS, [...generateEvents(0, 1500, { ratePerSec: 100 })].map(serializeEvent).join('\n') + '\n');
const sources: Record<string, SourceBinding<any>> = { events: { kind: 'file', path: EVENTS } };

/** The invocation a handler's call belongs to. */
interface Invocation {
  readonly outage: boolean;
}

interface FaultLog {
  /** Calls made inside invocations, per service. */
  readonly calls: Record<string, number>;
  readonly byService: Record<string, number>;
  after: number;
  outage: number;
}

const WRITES = new Set(['TransactWriteItems', 'PutItem', 'UpdateItem', 'DeleteItem', 'BatchWriteItem', 'SendMessageBatch', 'SendMessage', 'PutObject', 'DeleteObject', 'ChangeMessageVisibilityBatch']);

function injected(name: string, status: number, message: string): Error {
  return Object.assign(new Error(`${message} (injected)`), { name, $metadata: { httpStatusCode: status }, $fault: status >= 500 ? 'server' : 'client' });
}

const THROTTLE: Record<string, () => Error> = {
  dynamodb: () => injected('ProvisionedThroughputExceededException', 400, 'The level of configured provisioned throughput for the table was exceeded'),
  sqs: () => injected('RequestThrottled', 403, 'Request is throttled'),
  s3: () => injected('SlowDown', 503, 'Please reduce your request rate'),
};
const timeout = () => Object.assign(new Error('socket timed out (injected)'), { name: 'TimeoutError', $metadata: {} });

/** A [0, 1) number from the seed and a string. */
function unit(key: string): number {
  return createHash('sha256').update(`${SEED}\u0000${key}`).digest().readUInt32BE(0) / 2 ** 32;
}

/** The handlers' clients: every call inside an invocation passes the fault plan. */
function faultyClients(als: AsyncLocalStorage<Invocation>, log: FaultLog) {
  const wrap = <T extends DynamoDBClient | SQSClient | S3Client>(service: string, c: T): T => {
    (c.middlewareStack as DynamoDBClient['middlewareStack']).add(
      (next, context) => async (args) => {
        const inv = als.getStore();
        const command = (context.commandName ?? '').replace(/Command$/, '');
        if (!inv) return next(args);
        const n = (log.calls[service] = (log.calls[service] ?? 0) + 1);
        if (inv.outage && service === 'dynamodb') {
          log.outage++;
          throw THROTTLE.dynamodb();
        }
        // The third call of each service fails whatever the hash says, so every service sees a fault.
        const x = n === 3 ? FAULT_RATE / 2 : unit(`${service}#${n}`);
        if (x >= FAULT_RATE) return next(args);
        log.byService[service] = (log.byService[service] ?? 0) + 1;
        if (x < FAULT_RATE / 2 || n === 3) throw THROTTLE[service]();
        if (WRITES.has(command) && x >= (3 * FAULT_RATE) / 4) {
          await next(args);
          log.after++;
        }
        throw timeout();
      },
      { step: 'initialize', name: 'sluiceTestFaults' },
    );
    return client(c);
  };
  return {
    dynamodb: wrap('dynamodb', new DynamoDBClient({ region, credentials, endpoint: endpoints.dynamodb, maxAttempts: 1 })),
    sqs: wrap('sqs', new SQSClient({ region, credentials, endpoint: endpoints.sqs, useQueueUrlAsEndpoint: false, maxAttempts: 1 })),
    s3: wrap('s3', new S3Client({ region, credentials, endpoint: endpoints.sqs, forcePathStyle: true, maxAttempts: 1 })),
  };
}

function counter() {
  const counts: Record<string, number> = {};
  const metrics = {
    addMetric: (name: string, _unit: unknown, value: number) => void (counts[name] = (counts[name] ?? 0) + value),
    addDimension: () => undefined,
    // The per-job and per-partition copies of an incident (lib/aws/handler-metrics.ts) are not counted twice.
    singleMetric: () => ({ addDimensions: () => undefined, addMetric: () => undefined }),
    publishStoredMetrics: () => undefined,
  } as unknown as Metrics;
  const errors: string[] = [];
  const logger = {
    info: () => undefined,
    warn: () => undefined,
    error: (m: string, f?: { error?: string }) => void errors.push(`${m}: ${f?.error}`),
    addContext: () => undefined,
  } as unknown as Logger;
  return { counts, metrics, logger, errors };
}

interface FaultRun {
  readonly output: unknown[];
  readonly deadLetters: number;
  readonly faults: FaultLog;
  readonly counts: Record<string, number>;
  readonly errors: string[];
  /** Per stage and message group: the highest ApproximateReceiveCount a handler saw. */
  readonly receives: Map<string, number>;
  readonly handlerVisibility: number;
}

/** One job through the handlers on faulty clients, until every queue is drained. */
async function runWithFaults(makeJob: () => Job, sinkName: string): Promise<FaultRun> {
  const job = makeJob();
  const plan = compile(job.graph);
  const prefix = `${unique('if')}-`;
  const table = `sluice-${prefix}${plan.job.name}`;
  const bucket = `sluice-${prefix}spill`.toLowerCase();
  await createStateTable(clean.dynamodb, table);
  await createBucket(clean.s3, bucket);
  // The production receive limit; a 30 s function timeout (visibility 180 s).
  const queues = await createStageQueues(clean.sqs, plan, { prefix, maxReceiveCount: MAX_RECEIVE_COUNT, visibilityTimeoutSeconds: 180 });
  const resolver = new StaticQueues(queues);
  const accounting = new AwsAccounting();
  const sink = Sinks.collect<unknown>();
  const als = new AsyncLocalStorage<Invocation>();
  const faults: FaultLog = { calls: {}, byService: {}, after: 0, outage: 0 };
  const faulty = faultyClients(als, faults);
  const { counts, metrics, logger, errors } = counter();
  const deliveries = new Map<string, number>();
  const receives = new Map<string, number>();

  const eventSources = plan.stages.map((stage) => {
    const handler = createOperatorHandler({
      job,
      stage: stage.id,
      sqs: faulty.sqs,
      dynamodb: faulty.dynamodb,
      s3: faulty.s3,
      tableName: table,
      queues: resolver,
      blobs: new S3BlobStore({ s3: faulty.s3, bucket, prefix: `${plan.job.name}/` }),
      // Source partitions log the input each commit consumed to S3 (input-log.ts), as with checkpoints deployed.
      checkpointStore: new S3BlobStore({ s3: faulty.s3, bucket }),
      sinks: { [sinkName]: sink as Sink<any> },
      maxMessageBytes: 1024,
      logger,
      metrics,
      backoff: { seed: SEED },
    });
    const wrapped = (event: SQSEvent, context: Context) => {
      const groups = [...new Set(event.Records.map((r) => r.attributes.MessageGroupId ?? ''))];
      let outage = false;
      for (const g of groups) {
        const key = `${stage.id}/${g}`;
        const n = (deliveries.get(key) ?? 0) + 1;
        deliveries.set(key, n);
        if (n <= OUTAGE) outage = true;
      }
      for (const r of event.Records) {
        const key = `${stage.id}/${r.attributes.MessageGroupId}`;
        receives.set(key, Math.max(receives.get(key) ?? 0, Number(r.attributes.ApproximateReceiveCount)));
      }
      return als.run({ outage }, () => handler(event, context));
    };
    const source = new SqsEventSource({
      sqs: clean.sqs,
      queueUrl: queues[stage.id].url,
      handler: wrapped,
      waitTimeSeconds: 1,
      retryDelayMs: 20,
      // A backoff's second lasts 0.1 ms here: 15 min is 90 ms.
      visibilityScaleMs: 0.1,
      accounting,
    });
    source.observe(faulty.sqs);
    return source;
  });

  const transport = new SqsTransport({ sqs: clean.sqs, job: plan.job.name, queues: resolver, accounting });
  const ingest = createIngestHandler({ job, sqs: clean.sqs, queues: resolver, accounting });
  await Promise.all(eventSources.map((s) => s.start()));
  try {
    const ctx: FeederContext = {
      plan,
      sqs: clean.sqs,
      transport,
      accounting,
      clock: systemClock,
      chunkSize: 256,
      maxBacklogMessages: 10_000,
      onIngestInvocation: () => undefined,
      rejected: [],
      shouldStop: () => false,
    };
    const feeding: Promise<number>[] = [];
    for (const edge of plan.edges) {
      if (edge.from.kind !== 'source') continue;
      const node = plan.job.nodes[edge.toNode];
      if (node.spec.kind !== 'source') continue;
      const def: SourceDef<any> = node.spec.source;
      const binding = sources[def.name] ?? def.binding;
      const target = { def, stage: edge.toStage, partitions: plan.stages[edge.toStage].parallelism, ingest: def.binding.kind === 'ingest' ? ingest : undefined };
      feeding.push(feedSource(ctx, target, createReader(binding, def.name, systemClock)));
    }
    await Promise.all(feeding);
    // Drained: every queue empty and nothing running or waiting, twice with no invocation between.
    let stable: number | undefined;
    for (;;) {
      const invocations = eventSources.reduce((n, s) => n + s.metrics.invocations, 0);
      let quiet = eventSources.every((s) => !s.busy);
      for (const q of queues) {
        if (!quiet) break;
        const d = await queueDepth(clean.sqs, q.url);
        quiet = !d.visible && !d.inFlight && !d.delayed;
      }
      quiet &&= eventSources.every((s) => !s.busy);
      if (quiet && stable === invocations) break;
      stable = quiet ? invocations : undefined;
      await new Promise((r) => setTimeout(r, 50));
    }
  } finally {
    await Promise.allSettled(eventSources.map((s) => s.stop()));
  }
  let deadLetters = 0;
  for (const q of queues) deadLetters += (await drainQueue(clean.sqs, q.dlqUrl)).length;
  return { output: sink.records, deadLetters, faults, counts, errors, receives, handlerVisibility: eventSources.reduce((n, s) => n + s.metrics.handlerVisibility, 0) };
}

async function embedded(makeJob: () => Job, sinkName: string): Promise<unknown[]> {
  const sink = Sinks.collect<unknown>();
  await new EmbeddedRuntime(makeJob(), { sources, sinks: { [sinkName]: sink as Sink<any> } }).run();
  return sink.records;
}

function expectNoLoss(run: FaultRun, expected: unknown[]): void {
  expect(run.deadLetters).toBe(0);
  assertExactlyOnce(expected, run.output);
  // Each service failed calls, some after the write landed; every group was throttled for OUTAGE deliveries.
  for (const service of ['dynamodb', 'sqs', 's3']) expect(run.faults.byService[service] ?? 0, service).toBeGreaterThan(0);
  expect(run.faults.after).toBeGreaterThan(0);
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
    const expected = await embedded(make, 'results');
    expect(expected.length).toBeGreaterThan(5);
    const run = await runWithFaults(make, 'results');
    console.log(`Q5 with faults: ${JSON.stringify(run.faults)}, ${run.counts.groupRetries} group retries, max receives ${JSON.stringify(Object.fromEntries(run.receives))}`);
    expectNoLoss(run, expected);
  }, 90_000);

  it('Nexmark Q8 the same way', async () => {
    const make = () => q8({ parallelism: 2 });
    const expected = await embedded(make, 'results');
    expect(expected.length).toBeGreaterThan(2);
    const run = await runWithFaults(make, 'results');
    console.log(`Q8 with faults: ${JSON.stringify(run.faults)}, ${run.counts.groupRetries} group retries`);
    expectNoLoss(run, expected);
  }, 90_000);
});
