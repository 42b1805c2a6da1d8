/**
 * The ingest Lambda handler against fauxqs. Every bad input gets the same answer as
 * the embedded endpoint (status, headers, body: both run side by side on the same job),
 * plus the SQS-specific answers: characters SQS refuses, an event above the message
 * limit, back-pressure from the queue backlog, entries SQS refused, and a lost answer
 * resolved by resending with the Idempotency-Key.
 */
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { ManualClock } from '../../lib/api/types.ts';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { createIngestHandler, type IngestHandlerConfig, ingestStreams } from '../../lib/aws/ingest/ingest-handler.ts';
import { decodeBody, probeBody, sourceEnvelope } from '../../lib/aws/sqs/sqs-codec.ts';
import { SendMessageCommand } from '@aws-sdk/client-sqs';
import { createStageQueues, StaticQueues, type StageQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { compile } from '../../lib/graph/compile.ts';
import { type IngestServer, startIngestServer } from '../../lib/local/ingest-server.ts';
import { toIngestRecord } from '../../lib/transport/sources.ts';
import { MAX_EVENT_DEPTH } from '../../lib/transport/ingest-validation.ts';
import { drainQueue, localClients, unique } from './helpers.ts';

const clients = localClients();
const clock = new ManualClock(1_000_000);
const job = new Job(unique('ing'), { parallelism: 2, maxParallelism: 16 });
const orders = job.ingest<{ id: number; ts: number; note?: string }>('orders', { timestamp: (o) => o.ts, maxFutureMs: 60_000, schema: z.object({ id: z.number(), ts: z.number(), note: z.string().optional() }) });
const clicks = job.ingest<{ user: string }>('clicks');
type Order = { id: number; ts: number; note?: string };
orders.union(clicks.map((c): Order => ({ id: -1, ts: 0, note: c.user }))).sinkTo(Sinks.collect(), 'out');
const plan = compile(job.graph);
const streams = ingestStreams(plan);
let queues: StageQueues[];
let server: IngestServer;
const MAX_BODY = 4096;
const MAX_EVENTS = 20;

beforeAll(async () => {
  queues = await createStageQueues(clients.sqs, plan);
  // The embedded endpoint, with a target that validates exactly as the job's sources do.
  server = await startIngestServer(
    {
      streams: () => [...streams.keys()],
      validate: (stream, event) => {
        const r = toIngestRecord(streams.get(stream)!.def, event, clock);
        return typeof r === 'string' ? r : undefined;
      },
      offer: () => ({ ok: true }),
    },
    { maxBodyBytes: MAX_BODY, maxEventsPerRequest: MAX_EVENTS },
  );
});
afterAll(async () => {
  await server.close();
  Object.values(clients).forEach((c) => c.destroy());
});

function handler(extra: Partial<IngestHandlerConfig> = {}) {
  return createIngestHandler({ job, sqs: clients.sqs, queues: new StaticQueues(queues), clock, maxBodyBytes: MAX_BODY, maxEventsPerRequest: MAX_EVENTS, ...extra });
}

function httpEvent(method: string, path: string, headers: Record<string, string>, body?: string | Uint8Array): APIGatewayProxyEventV2 {
  const binary = body instanceof Uint8Array;
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: path,
    rawQueryString: '',
    headers: Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v])),
    requestContext: { http: { method, path, protocol: 'HTTP/1.1', sourceIp: '127.0.0.1', userAgent: 'test' }, requestId: unique('req'), stage: '$default' } as never,
    body: body === undefined ? undefined : binary ? Buffer.from(body).toString('base64') : body,
    isBase64Encoded: binary,
  };
}

async function viaLambda(h: ReturnType<typeof handler>, method: string, path: string, headers: Record<string, string>, body?: string | Uint8Array) {
  const res = await h(httpEvent(method, path, headers, body));
  return { status: res.statusCode!, headers: res.headers as Record<string, string>, body: JSON.parse(res.body!) as Record<string, any> };
}

async function viaServer(method: string, path: string, headers: Record<string, string>, body?: string | Uint8Array) {
  const res = await fetch(server.url + path, { method, headers, body });
  return { status: res.status, headers: Object.fromEntries(res.headers), body: (await res.json()) as Record<string, any> };
}

const json = { 'content-type': 'application/json' };
const order = (id: number, extra: object = {}) => ({ id, ts: 1000 + id, ...extra });
const nest = (levels: number): unknown => (levels === 0 ? 0 : { a: nest(levels - 1) });

/** Events in a stage queue, decoded, with their partition (idle probes apart: `probes`). */
async function enqueued(stage: number, probes: { partition: number; at?: number }[] = []) {
  const out: { partition: number; records: [number, unknown][] }[] = [];
  for (const m of await drainQueue(clients.sqs, queues[stage].url)) {
    const body = decodeBody(m.Body!);
    if (body.k !== 'i') throw new Error(`unexpected message kind ${body.k}`);
    if (body.probe) probes.push({ partition: Number(m.Attributes!.MessageGroupId), at: body.at });
    else out.push({ partition: Number(m.Attributes!.MessageGroupId), records: body.r });
  }
  return out;
}

describe('ingest handler: the embedded endpoint\'s answers', () => {
  const cases: [string, string, string, Record<string, string>, (string | Uint8Array)?][] = [
    ['health', 'GET', '/healthz', {}],
    ['health method', 'POST', '/healthz', json, '[]'],
    ['unknown route', 'POST', '/nope', json, '[]'],
    ['wrong method', 'GET', '/streams/orders/events', {}],
    ['bad percent-encoding', 'POST', '/streams/%E0%A4%A/events', json, '[]'],
    ['unknown stream', 'POST', '/streams/payments/events', json, '[]'],
    ['missing content type', 'POST', '/streams/orders/events', {}, new TextEncoder().encode('[]')],
    ['wrong content type', 'POST', '/streams/orders/events', { 'content-type': 'text/plain' }, '[]'],
    ['wrong charset', 'POST', '/streams/orders/events', { 'content-type': 'application/json; charset=latin1' }, '[]'],
    ['body too large', 'POST', '/streams/orders/events', json, JSON.stringify([order(1, { note: 'x'.repeat(MAX_BODY) })])],
    ['too many events', 'POST', '/streams/orders/events', json, JSON.stringify(Array.from({ length: MAX_EVENTS + 1 }, (_, i) => order(i)))],
    ['too many lines', 'POST', '/streams/orders/events', { 'content-type': 'application/x-ndjson' }, Array.from({ length: MAX_EVENTS + 1 }, (_, i) => JSON.stringify(order(i))).join('\n')],
    ['not UTF-8', 'POST', '/streams/orders/events', json, new Uint8Array([0x5b, 0xff, 0xfe, 0x5d])],
    ['malformed JSON', 'POST', '/streams/orders/events', json, '[{"id": 1}, {"id": 2'],
    ['malformed JSON line', 'POST', '/streams/orders/events', { 'content-type': 'application/jsonl' }, '{"id":1,"ts":1}\n\n{"id":2,,}\n'],
    ['empty body', 'POST', '/streams/orders/events', json, ''],
    ['empty array', 'POST', '/streams/orders/events', json, '[]'],
    ['not an array', 'POST', '/streams/orders/events', json, '{"id":1}'],
    ['blank lines only', 'POST', '/streams/orders/events', { 'content-type': 'application/x-ndjson' }, '\n\n'],
    ['every event invalid', 'POST', '/streams/orders/events', json, JSON.stringify([{ id: 'x' }, { ts: 5 }])],
    ['some events invalid', 'POST', '/streams/orders/events', json, JSON.stringify([order(1), { id: 'x', ts: 1 }, order(2), { id: 3 }])],
    ['gzip body', 'POST', '/streams/orders/events', { ...json, 'content-encoding': 'gzip' }, new Uint8Array(gzipSync(JSON.stringify([order(1)])))],
    ['nested too deep', 'POST', '/streams/orders/events', json, JSON.stringify([order(1, { n: nest(MAX_EVENT_DEPTH) }), order(2, { n: nest(MAX_EVENT_DEPTH - 1) })])],
    ['very deep', 'POST', '/streams/orders/events', json, '[' + '['.repeat(1500) + ']'.repeat(1500) + ']'],
    ['event time too far ahead', 'POST', '/streams/orders/events', json, JSON.stringify([{ id: 1, ts: 8_640_000_000_000_000 }, { id: 2, ts: clock.now() + 60_001 }, { id: 3, ts: clock.now() + 60_000 }])],
    ['event time not an integer', 'POST', '/streams/orders/events', json, JSON.stringify([{ id: 1, ts: 1.5 }, order(2)])],
    ['JSON lines with BOM', 'POST', '/streams/orders/events', { 'content-type': 'application/x-ndjson; charset=utf-8' }, '\ufeff' + JSON.stringify(order(1)) + '\r\n' + JSON.stringify(order(2))],
  ];

  it.each(cases)('%s', async (_name, method, path, headers, body) => {
    const h = handler();
    const [lambda, embedded] = await Promise.all([viaLambda(h, method, path, headers, body), viaServer(method, path, headers, body)]);
    expect(lambda.status).toBe(embedded.status);
    expect(lambda.body).toEqual(embedded.body);
    for (const name of ['allow', 'retry-after']) expect(header(lambda.headers, name)).toBe(embedded.headers[name]);
    await drainQueue(clients.sqs, queues[0].url);
  });
});

describe('ingest handler: bounds on what an event may be, as on the embedded endpoint', () => {
  it('415 for a compressed body; 400 naming the depth limit; event times past maxFutureMs or not integers rejected by name', async () => {
    const h = handler();
    const both = (headers: Record<string, string>, body: string | Uint8Array) => Promise.all([viaLambda(h, 'POST', '/streams/orders/events', headers, body), viaServer('POST', '/streams/orders/events', headers, body)]);
    for (const res of await both({ ...json, 'content-encoding': 'gzip' }, new Uint8Array(gzipSync(JSON.stringify([order(1)]))))) {
      expect(res.status).toBe(415);
      expect(res.body.message).toBe('unsupported content-encoding "gzip"; send the body uncompressed (identity)');
    }
    for (const res of await both(json, '[' + '['.repeat(1500) + ']'.repeat(1500) + ']')) {
      expect(res.status).toBe(400);
      expect(res.body.rejected).toEqual([{ index: 0, error: `(event): expected at most ${MAX_EVENT_DEPTH} levels of nested arrays and objects, received more than ${MAX_EVENT_DEPTH}` }]);
    }
    const now = clock.now();
    const times = JSON.stringify([{ id: 1, ts: 8_640_000_000_000_000 }, { id: 2, ts: now + 60_001 }, { id: 3, ts: now + 60_000 }, { id: 4, ts: 1.5 }]);
    for (const res of await both(json, times)) {
      expect(res.status).toBe(202);
      expect(res.body.accepted).toBe(1);
      expect(res.body.rejected.map((r: { index: number }) => r.index)).toEqual([0, 1, 3]);
      expect(res.body.rejected[0].error).toMatch(/^timestamp: expected at most 60000 ms after arrival \(maxFutureMs; arrival 1000000, .*\), received 8640000000000000 \(\+275760-09-13T00:00:00\.000Z, /);
      expect(res.body.rejected[1].error).toMatch(/received 1060001 \(.*, 60001 ms ahead\)$/);
      expect(res.body.rejected[2].error).toBe('timestamp: expected an integer number of epoch milliseconds, received 1.5');
    }
    // Only the one event on the bound went to SQS.
    expect((await enqueued(0)).flatMap((m) => m.records.map(([t]) => t))).toEqual([now + 60_000]);
  });
});

function header(h: Record<string, string>, name: string): string | undefined {
  return Object.entries(h).find(([k]) => k.toLowerCase() === name)?.[1];
}

describe('ingest handler: SQS', () => {
  it('202 only after SQS took the events: stamped with event time, one partition per request, round-robin', async () => {
    const h = handler({ random: () => 0 });
    const a = await viaLambda(h, 'POST', '/streams/orders/events', json, JSON.stringify([order(1), order(2)]));
    const b = await viaLambda(h, 'POST', '/streams/orders/events', json, JSON.stringify([order(3)]));
    const c = await viaLambda(h, 'POST', '/streams/clicks/events', json, JSON.stringify([{ user: 'u' }]));
    expect([a.status, b.status, c.status]).toEqual([202, 202, 202]);
    expect(a.body).toEqual({ accepted: 2, rejected: [], message: 'accepted 2 events' });
    const got = await enqueued(streams.get('orders')!.stage);
    expect(got.sort((x, y) => x.partition - y.partition)).toEqual([
      { partition: 0, records: [[1001, order(1)], [1002, order(2)]] },
      { partition: 1, records: [[1003, order(3)]] },
    ]);
    // Without a timestamp extractor, the arrival time; each stream takes its own turns.
    expect(await enqueued(streams.get('clicks')!.stage)).toEqual([{ partition: 0, records: [[clock.now(), { user: 'u' }]] }]);
  });

  it('probes the partitions it sent nothing for the idle timeout, at most once per timeout, in the same send', async () => {
    const h = handler({ partitionKey: () => 0 });
    const acc = new AwsAccounting();
    const counted = handler({ partitionKey: () => 0, accounting: acc });
    const probes: { partition: number; at?: number }[] = [];
    const t0 = clock.now();
    expect((await viaLambda(counted, 'POST', '/streams/orders/events', json, JSON.stringify([order(1)]))).status).toBe(202);
    // Data and the probe of the other orders partition went in one SendMessageBatch; the
    // silent clicks stream (its own stage queue) got probes on both partitions in another.
    expect(acc.get('sqs', 'SendMessageBatch').requests).toBe(2);
    const [got, ...more] = await enqueued(streams.get('orders')!.stage, probes);
    expect(more).toEqual([]);
    expect(got.records).toEqual([[1001, order(1)]]);
    const silent = 1 - got.partition; // every event goes to the partition of key 0
    expect(probes).toEqual([{ partition: silent, at: t0 }]);
    const clickProbes: { partition: number; at?: number }[] = [];
    expect(await enqueued(streams.get('clicks')!.stage, clickProbes)).toEqual([]);
    expect(clickProbes.sort((a, b) => a.partition - b.partition)).toEqual([{ partition: 0, at: t0 }, { partition: 1, at: t0 }]);
    // Data messages carry their arrival time too.
    expect((await viaLambda(h, 'POST', '/streams/orders/events', json, JSON.stringify([order(2)]))).status).toBe(202);
    const bodies = (await drainQueue(clients.sqs, queues[streams.get('orders')!.stage].url)).map((m) => decodeBody(m.Body!));
    expect(bodies.filter((b) => b.k === 'i' && !b.probe)).toEqual([{ v: 1, k: 'i', s: 'orders', at: t0, r: [[1002, order(2)]] }]);
    probes.length = 0;
    // No second probe within the timeout (5 s by default); one once it has passed.
    clock.advance(4999);
    await viaLambda(h, 'POST', '/streams/orders/events', json, JSON.stringify([order(3)]));
    await enqueued(streams.get('orders')!.stage, probes);
    expect(probes).toEqual([]);
    clock.advance(1);
    await viaLambda(h, 'POST', '/streams/orders/events', json, JSON.stringify([order(4)]));
    await enqueued(streams.get('orders')!.stage, probes);
    expect(probes).toEqual([{ partition: silent, at: t0 + 5000 }]);

    // The operator handler's view of a probe, and what it refuses.
    const body = decodeBody(probeBody('orders', 7));
    if (body.k !== 'i') throw new Error('expected an ingest message');
    expect(sourceEnvelope(plan, streams.get('orders')!.stage, 1, body, '0000012')).toMatchObject({ probe: true, arrivedAt: 7, records: [], offset: '12' });
    expect(() => decodeBody('{"v":1,"k":"i","s":"orders","at":5,"r":[[1,{}]],"probe":true}')).toThrow(/idle probe: expected "probe": true with "at" and no records/);
    expect(() => decodeBody('{"v":1,"k":"i","s":"orders","at":"soon","r":[]}')).toThrow(/"at" must be epoch milliseconds, received "soon"/);
  });

  it('routes by a partition key when configured', async () => {
    const h = handler({ partitionKey: (_s, e) => (e as { id: number }).id % 3 });
    const res = await viaLambda(h, 'POST', '/streams/orders/events', json, JSON.stringify([0, 1, 2, 3, 4, 5, 6].map((i) => order(i))));
    expect(res.status).toBe(202);
    const got = await enqueued(streams.get('orders')!.stage);
    const partitionOfId = new Map<number, number>();
    for (const m of got) for (const [, e] of m.records) partitionOfId.set((e as { id: number }).id, m.partition);
    expect(partitionOfId.size).toBe(7);
    for (let i = 3; i < 7; i++) expect(partitionOfId.get(i)).toBe(partitionOfId.get(i % 3));
  });

  it('rejects events with characters SQS refuses, and events above the message limit, each with its reason', async () => {
    const h = handler({ maxMessageBytes: 1024, compress: false });
    const body = `[${JSON.stringify(order(1))}, {"id":2,"ts":1,"note":"nul\\u0000"}, {"id":3,"ts":1,"note":"\\ud800 alone"}, {"id":4,"ts":1,"note":"\uffff"}, ${JSON.stringify(order(5, { note: 'y'.repeat(1100) }))}, {"id":6,"ts":1,"note":"emoji 😀 and tab\\t are fine"}]`;
    const res = await viaLambda(h, 'POST', '/streams/orders/events', json, body);
    expect(res.status).toBe(202);
    expect(res.body.accepted).toBe(2);
    expect(res.body.rejected.map((r: { index: number }) => r.index)).toEqual([1, 2, 3, 4]);
    expect(res.body.rejected[0].error).toMatch(/^note: contains U\+0000 at position 3, a character SQS messages cannot carry/);
    expect(res.body.rejected[1].error).toMatch(/^note: contains a lone surrogate U\+D800/);
    expect(res.body.rejected[2].error).toMatch(/^note: contains U\+FFFF/);
    expect(res.body.rejected[3].error).toMatch(/encodes to \d+ bytes, above the SQS message limit of 1024 bytes/);
    const got = await enqueued(streams.get('orders')!.stage);
    expect(got.flatMap((m) => m.records.map(([, e]) => (e as { id: number }).id))).toEqual([1, 6]);

    const none = await viaLambda(h, 'POST', '/streams/orders/events', json, '[{"id":2,"ts":1,"note":"\\u0001"}]');
    expect(none.status).toBe(400);
    expect(none.body.error).toBe('all_events_rejected');
  });

  it('429 with Retry-After while the first stage is backlogged; nothing is enqueued', async () => {
    // The first request also probes partition 1 (idle probes count in the backlog): 2 messages, then 3.
    const h = handler({ maxBacklogMessages: 2, backlogCacheMs: 0, retryAfterMs: 2500 });
    for (const i of [1, 2]) expect((await viaLambda(h, 'POST', '/streams/orders/events', json, JSON.stringify([order(i)]))).status).toBe(202);
    const res = await viaLambda(h, 'POST', '/streams/orders/events', json, JSON.stringify([order(3)]));
    expect(res.status).toBe(429);
    expect(header(res.headers, 'retry-after')).toBe('3');
    expect(res.body).toMatchObject({ error: 'saturated', retryAfterMs: 2500 });
    expect((await enqueued(streams.get('orders')!.stage)).length).toBe(2);
    expect((await viaLambda(h, 'POST', '/streams/orders/events', json, JSON.stringify([order(3)]))).status).toBe(202);
    await enqueued(streams.get('orders')!.stage);
  });

  it('429 while a stage the stream feeds is backlogged, naming the stage; nothing is enqueued', async () => {
    const source = streams.get('orders')!.stage;
    const downstream = plan.stages.find((st) => st.id !== source && st.inputs.some((e) => plan.edges[e].from.kind !== 'source'))!;
    expect(downstream).toBeDefined();
    for (let i = 0; i < 3; i++) {
      await clients.sqs.send(new SendMessageCommand({ QueueUrl: queues[downstream.id].url, MessageBody: `backlog ${i}`, MessageGroupId: '0', MessageDeduplicationId: unique('d') }));
    }
    const h = handler({ maxBacklogMessages: 2, backlogCacheMs: 0 });
    const res = await viaLambda(h, 'POST', '/streams/orders/events', json, JSON.stringify([order(1)]));
    expect(res.status).toBe(429);
    expect(res.body.message).toContain(`is held back: stage ${downstream.id} "${downstream.name}" has 3 messages waiting (bound 2)`);
    expect(await enqueued(source)).toEqual([]);
    await drainQueue(clients.sqs, queues[downstream.id].url);
    expect((await viaLambda(h, 'POST', '/streams/orders/events', json, JSON.stringify([order(1)]))).status).toBe(202);
    await enqueued(source);
  });

  it('lists the events of entries SQS kept refusing as retryable rejections', async () => {
    const { sqs } = localClients();
    sqs.middlewareStack.add(
      (next) => async (args) => {
        const input = (args as { input: { Entries?: { Id: string; MessageBody: string }[] } }).input;
        const victim = input.Entries?.find((e) => e.MessageBody.includes('"id":2'));
        if (!victim) return next(args);
        const rest = input.Entries!.filter((e) => e !== victim);
        const out = (rest.length ? await next({ ...args, input: { ...input, Entries: rest } } as typeof args) : { output: { Successful: [], $metadata: {} }, response: {} }) as { output: { Failed?: unknown[] } };
        out.output.Failed = [{ Id: victim.Id, Code: 'InternalError', SenderFault: false, Message: 'injected' }];
        return out as never;
      },
      { step: 'initialize', name: 'refuseId2' },
    );
    const acc = new AwsAccounting();
    const h = createIngestHandler({ job, sqs, queues: new StaticQueues(queues), clock, accounting: acc, maxSendAttempts: 2, partitionKey: (_s, e) => (e as { id: number }).id });
    const res = await viaLambda(h, 'POST', '/streams/orders/events', json, JSON.stringify([order(1), order(2), order(3)]));
    expect(res.status).toBe(202);
    expect(res.body.accepted).toBe(2);
    expect(res.body.rejected).toEqual([{ index: 1, error: 'SQS did not accept the event: InternalError: injected', retryable: true }]);
    expect((await enqueued(streams.get('orders')!.stage)).flatMap((m) => m.records.map(([, e]) => (e as { id: number }).id)).sort()).toEqual([1, 3]);
    expect(acc.get('sqs', 'SendMessageBatch').requests).toBeGreaterThan(1); // retried before giving up
    const all = await viaLambda(h, 'POST', '/streams/orders/events', json, JSON.stringify([order(2)]));
    expect(all.status).toBe(503);
    expect(all.body).toMatchObject({ error: 'unavailable', accepted: 0 });
    sqs.destroy();
  });

  it('503 when SQS\'s answer is lost; resending with the Idempotency-Key enqueues nothing twice', async () => {
    const { sqs } = localClients();
    let lose = true;
    sqs.middlewareStack.add(
      (next) => async (args) => {
        const out = await next(args);
        if (lose && (args as { input: { Entries?: unknown } }).input.Entries) throw Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
        return out;
      },
      { step: 'initialize', name: 'loseAnswers' },
    );
    const h = createIngestHandler({ job, sqs, queues: new StaticQueues(queues), clock, maxSendAttempts: 2 });
    const body = JSON.stringify([order(1), order(2)]);
    const first = await viaLambda(h, 'POST', '/streams/orders/events', json, body);
    expect(first.status).toBe(503);
    expect(first.body).toMatchObject({ error: 'outcome_unknown', accepted: 0, unconfirmed: [0, 1] });
    lose = false;
    const again = await viaLambda(h, 'POST', '/streams/orders/events', { ...json, 'Idempotency-Key': first.body.idempotencyKey }, body);
    expect(again.status).toBe(202);
    const ids = (await enqueued(streams.get('orders')!.stage)).flatMap((m) => m.records.map(([, e]) => (e as { id: number }).id));
    expect(ids).toEqual([1, 2]);
    sqs.destroy();
  });
});
