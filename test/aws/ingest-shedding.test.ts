/**
 * Opt-in load shedding in the ingest function (lib/aws/ingest/ingest-shedding.ts), against
 * fauxqs (the stage queues) and DynamoDB Local (the Idempotency-Keys): under its bounds a
 * stream sheds nothing; over `whenQueued` (the waiting messages times the events per
 * message this container packed) it drops what its policy says, names each dropped event
 * in the 202 and counts them in the eventsShed metric (per stage, and per stream and
 * reason), and enqueues only the rest; a
 * policy that drops everything answers 202 with nothing enqueued; `whenLagMs` follows the
 * oldest message's age (from the QueueAgeSource port: no local server has CloudWatch)
 * while something waits; and a resend of a request whose answer was lost sends exactly
 * what the first attempt sent, whatever the pressure is by then; a replay of its answer
 * adds nothing to what `sluice dev --target local-aws` counts.
 */
import { SendMessageCommand } from '@aws-sdk/client-sqs';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import type { LoadShedding } from '../../lib/api/sources.ts';
import { Job } from '../../lib/api/stream.ts';
import { ManualClock } from '../../lib/api/types.ts';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-table.ts';
import { INGEST_METRICS } from '../../lib/aws/handler-metrics.ts';
import { DynamoDbIdempotencyStore } from '../../lib/aws/ingest/idempotency-store.ts';
import { createIngestHandler, type IngestHandlerConfig, ingestStreams } from '../../lib/aws/ingest/ingest-handler.ts';
import { shedsByQueueAge } from '../../lib/aws/ingest/ingest-shedding.ts';
import { countShedAnswer, shedTotal } from '../../lib/cli/dead-letter-report.ts';
import type { QueueAgeSource } from '../../lib/aws/ingest/queue-age.ts';
import { queueNameOf } from '../../lib/aws/naming.ts';
import { decodeBody } from '../../lib/aws/sqs/sqs-codec.ts';
import { createStageQueues, StaticQueues, type StageQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { compile } from '../../lib/graph/compile.ts';
import { drainQueue, httpEvent, localClients, recordingSqs, unique } from './helpers.ts';

interface Order {
  id: number;
  weight: number;
}

const clients = localClients();
const clock = new ManualClock(Date.now());
const tableName = unique('shed-table');
let store: DynamoDbIdempotencyStore;
beforeAll(async () => {
  await createStateTable(clients.dynamodb, tableName);
  store = new DynamoDbIdempotencyStore({ client: clients.dynamodb, tableName, job: 'shedding' });
});
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));

/** A one-stream job with `shed`, its queues created. */
async function shedJob(shed: LoadShedding<Order>) {
  const job = new Job(unique('shed'), { parallelism: 1, maxParallelism: 8 });
  job.ingest<Order>('orders', { shed }).sinkTo(Sinks.collect(), 'out');
  const plan = compile(job.graph);
  const queues = await createStageQueues(clients.sqs, plan);
  const url = queues[ingestStreams(plan).get('orders')!.stage].url;
  const handler = (extra: Partial<IngestHandlerConfig> = {}) => createIngestHandler({ job, sqs: clients.sqs, queues: new StaticQueues(queues), clock, backlogCacheMs: 0, idempotency: store, ...extra });
  return { job, plan, queues, url, handler };
}

const orders = (from: number, n: number, weight = (i: number) => i % 10) => Array.from({ length: n }, (_, i) => ({ id: from + i, weight: weight(from + i) }));

async function post(h: ReturnType<typeof createIngestHandler>, events: readonly Order[], key?: string) {
  const res = await h(httpEvent('orders', JSON.stringify(events), key));
  return { status: res.statusCode!, body: JSON.parse(res.body!) as { accepted?: number; shed?: { index: number; reason: string }[]; error?: string; replay?: boolean } };
}

/** Order ids in the queue (drained; wait()'s messages aside). */
async function enqueued(url: string): Promise<number[]> {
  const ids: number[] = [];
  for (const m of await drainQueue(clients.sqs, url)) {
    if (m.Body === WAITING) continue;
    const b = decodeBody(m.Body!);
    if (b.k === 'i' && !b.probe) ids.push(...b.r.map(([, e]) => (e as Order).id));
  }
  return ids.sort((a, b) => a - b);
}

const WAITING = 'waiting';
/** One message waiting in the queue (not the handler's: it packed nothing yet). */
const wait = (url: string) => clients.sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: WAITING, MessageGroupId: '0', MessageDeduplicationId: unique('d') }));

describe('load shedding in the ingest function', () => {
  it('sheds nothing under its bounds; over whenQueued it keeps the sampled fraction, names the rest in the 202 and counts them', async () => {
    const { url, handler } = await shedJob({ whenQueued: 1, drop: { keep: 0.5 } });
    const metrics = new Metrics({ namespace: 'test', serviceName: 'shed' });
    const added = vi.spyOn(metrics, 'addMetric');
    vi.spyOn(metrics, 'publishStoredMetrics').mockImplementation(() => metrics);
    const single: { dimensions: Record<string, string>; metric: unknown[] }[] = [];
    vi.spyOn(metrics, 'singleMetric').mockImplementation(() => {
      const one = { dimensions: {} as Record<string, string>, metric: [] as unknown[] };
      single.push(one);
      return { addDimensions: (d: Record<string, string>) => Object.assign(one.dimensions, d), addMetric: (...a: unknown[]) => one.metric.push(...a) } as never;
    });
    const h = handler({ metrics });
    const calm = await post(h, orders(0, 4));
    expect(calm).toMatchObject({ status: 202, body: { accepted: 4 } });
    expect(calm.body.shed).toBeUndefined();
    // Those four now wait: 1 message, 4 events a message, 4 records >= whenQueued.
    const busy = await post(h, orders(10, 10));
    expect(busy.status).toBe(202);
    expect(busy.body.accepted).toBe(5);
    // keep 0.5 from the sampler's start: every second event (1, 3, ...) stays.
    expect(busy.body.shed).toEqual([0, 2, 4, 6, 8].map((index) => ({ index, reason: 'sample' })));
    expect(await enqueued(url)).toEqual([0, 1, 2, 3, 11, 13, 15, 17, 19]);
    expect(added.mock.calls.filter(([name]) => name === INGEST_METRICS.eventsShed)).toEqual([[INGEST_METRICS.eventsShed, 'Count', 5]]);
    // And at once per stream and reason, as sluice dev --metrics counts them.
    expect(single).toEqual([{ dimensions: { stage: '0', stream: 'orders', reason: 'sample' }, metric: [INGEST_METRICS.eventsShed, 'Count', 5] }]);
  });

  it('estimates queued records by the events per message it packed: one waiting message of 200 events passes whenQueued 100, one of unknown size does not', async () => {
    const { url, handler } = await shedJob({ whenQueued: 100, drop: 'newest' });
    const fresh = handler();
    await wait(url);
    expect((await post(fresh, orders(0, 3))).body.shed).toBeUndefined();
    expect(await enqueued(url)).toEqual([0, 1, 2]);

    const h = handler();
    expect((await post(h, orders(0, 200))).body.accepted).toBe(200);
    const dropped = await post(h, orders(500, 3));
    expect(dropped).toMatchObject({ status: 202, body: { accepted: 0, shed: [0, 1, 2].map((index) => ({ index, reason: 'newest' })) } });
    expect(await enqueued(url)).toEqual(orders(0, 200).map((o) => o.id));
  });

  it('a priority policy keeps exactly the events at or above keepAtLeast', async () => {
    const { url, handler } = await shedJob({ whenQueued: 1, drop: { priority: (o) => o.weight, keepAtLeast: 7 } });
    await wait(url);
    const r = await post(handler(), orders(0, 10));
    expect(r.body.accepted).toBe(3);
    expect(r.body.shed).toEqual([0, 1, 2, 3, 4, 5, 6].map((index) => ({ index, reason: 'priority' })));
    expect(await enqueued(url)).toEqual([7, 8, 9]);
  });

  it('whenLagMs follows the age of the oldest waiting message; an emptied queue has no lag whatever CloudWatch still reports', async () => {
    const { plan, queues, url, handler } = await shedJob({ whenLagMs: 120_000, drop: 'newest' });
    expect(shedsByQueueAge(plan)).toBe(true);
    const name = queueNameOf(queues[ingestStreams(plan).get('orders')!.stage].url);
    const queueAge: QueueAgeSource = { oldestAgeSeconds: async () => new Map([[name, 300]]) };
    const h = handler({ queueAge, queueAgeCacheMs: 0 });
    await wait(url);
    expect((await post(h, orders(0, 2))).body).toMatchObject({ accepted: 0, shed: [{ index: 0, reason: 'newest' }, { index: 1, reason: 'newest' }] });
    await drainQueue(clients.sqs, url);
    expect((await post(h, orders(0, 2))).body).toMatchObject({ accepted: 2 });
    expect(await enqueued(url)).toEqual([0, 1]);
  });

  it('a resend after a lost answer sheds what its first attempt shed, though nothing waits any more: the same messages, each event once', async () => {
    const { url, handler } = await shedJob({ whenQueued: 1, drop: { keep: 0.5 } });
    await wait(url);
    const { sqs, sent, state } = recordingSqs();
    const key = unique('k');
    state.lose = true;
    const lost = await post(handler({ sqs, maxSendAttempts: 1 }), orders(0, 6), key);
    expect(lost).toMatchObject({ status: 503, body: { error: 'outcome_unknown' } });
    const first = [...sent];
    sent.length = 0;
    await drainQueue(clients.sqs, url);
    state.lose = false;
    // A new container (no sampler state, an empty queue): the decision comes from the key's claim.
    const again = await post(handler({ sqs, maxSendAttempts: 1 }), orders(0, 6), key);
    expect(again.status).toBe(202);
    expect(again.body.shed).toEqual([0, 2, 4].map((index) => ({ index, reason: 'sample' })));
    expect(sent).toEqual(first);
    sqs.destroy();
  });

  it("sluice dev --target local-aws counts each request's shed events once from the answers: a replay repeats them and adds none", async () => {
    const { url, handler } = await shedJob({ whenQueued: 1, drop: { keep: 0.5 } });
    await wait(url);
    const h = handler();
    const key = unique('k');
    const counted: Record<string, Record<string, number>> = {};
    for (let i = 0; i < 2; i++) {
      const r = await post(h, orders(0, 4), key);
      expect(r.body.replay).toBe(i === 1 ? true : undefined);
      countShedAnswer(counted, 'orders', r.status, r.body);
    }
    countShedAnswer(counted, 'orders', 429, { shed: [{ reason: 'sample' }] });
    expect(counted).toEqual({ orders: { sample: 2 } });
    expect(shedTotal(counted)).toBe(2);
    await drainQueue(clients.sqs, url);
  });

  it('a keyless request whose answer was lost keeps its decision with the key it is told to resend with', async () => {
    const { url, handler } = await shedJob({ whenQueued: 1, drop: { keep: 0.5 } });
    await wait(url);
    const { sqs, sent, state } = recordingSqs();
    state.lose = true;
    const lost = await post(handler({ sqs, maxSendAttempts: 1 }), orders(0, 4));
    expect(lost.status).toBe(503);
    const key = (lost.body as { idempotencyKey?: string }).idempotencyKey!;
    const first = [...sent];
    sent.length = 0;
    await drainQueue(clients.sqs, url);
    state.lose = false;
    const again = await post(handler({ sqs, maxSendAttempts: 1 }), orders(0, 4), key);
    expect(again).toMatchObject({ status: 202, body: { accepted: 2, shed: [{ index: 0, reason: 'sample' }, { index: 2, reason: 'sample' }] } });
    expect(sent).toEqual(first);
    sqs.destroy();
  });
});
