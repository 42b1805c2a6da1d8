/**
 * Fuzzing the embedded HTTP ingestion endpoint in front of the real embedded runtime
 * (seeded fast-check, test/transport/ingest-cases.ts): whatever arrives, the answer is
 * never a 5xx and never hangs; every rejected event is named with its field, what was
 * expected and the value received; every accepted event comes out of the job exactly once
 * and in order per key (one source partition). Then slow clients, clients that vanish
 * mid-body, and many connections at once, and the default limits with huge batches.
 */
import { connect } from 'node:net';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { ManualClock } from '../../lib/api/types.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { type IngestServer, startIngestServer } from '../../lib/local/ingest-server.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_EVENTS } from '../../lib/transport/ingest-validation.ts';
import { type Answer, build, FUZZ_SEED, judge, MAX_BODY, MAX_EVENTS, MAX_FUTURE_MS, NOW, type Order, OrderSchema, requestSpec } from '../transport/ingest-cases.ts';

/** A request that takes longer than this has hung (the endpoint answers in milliseconds). */
const HANG_MS = 10_000;

interface Endpoint {
  server: IngestServer;
  runtime: EmbeddedRuntime;
  out: ReturnType<typeof Sinks.collect<Order>>;
  loop: Promise<void>;
}
let open: Endpoint | undefined;
afterEach(async () => {
  if (!open) return;
  open.runtime.stop();
  await open.loop;
  await open.server.close();
  open = undefined;
});

/** The job: one source partition straight into a collect sink, so the output keeps the acceptance order. */
async function startEndpoint(limits: { maxBodyBytes?: number; maxEventsPerRequest?: number } = { maxBodyBytes: MAX_BODY, maxEventsPerRequest: MAX_EVENTS }): Promise<Endpoint> {
  const out = Sinks.collect<Order>();
  const job = new Job('ingest-fuzz', { parallelism: 2 });
  job.ingest('orders', { schema: OrderSchema, timestamp: (o) => o.ts, maxFutureMs: MAX_FUTURE_MS, parallelism: 1 }).sinkTo(out);
  const runtime = new EmbeddedRuntime(job, { clock: new ManualClock(NOW) });
  await runtime.start();
  const loop = runtime.loop();
  const server = await startIngestServer(runtime, { port: 0, ...limits });
  open = { server, runtime, out, loop };
  return open;
}

/** Lets the job finish what it was given: until `n` records are out, then every round until none progresses. */
async function finish(e: Endpoint, n: number): Promise<Order[]> {
  const deadline = Date.now() + HANG_MS;
  while (e.out.records.length < n && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
  e.runtime.stop();
  await e.loop;
  while (await e.runtime.step());
  e.loop = Promise.resolve();
  return e.out.records;
}

async function send(url: string, body: Uint8Array, contentType?: string, encoding?: string): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (contentType !== undefined) headers['content-type'] = contentType;
  if (encoding !== undefined) headers['content-encoding'] = encoding;
  const res = await fetch(`${url}/streams/orders/events`, { method: 'POST', headers, body, signal: AbortSignal.timeout(HANG_MS) });
  const text = await res.text();
  let parsed: Record<string, any>;
  try {
    parsed = JSON.parse(text) as Record<string, any>;
  } catch {
    throw new Error(`status ${res.status} with a body that is not JSON: ${text.slice(0, 200)}`);
  }
  return { status: res.status, body: parsed };
}

const byKey = { orderKey: (r: unknown) => (r as Order).k };

describe('ingestion fuzz: the embedded endpoint', () => {
  it('property: no 5xx, no hang; rejections name field, expectation and value; accepted events come out exactly once, in order per key', async () => {
    const statuses = new Map<number, number>();
    let rejections = 0;
    let outputs = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(requestSpec, { minLength: 1, maxLength: 6 }), async (requests) => {
        const e = await startEndpoint();
        let id = 0;
        const sent: unknown[] = [];
        const accepted: unknown[] = [];
        for (const spec of requests) {
          const built = build(spec, () => id++);
          sent.push(...built.events.map((x) => x.text));
          const answer = await send(e.server.url, built.body, built.contentType, built.encoding);
          statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
          rejections += (answer.body.rejected ?? []).length;
          accepted.push(...judge(built, answer, { strictOdd: true }));
        }
        const output = await finish(e, accepted.length);
        outputs += output.length;
        assertExactlyOnce(accepted, output, { ...byKey, input: sent, allowEmpty: true });
        await e.server.close();
        open = undefined;
      }),
      { seed: FUZZ_SEED, numRuns: 250, endOnFailure: true },
    );
    // The generator reached every outcome (the property is not passing vacuously).
    console.log(`embedded ingest fuzz: statuses ${JSON.stringify(Object.fromEntries(statuses))}, ${rejections} events rejected, ${outputs} records out`);
    for (const status of [202, 400, 413, 415]) expect(statuses.get(status) ?? 0, `answers ${status}`).toBeGreaterThan(5);
    expect(rejections).toBeGreaterThan(50);
    expect(outputs).toBeGreaterThan(200);
  }, 120_000);

  it('a slow client does not hold others up, and one that vanishes mid-body enqueues nothing', async () => {
    const e = await startEndpoint();
    const url = new URL(e.server.url);
    const body = Buffer.from(JSON.stringify([{ id: 1, k: 'a', ts: NOW }, { id: 2, k: 'b', ts: NOW }]));
    // Slow: the body a few bytes at a time while another client is served.
    const slow = new Promise<string>((resolve, reject) => {
      const sock = connect(Number(url.port), url.hostname);
      let got = '';
      sock.on('error', reject);
      sock.on('data', (d) => (got += d.toString()));
      sock.on('end', () => resolve(got));
      sock.on('connect', async () => {
        sock.write(`POST /streams/orders/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`);
        for (let i = 0; i < body.length; i += 7) {
          sock.write(body.subarray(i, i + 7));
          await new Promise((r) => setTimeout(r, 5));
        }
      });
    });
    // Vanishing: half a body, then the socket is destroyed.
    await new Promise<void>((resolve, reject) => {
      const sock = connect(Number(url.port), url.hostname);
      sock.on('error', reject);
      sock.on('connect', () => {
        const other = Buffer.from(JSON.stringify([{ id: 99, k: 'c', ts: NOW }]));
        sock.write(`POST /streams/orders/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${other.length}\r\n\r\n`);
        sock.write(other.subarray(0, 10), () => {
          sock.destroy();
          resolve();
        });
      });
    });
    const quick = await send(e.server.url, Buffer.from(JSON.stringify([{ id: 3, k: 'a', ts: NOW }])), 'application/json');
    expect(quick.status).toBe(202);
    const answer = await slow;
    expect(answer).toMatch(/^HTTP\/1\.1 202 /);
    const output = await finish(e, 3);
    assertExactlyOnce([{ id: 3, k: 'a', ts: NOW }, { id: 1, k: 'a', ts: NOW }, { id: 2, k: 'b', ts: NOW }], output);
  }, 30_000);

  it('200 connections at once, valid and invalid: every answer 2xx or 4xx, every accepted event out once', async () => {
    const e = await startEndpoint();
    const answers = await Promise.all(
      Array.from({ length: 200 }, (_, i) => {
        const events: { id: number; k: string; ts: unknown }[] = i % 5 === 4 ? [{ id: i, k: 'a', ts: 'soon' }] : [{ id: i, k: ['a', 'b', 'c'][i % 3], ts: NOW }];
        return send(e.server.url, Buffer.from(JSON.stringify(events)), 'application/json').then((a) => ({ a, events }));
      }),
    );
    const accepted = answers.filter(({ a }) => a.status === 202).flatMap(({ events }) => events);
    expect(answers.map(({ a }) => a.status).filter((s) => s !== 202 && s !== 400)).toEqual([]);
    expect(accepted).toHaveLength(160);
    assertExactlyOnce(accepted, await finish(e, accepted.length));
  }, 30_000);

  it('default limits: exactly 10,000 events and exactly 1 MiB are taken, one more of either is a 413', async () => {
    const e = await startEndpoint({});
    const many = Array.from({ length: DEFAULT_MAX_EVENTS }, (_, i) => ({ id: i, k: 'a', ts: NOW }));
    expect((await send(e.server.url, Buffer.from(JSON.stringify(many)), 'application/json')).status).toBe(202);
    const tooMany = [...many.map((m) => ({ ...m, id: m.id + DEFAULT_MAX_EVENTS })), { id: 2 * DEFAULT_MAX_EVENTS, k: 'a', ts: NOW }];
    expect((await send(e.server.url, Buffer.from(JSON.stringify(tooMany)), 'application/json')).status).toBe(413);
    // One event padded to the body limit exactly, then one byte over.
    const at = (bytes: number, id: number) => {
      const bare = JSON.stringify([{ id, k: 'b', ts: NOW, note: '' }]);
      return Buffer.from(JSON.stringify([{ id, k: 'b', ts: NOW, note: 'p'.repeat(bytes - bare.length) }]));
    };
    expect(at(DEFAULT_MAX_BODY_BYTES, -1).length).toBe(DEFAULT_MAX_BODY_BYTES);
    const exact = await send(e.server.url, at(DEFAULT_MAX_BODY_BYTES, -1), 'application/json');
    expect(exact.status).toBe(202);
    const over = await send(e.server.url, at(DEFAULT_MAX_BODY_BYTES + 1, -2), 'application/json');
    expect(over.status).toBe(413);
    const output = await finish(e, DEFAULT_MAX_EVENTS + 1);
    assertExactlyOnce([...many, JSON.parse(at(DEFAULT_MAX_BODY_BYTES, -1).toString())[0]], output, byKey);
  }, 60_000);
});
