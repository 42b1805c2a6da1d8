/**
 * Fuzzing the AWS ingest handler against fauxqs (seeded fast-check,
 * test/transport/ingest-cases.ts): never a 5xx other than the documented 503
 * outcome_unknown (resolved by resending with its Idempotency-Key), never a hang; every
 * rejected event named with its field, what was expected and the value received; every
 * accepted event in the first stage's queue exactly once, in order per key (the partition
 * key is the event's key); nothing else there. Where no event has a character SQS refuses,
 * the answer equals the embedded endpoint's for the same request, byte for byte.
 */
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { ManualClock } from '../../lib/api/types.ts';
import { createIngestHandler, ingestStreams } from '../../lib/aws/ingest/ingest-handler.ts';
import { decodeBody } from '../../lib/aws/sqs/sqs-codec.ts';
import { createStageQueues, StaticQueues, type StageQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { compile } from '../../lib/graph/compile.ts';
import { type IngestServer, startIngestServer } from '../../lib/local/ingest-server.ts';
import { toIngestRecord } from '../../lib/transport/sources.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { type Answer, build, type Built, FUZZ_SEED, judge, MAX_BODY, MAX_EVENTS, MAX_FUTURE_MS, NOW, type Order, OrderSchema, requestSpec } from '../transport/ingest-cases.ts';
import { drainQueue, localClients, unique } from './helpers.ts';

const HANG_MS = 10_000;
const clients = localClients();
const clock = new ManualClock(NOW);
const job = new Job(unique('ingfuzz'), { parallelism: 2, maxParallelism: 16 });
job.ingest('orders', { schema: OrderSchema, timestamp: (o) => o.ts, maxFutureMs: MAX_FUTURE_MS }).sinkTo(Sinks.collect(), 'out');
const plan = compile(job.graph);
const streams = ingestStreams(plan);
const stage = streams.get('orders')!.stage;
let queues: StageQueues[];
let server: IngestServer;
let handler: ReturnType<typeof createIngestHandler>;

beforeAll(async () => {
  queues = await createStageQueues(clients.sqs, plan);
  // The partition key is the event's key: its events share a message group, so their order is defined.
  handler = createIngestHandler({ job, sqs: clients.sqs, queues: new StaticQueues(queues), clock, maxBodyBytes: MAX_BODY, maxEventsPerRequest: MAX_EVENTS, partitionKey: (_s, e) => (e as Order).k });
  // The embedded endpoint with the same limits and validation, for the differential check.
  server = await startIngestServer(
    {
      streams: () => [...streams.keys()],
      validate: (name, event) => {
        const r = toIngestRecord(streams.get(name)!.def, event, clock);
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

function httpEvent(built: Built, headers: Record<string, string>): APIGatewayProxyEventV2 {
  // API Gateway hands over text bodies as strings, others base64: both, depending on the body.
  let text: string | undefined;
  try {
    text = built.body.length % 2 === 0 ? new TextDecoder('utf-8', { fatal: true }).decode(built.body) : undefined;
  } catch {
    text = undefined;
  }
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: '/streams/orders/events',
    rawQueryString: '',
    headers,
    requestContext: { http: { method: 'POST', path: '/streams/orders/events', protocol: 'HTTP/1.1', sourceIp: '127.0.0.1', userAgent: 'fuzz' }, requestId: unique('req'), stage: '$default' } as never,
    body: text ?? Buffer.from(built.body).toString('base64'),
    isBase64Encoded: text === undefined,
  };
}

function headersOf(built: Built, extra: Record<string, string> = {}): Record<string, string> {
  const h: Record<string, string> = { ...extra };
  if (built.contentType !== undefined) h['content-type'] = built.contentType;
  if (built.encoding !== undefined) h['content-encoding'] = built.encoding;
  return h;
}

async function withTimeout<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const hang = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} hung for ${HANG_MS} ms`)), HANG_MS)));
  try {
    return await Promise.race([p, hang]);
  } finally {
    clearTimeout(timer);
  }
}

/** The handler's answer; a 503 outcome_unknown is resent with its Idempotency-Key, as its message says. */
async function viaLambda(built: Built): Promise<Answer> {
  let extra: Record<string, string> = {};
  for (let attempt = 0; ; attempt++) {
    const res = await withTimeout(handler(httpEvent(built, headersOf(built, extra))), 'the ingest handler');
    const answer = { status: res.statusCode!, body: JSON.parse(res.body!) as Record<string, any> };
    if (answer.status !== 503 || answer.body.error !== 'outcome_unknown' || attempt === 3) return answer;
    extra = { 'idempotency-key': String(answer.body.idempotencyKey) };
  }
}

async function viaServer(built: Built): Promise<Answer> {
  const res = await fetch(`${server.url}/streams/orders/events`, { method: 'POST', headers: headersOf(built), body: built.body, signal: AbortSignal.timeout(HANG_MS) });
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

/** The events in the first stage's queue, in order per message group (idle probes left out). */
async function enqueued(): Promise<unknown[]> {
  const out: unknown[] = [];
  for (const m of await drainQueue(clients.sqs, queues[stage].url)) {
    const body = decodeBody(m.Body!);
    if (body.k !== 'i') throw new Error(`unexpected message kind ${body.k}`);
    if (!body.probe) for (const [, e] of body.r) out.push(e);
  }
  return out;
}

const byKey = { orderKey: (r: unknown) => (r as Order).k };

describe('ingestion fuzz: the AWS ingest handler on fauxqs', () => {
  it('property: no 5xx, no hang; rejections name field, expectation and value; accepted events enqueued exactly once, in order per key; the embedded endpoint answers the same', async () => {
    await enqueued();
    const statuses = new Map<number, number>();
    let compared = 0;
    let enqueuedTotal = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(requestSpec, { minLength: 1, maxLength: 4 }), async (requests) => {
        let id = 0;
        const sent: unknown[] = [];
        const accepted: unknown[] = [];
        for (const spec of requests) {
          const built = build(spec, () => id++);
          sent.push(...built.events.map((e) => e.text));
          const answer = await viaLambda(built);
          statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
          accepted.push(...judge(built, answer));
          if (!spec.events.some((e) => e.t === 'odd-chars')) {
            const embedded = await viaServer(built);
            expect({ status: answer.status, body: answer.body }, 'the embedded endpoint answered otherwise').toEqual(embedded);
            compared++;
          }
        }
        const got = await enqueued();
        enqueuedTotal += got.length;
        assertExactlyOnce(accepted, got, { ...byKey, input: sent, allowEmpty: true });
      }),
      { seed: FUZZ_SEED, numRuns: 120, endOnFailure: true },
    );
    console.log(`AWS ingest fuzz: statuses ${JSON.stringify(Object.fromEntries(statuses))}, ${compared} answers compared with the embedded endpoint, ${enqueuedTotal} events enqueued`);
    for (const status of [202, 400, 413, 415]) expect(statuses.get(status) ?? 0, `answers ${status}`).toBeGreaterThan(3);
    expect(compared).toBeGreaterThan(50);
    expect(enqueuedTotal).toBeGreaterThan(100);
  }, 120_000);

  it('50 invocations at once: each answered 202 or 400, every accepted event enqueued once', async () => {
    await enqueued();
    const requests = Array.from({ length: 50 }, (_, i) => {
      const events: { id: number; k: string; ts: unknown }[] = i % 5 === 4 ? [{ id: i, k: 'a', ts: 'soon' }] : [{ id: i, k: ['a', 'b', 'c'][i % 3], ts: NOW }, { id: 100 + i, k: 'a', ts: NOW }];
      return { events, built: { body: Buffer.from(JSON.stringify(events)), contentType: 'application/json', encoding: undefined, events: [] } as Built };
    });
    const answers = await Promise.all(requests.map((r) => viaLambda(r.built)));
    expect(answers.map((a) => a.status).filter((s) => s !== 202 && s !== 400)).toEqual([]);
    const accepted = requests.filter((_, i) => answers[i]!.status === 202).flatMap((r) => r.events);
    expect(accepted).toHaveLength(80);
    assertExactlyOnce(accepted, await enqueued());
  }, 60_000);
});
