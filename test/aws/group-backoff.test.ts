/**
 * The failure policy for groups that fail on the infrastructure (lib/aws/operator/group-backoff.ts)
 * and the operator handler applying it against fauxqs and DynamoDB Local:
 * - the backoff: bounded, exponential in the receive count, jittered deterministically;
 * - a throttled group's messages get that visibility (ChangeMessageVisibilityBatch), the
 *   retry is counted and logged; near the receive limit the group stalls (the longest
 *   visibility, an error, stalledPartitions) and nothing reaches the DLQ;
 * - the record path keeps its own bound: a poison record is parked after maxAttempts with
 *   the default limit of 100 receives, and at once at the queue's last receive.
 */
import { DynamoDBClient, ProvisionedThroughputExceededException } from '@aws-sdk/client-dynamodb';
import { type Message, SQSClient } from '@aws-sdk/client-sqs';
import type { Logger } from '@aws-lambda-powertools/logger';
import type { Metrics } from '@aws-lambda-powertools/metrics';
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { CollectSink, Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { backoffFor, DEFAULT_MAX_RECEIVE_COUNT, resolveGroupBackoff } from '../../lib/aws/operator/group-backoff.ts';
import { createIngestHandler } from '../../lib/aws/ingest/ingest-handler.ts';
import { queueDepth } from '../../lib/testing/local-aws/queues.ts';
import { createOperatorHandler } from '../../lib/aws/operator/operator-handler.ts';
import { createStageQueues, StaticQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { compile } from '../../lib/graph/compile.ts';
import { drainQueue, localClients, receive, sqsEvent, unique } from './helpers.ts';

describe('backoffFor', () => {
  const o = resolveGroupBackoff({}, DEFAULT_MAX_RECEIVE_COUNT);

  it('doubles from 2 s to at most 15 min with equal jitter, the same for the same partition and receive', () => {
    let previousFull = 0;
    for (let r = 1; r < 90; r++) {
      const full = Math.min(900, 2 * 2 ** (r - 1));
      const d = backoffFor(r, 100, o, '1/0');
      expect(d.stalled).toBe(false);
      expect(d.seconds).toBeGreaterThanOrEqual(Math.max(2, full / 2));
      expect(d.seconds).toBeLessThanOrEqual(full);
      expect(backoffFor(r, 100, o, '1/0')).toEqual(d);
      expect(full).toBeGreaterThanOrEqual(previousFull);
      previousFull = full;
    }
    // Partitions throttled together spread out; another seed gives other values.
    const at = (key: string, seed = 0) => backoffFor(12, 100, resolveGroupBackoff({ seed }, 100), key).seconds;
    expect(new Set(['0/0', '0/1', '0/2', '0/3', '0/4'].map((k) => at(k))).size).toBeGreaterThan(1);
    expect(['0/0', '0/1', '0/2', '0/3'].map((k) => at(k, 1))).not.toEqual(['0/0', '0/1', '0/2', '0/3'].map((k) => at(k)));
  });

  it('stalls within the reserve before the limit, with the stalled visibility', () => {
    expect(backoffFor(89, 100, o, 'x').stalled).toBe(false);
    for (const r of [90, 95, 100, 140]) expect(backoffFor(r, 100, o, 'x')).toEqual({ seconds: 10_800, stalled: true, receives: r });
  });

  it('refuses settings SQS cannot take or that leave no room', () => {
    expect(() => resolveGroupBackoff({ maxSeconds: 50_000 }, 100)).toThrow(/backoff.maxSeconds/);
    expect(() => resolveGroupBackoff({ baseSeconds: 0 }, 100)).toThrow(/backoff.baseSeconds/);
    expect(() => resolveGroupBackoff({ stallReserve: 100 }, 100)).toThrow(/backoff.stallReserve/);
    expect(() => resolveGroupBackoff({ stalledSeconds: 60 }, 100)).toThrow(/backoff.stalledSeconds/);
  });
});

interface Ev {
  id: string;
  user: string;
  poison?: boolean;
}

const clients = localClients();
const table = unique('sluice-backoff');
beforeAll(() => createStateTable(clients.dynamodb, table));
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));

function recorder() {
  const counts: Record<string, number> = {};
  const logs: { level: string; message: string; fields: Record<string, unknown> }[] = [];
  // Counts the invocation's metrics (service and stage); the per-job and per-partition copies of an incident are single metrics.
  const single = { addDimensions: () => single, addMetric: () => undefined };
  const metrics = { addMetric: (n: string, _u: unknown, v: number) => void (counts[n] = (counts[n] ?? 0) + v), addDimension: () => undefined, singleMetric: () => single, publishStoredMetrics: () => undefined } as unknown as Metrics;
  const at = (level: string) => (message: string, fields: Record<string, unknown> = {}) => void logs.push({ level, message, fields });
  const logger = { info: at('info'), warn: at('warn'), error: at('error'), addContext: () => undefined } as unknown as Logger;
  return { counts, logs, metrics, logger };
}

/** A DynamoDB client that throttles every call while `throttle.on`. */
function throttledDynamoDb() {
  const throttle = { on: false };
  const client = new DynamoDBClient({ region: inject('awsRegion'), credentials: inject('awsCredentials'), endpoint: inject('dynamodbEndpoint'), maxAttempts: 1 });
  client.middlewareStack.add(
    (next) => async (args) => {
      if (throttle.on) throw new ProvisionedThroughputExceededException({ message: 'throttled (injected)', $metadata: {} });
      return next(args);
    },
    { step: 'initialize', name: 'testThrottle' },
  );
  return { client, throttle };
}

/** The visibilities the handler asked for, per receipt handle. */
function visibilityLog(sqs: SQSClient) {
  const set: number[] = [];
  sqs.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === 'ChangeMessageVisibilityBatchCommand') for (const e of (args.input as { Entries: { VisibilityTimeout: number }[] }).Entries) set.push(e.VisibilityTimeout);
      return next(args);
    },
    { step: 'initialize', name: 'testVisibility' },
  );
  return set;
}

async function setup(poison = false) {
  const job = new Job(unique('bo'), { parallelism: 1, maxParallelism: 16 });
  job
    .ingest<Ev>('events', { watermark: { maxOutOfOrdernessMs: 0 } })
    .map((e) => {
      if (e.poison) throw new Error(`poisoned event ${e.id}`);
      return e;
    })
    .name('check')
    .sinkTo(Sinks.collect<Ev>(), 'out');
  const queues = await createStageQueues(clients.sqs, compile(job.graph), { maxReceiveCount: DEFAULT_MAX_RECEIVE_COUNT, visibilityTimeoutSeconds: 300 });
  const resolver = new StaticQueues(queues);
  const ingest = createIngestHandler({ job, sqs: clients.sqs, queues: resolver });
  const send = async (events: Ev[]) => {
    const event = { version: '2.0', rawPath: '/streams/events/events', headers: { 'content-type': 'application/json' }, requestContext: { http: { method: 'POST' }, requestId: unique('r') }, body: JSON.stringify(events), isBase64Encoded: false };
    expect((await ingest(event as unknown as APIGatewayProxyEventV2)).statusCode).toBe(202);
  };
  await send([{ id: 'a1', user: 'ann' }, ...(poison ? [{ id: 'X', user: 'ann', poison: true }] : []), { id: 'a2', user: 'ann' }]);
  const sink = new CollectSink<Ev>();
  const sqs = new SQSClient({ region: inject('awsRegion'), credentials: inject('awsCredentials'), endpoint: inject('fauxqsEndpoint') });
  const visibilities = visibilityLog(sqs);
  const db = throttledDynamoDb();
  const rec = recorder();
  // Defaults: maxReceiveCount 100 (as the stage queues), maxAttempts 3, the default backoff.
  const handler = createOperatorHandler({ job, sqs, dynamodb: db.client, tableName: table, queues: resolver, sinks: { out: sink }, logger: rec.logger, metrics: rec.metrics });
  return { job, queues, handler, sink, visibilities, throttle: db.throttle, ...rec, close: () => (sqs.destroy(), db.client.destroy()) };
}

const again = (ms: Message[], count: number): Message[] => ms.map((m) => ({ ...m, Attributes: { ...m.Attributes, ApproximateReceiveCount: String(count) } }));

describe('operator handler: groups failing on the infrastructure', () => {
  it('backs a throttled group off by its receive count, then stalls it near the limit; nothing reaches the DLQ', async () => {
    const t = await setup();
    try {
      t.throttle.on = true;
      const [m] = await receive(clients.sqs, t.queues[0].url);
      expect(m).toBeDefined();
      const first = await t.handler(sqsEvent([m], t.queues[0].arn));
      expect(first.batchItemFailures.map((f) => f.itemIdentifier)).toEqual([m.MessageId]);
      const one = backoffFor(1, 100, resolveGroupBackoff({}, 100), '0/0').seconds;
      expect(t.visibilities).toEqual([one]);
      expect(t.counts.groupRetries).toBe(1);
      expect(t.logs.find((l) => l.level === 'warn')).toMatchObject({ message: /backs off/, fields: { stage: 0, partition: '0', receives: 1, visibilitySeconds: one, error: /throttled/ } });
      // SQS keeps it invisible for the backoff: the group does not come back at once.
      expect(await receive(clients.sqs, t.queues[0].url)).toEqual([]);

      // Later receives back off longer (here as SQS would count them), up to the cap.
      await t.handler(sqsEvent(again([m], 8), t.queues[0].arn));
      await t.handler(sqsEvent(again([m], 40), t.queues[0].arn));
      expect(t.visibilities[1]).toBeGreaterThan(one);
      expect(t.visibilities[2]).toBeLessThanOrEqual(900);
      expect(t.counts.stalledPartitions ?? 0).toBe(0);

      // Within 10 receives of the limit: stalled, with an error and the alarm's metric.
      const stalled = await t.handler(sqsEvent(again([m], 95), t.queues[0].arn));
      expect(stalled.batchItemFailures).toHaveLength(1);
      expect(t.visibilities[3]).toBe(10_800);
      expect(t.counts.stalledPartitions).toBe(1);
      expect(t.logs.filter((l) => l.level === 'error').map((l) => l.message)).toEqual([expect.stringMatching(/^partition stalled/)]);
      expect(t.logs.find((l) => l.level === 'error')!.fields).toMatchObject({ receives: 95, maxReceiveCount: 100, visibilitySeconds: 10_800 });

      // The throttle clears: the same message goes through, the output is complete, no dead letter.
      t.throttle.on = false;
      expect((await t.handler(sqsEvent(again([m], 96), t.queues[0].arn))).batchItemFailures).toEqual([]);
      expect(t.sink.records.map((e) => e.id)).toEqual(['a1', 'a2']);
      expect(await drainQueue(clients.sqs, t.queues[0].dlqUrl)).toEqual([]);
      expect((await queueDepth(clients.sqs, t.queues[0].dlqUrl)).visible).toBe(0);
    } finally {
      t.close();
    }
  });

  it('parks a poison record after maxAttempts with the default receive limit, without backing off', async () => {
    const t = await setup(true);
    try {
      const [m] = await drainQueue(clients.sqs, t.queues[0].url);
      for (let r = 1; r <= 2; r++) expect((await t.handler(sqsEvent(again([m], r), t.queues[0].arn))).batchItemFailures).toHaveLength(1);
      expect(t.sink.records.map((e) => e.id)).toEqual([]);
      expect((await t.handler(sqsEvent(again([m], 3), t.queues[0].arn))).batchItemFailures).toEqual([]);
      expect(t.sink.records.map((e) => e.id)).toEqual(['a1', 'a2']);
      // User code failures come back after the visibility timeout: no backoff, no retry counted.
      expect(t.visibilities).toEqual([]);
      expect(t.counts.groupRetries ?? 0).toBe(0);
      expect(await drainQueue(clients.sqs, t.queues[0].dlqUrl)).toHaveLength(1);
    } finally {
      t.close();
    }
  });

  it('parks a poison record at once at the queue\'s last receive (100)', async () => {
    const t = await setup(true);
    try {
      const [m] = await drainQueue(clients.sqs, t.queues[0].url);
      expect((await t.handler(sqsEvent(again([m], DEFAULT_MAX_RECEIVE_COUNT), t.queues[0].arn))).batchItemFailures).toEqual([]);
      expect(t.sink.records.map((e) => e.id)).toEqual(['a1', 'a2']);
      const dead = await drainQueue(clients.sqs, t.queues[0].dlqUrl);
      expect(dead).toHaveLength(1);
    } finally {
      t.close();
    }
  });
});
