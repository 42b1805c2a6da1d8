/**
 * The Idempotency-Key cases of the ingest function, against DynamoDB Local (the key
 * items) and fauxqs (the stage queue). fauxqs deduplicates queue-wide where a deployed
 * queue deduplicates per message group, so every resend here is also checked to carry
 * the first attempt's message groups, deduplication ids and bodies: what per-group
 * deduplication needs to drop it.
 */
import { GetItemCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { ManualClock } from '../../lib/api/types.ts';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-table.ts';
import { DynamoDbIdempotencyStore, keyPk } from '../../lib/aws/ingest/idempotency-store.ts';
import { createIngestHandler, type IngestHandlerConfig, ingestStreams, RESEND_WITHIN_MS } from '../../lib/aws/ingest/ingest-handler.ts';
import { keyOfPartition, partitionOf } from '../../lib/aws/ingest/ingest-keys.ts';
import { decodeBody } from '../../lib/aws/sqs/sqs-codec.ts';
import { createStageQueues, StaticQueues, type StageQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { compile } from '../../lib/graph/compile.ts';
import { bodyFingerprint } from '../../lib/transport/idempotency.ts';
import { drainQueue, httpEvent, localClients, recordingSqs, unique } from './helpers.ts';

const clients = localClients();
const clock = new ManualClock(Date.now());
const job = new Job(unique('idem'), { parallelism: 4, maxParallelism: 64 });
type Order = { id: number; ts: number };
const orders = job.ingest<Order>('orders', { timestamp: (o) => o.ts, schema: z.object({ id: z.number(), ts: z.number() }) });
const clicks = job.ingest<{ user: string }>('clicks');
orders.union(clicks.map((c): Order => ({ id: -1, ts: c.user.length }))).sinkTo(Sinks.collect(), 'out');
const plan = compile(job.graph);
const stage = ingestStreams(plan).get('orders')!.stage;
const tableName = unique('idem-table');
let queues: StageQueues[];
let store: DynamoDbIdempotencyStore;

beforeAll(async () => {
  queues = await createStageQueues(clients.sqs, plan, { highThroughput: true });
  await createStateTable(clients.dynamodb, tableName);
  store = new DynamoDbIdempotencyStore({ client: clients.dynamodb, tableName, job: job.name });
});
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));

function handler(extra: Partial<IngestHandlerConfig> = {}) {
  return createIngestHandler({ job, sqs: clients.sqs, queues: new StaticQueues(queues), clock, idempotency: store, maxSendAttempts: 1, ...extra });
}

async function post(h: ReturnType<typeof handler>, body: string, key?: string, stream = 'orders') {
  const res = await h(httpEvent(stream, body, key));
  return { status: res.statusCode!, headers: res.headers as Record<string, string>, body: JSON.parse(res.body!) as Record<string, any> };
}

/** Order ids in the stage queue (drained), in order per partition. */
async function enqueuedIds(): Promise<number[]> {
  const ids: number[] = [];
  for (const m of await drainQueue(clients.sqs, queues[stage].url)) {
    const b = decodeBody(m.Body!);
    if (b.k === 'i' && !b.probe) ids.push(...b.r.map(([, e]) => (e as Order).id));
  }
  return ids.sort((a, b) => a - b);
}

const orderBody = (...ids: number[]) => JSON.stringify(ids.map((id) => ({ id, ts: 1000 + id })));

describe('Idempotency-Key on the ingest function', () => {
  it('the same key and body twice: the second is a replay with the first answer, the events are enqueued once', async () => {
    const h = handler();
    const key = unique('k');
    const body = `[{"id":1,"ts":1001},{"id":"x"},{"id":2,"ts":1002}]`;
    const first = await post(h, body, key);
    expect(first.status).toBe(202);
    expect(first.body.accepted).toBe(2);
    expect(first.headers['Idempotent-Replayed']).toBeUndefined();
    clock.advance(10 * 60_000); // past SQS's window: only the key item stops a duplicate now
    const again = await post(h, body, key);
    expect(again.status).toBe(202);
    expect(again.body).toEqual({ ...first.body, replay: true });
    expect(again.headers['Idempotent-Replayed']).toBe('true');
    expect(await enqueuedIds()).toEqual([1, 2]);
    // Another container (no memory of its own) answers the same.
    expect((await post(handler(), body, key)).body.replay).toBe(true);
    expect(await enqueuedIds()).toEqual([]);
  });

  it('the same key with another body, or on another stream: 409 naming the key and what differs, nothing enqueued', async () => {
    const h = handler();
    const key = unique('k');
    expect((await post(h, orderBody(1), key)).status).toBe(202);
    const other = await post(h, orderBody(1, 2), key);
    expect(other.status).toBe(409);
    expect(other.body.error).toBe('idempotency_key_reused');
    expect(other.body.message).toMatch(new RegExp(`^Idempotency-Key "${key}" was first used with another body \\(same stream, other bytes\\); nothing was enqueued`));
    const elsewhere = await post(h, '[{"user":"u"}]', key, 'clicks');
    expect(elsewhere.status).toBe(409);
    expect(elsewhere.body.message).toMatch(/first used on stream "orders", and this request is for stream "clicks"/);
    expect(await enqueuedIds()).toEqual([1]);
    await drainQueue(clients.sqs, queues[ingestStreams(plan).get('clicks')!.stage].url);
  });

  it('the dedup id covers the body: without a key store, a reused key with another body is still enqueued, not dropped', async () => {
    const h = handler({ idempotency: undefined });
    const key = unique('k');
    expect((await post(h, orderBody(1), key)).status).toBe(202);
    expect((await post(h, orderBody(2), key)).status).toBe(202);
    expect(await enqueuedIds()).toEqual([1, 2]);
  });

  it('a keyed request whose SQS answer was lost stays pending; the resend reuses its arrival, so per-group dedup drops it', async () => {
    const { sqs, sent, state } = recordingSqs();
    const h = handler({ sqs });
    const key = unique('k');
    // No timestamp extractor: the arrival time is in every record.
    const body = JSON.stringify(Array.from({ length: 30 }, (_, i) => ({ user: `u${i}` })));
    state.lose = true;
    const first = await post(h, body, key, 'clicks');
    expect(first.status).toBe(503);
    expect(first.body).toMatchObject({ error: 'outcome_unknown', idempotencyKey: key });
    const firstSent = sent.splice(0);
    state.lose = false;
    clock.advance(RESEND_WITHIN_MS - 1000);
    const again = await post(h, body, key, 'clicks');
    expect(again.status).toBe(202);
    expect(sent).toEqual(firstSent);
    expect(new Set(sent.map((s) => s.group))).toEqual(new Set([String(partitionOf(key, 4, 64))]));
    const msgs = await drainQueue(clients.sqs, queues[ingestStreams(plan).get('clicks')!.stage].url);
    expect(msgs.flatMap((m) => { const b = decodeBody(m.Body!); return b.k === 'i' && !b.probe ? b.r : []; }).length).toBe(30);
    // Answered now: a third try is a replay.
    expect((await post(h, body, key, 'clicks')).body.replay).toBe(true);
    sqs.destroy();
  });

  it('a claim left by an attempt that died before sending is resent: the events are enqueued once', async () => {
    const key = unique('k');
    const body = orderBody(7, 8);
    const startedAt = clock.now();
    expect(await store.claim(key, bodyFingerprint('orders', new TextEncoder().encode(body)), 'orders', startedAt)).toBeUndefined();
    clock.advance(30_000);
    const res = await post(handler(), body, key);
    expect(res.status).toBe(202);
    expect(await enqueuedIds()).toEqual([7, 8]);
    expect((await post(handler(), body, key)).body.replay).toBe(true);
    expect(await enqueuedIds()).toEqual([]);
  });

  it('a pending claim past the resend window: 409, since a resend could duplicate', async () => {
    const key = unique('k');
    const body = orderBody(9);
    await store.claim(key, bodyFingerprint('orders', new TextEncoder().encode(body)), 'orders', clock.now());
    clock.advance(RESEND_WITHIN_MS);
    const res = await post(handler(), body, key);
    expect(res.status).toBe(409);
    expect(res.body.error).toBe('idempotency_outcome_unknown');
    expect(await enqueuedIds()).toEqual([]);
  });

  it('an attempt that enqueued nothing (429, every event invalid) releases its claim: the key is free again', async () => {
    const key = unique('k');
    const invalid = await post(handler(), '[{"id":"x"}]', key);
    expect(invalid.status).toBe(400);
    const busy = handler({ maxBacklogMessages: -1, backlogCacheMs: 0 });
    expect((await post(busy, orderBody(3), key)).status).toBe(429);
    const { Item } = await clients.dynamodb.send(new GetItemCommand({ TableName: tableName, Key: { pk: { S: keyPk(job.name, key) }, sk: { S: 'k' } }, ConsistentRead: true }));
    expect(Item).toBeUndefined();
    // Another body with the same key is new, not a conflict.
    expect((await post(handler(), orderBody(4), key)).status).toBe(202);
    expect(await enqueuedIds()).toEqual([4]);
  });

  it('a keyless 503 names a key minted for the partition it used; resending with it is deduplicated in that group', async () => {
    const { sqs, sent, state } = recordingSqs();
    const h = handler({ sqs, random: () => 0.6 }); // starts at partition 2 of 4
    state.lose = true;
    const body = orderBody(11, 12, 13);
    const first = await post(h, body);
    expect(first.status).toBe(503);
    const key = first.body.idempotencyKey as string;
    expect(partitionOf(key, 4, 64)).toBe(2);
    const firstSent = sent.splice(0);
    expect(firstSent.map((s) => s.group)).toEqual(['2']);
    state.lose = false;
    clock.advance(60_000);
    const again = await post(h, body, key);
    expect(again.status).toBe(202);
    expect(sent).toEqual(firstSent);
    expect(await enqueuedIds()).toEqual([11, 12, 13]);
    sqs.destroy();
  });

  it('keyless requests round-robin from a random start per container', async () => {
    const groups = async (random: () => number) => {
      const { sqs, sent } = recordingSqs();
      const h = handler({ sqs, random });
      for (const id of [1, 2, 3]) await post(h, orderBody(id));
      sqs.destroy();
      await enqueuedIds();
      return sent.map((s) => s.group);
    };
    expect(await groups(() => 0)).toEqual(['0', '1', '2']);
    expect(await groups(() => 0.99)).toEqual(['3', '0', '1']);
  });

  it('costs one PutItem and one UpdateItem per keyed request, one PutItem per replay, nothing without a key', async () => {
    const accounting = new AwsAccounting();
    const counted = new DynamoDbIdempotencyStore({ client: clients.dynamodb, tableName, job: job.name, accounting });
    const h = handler({ idempotency: counted });
    const calls = () => ['PutItem', 'UpdateItem', 'GetItem', 'DeleteItem'].map((op) => accounting.get('dynamodb', op).requests);
    const key = unique('k');
    await post(h, orderBody(1), key);
    expect(calls()).toEqual([1, 1, 0, 0]);
    expect((await post(h, orderBody(1), key)).body.replay).toBe(true);
    expect(calls()).toEqual([2, 1, 0, 0]); // the old item comes back with the failed condition: no GetItem
    await post(h, orderBody(2));
    expect(calls()).toEqual([2, 1, 0, 0]);
    await enqueuedIds();
  });

  it('minted keys pick the partition asked for', () => {
    for (let p = 0; p < 5; p++) expect(partitionOf(keyOfPartition(p, 5, 128), 5, 128)).toBe(p);
    expect(() => keyOfPartition(5, 5, 128)).toThrow(/partition: expected 0 to 4, received 5/);
  });
});
