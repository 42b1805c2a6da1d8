/**
 * The ingest client (`IngestClient`, `publishEvents` of `sluice`) against the real embedded
 * endpoint: batches within the per-request limits, an Idempotency-Key per batch kept on
 * every resend, a 429's Retry-After honoured through the injected sleep (never the wall
 * clock), a bounded number of resends, an abort, and the accepted, rejected and shed counts.
 * The runtime is stepped by hand, so what is queued when an answer arrives is known.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { BackPressureError, ConfigError, IngestClient, InputRejectedError, Job, publishEvents, retryDelay, Sinks, z } from '../../lib/index.ts';
import type { LoadShedding } from '../../lib/index.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { type IngestServer, type IngestServerOptions, startIngestServer } from '../../lib/local/ingest-server.ts';

interface Ev {
  n: number;
  t: number;
}

let runtime: EmbeddedRuntime | undefined;
let server: IngestServer | undefined;
afterEach(async () => {
  await server?.close();
  runtime = server = undefined;
});

async function serve(endpoint: IngestServerOptions = {}, shed?: LoadShedding<Ev>) {
  const out = Sinks.collect<number>();
  const job = new Job('client', { parallelism: 1 });
  job
    .ingest<Ev>('events', { timestamp: (e) => e.t, schema: z.object({ n: z.number(), t: z.number() }), shed })
    .map((e) => e.n)
    .sinkTo(out);
  runtime = new EmbeddedRuntime(job);
  await runtime.start();
  server = await startIngestServer(runtime, { port: 0, ...endpoint });
  const rt = runtime;
  const drain = async () => {
    while (await rt.step()) {}
  };
  return { out, url: server.url, drain };
}

const events = (from: number, n: number): Ev[] => Array.from({ length: n }, (_, i) => ({ n: from + i, t: from + i }));

/** A fetch that records each request's event count, Idempotency-Key and answer status. */
function recording() {
  const sent: { events: number; key: string; status: number }[] = [];
  const fetcher: typeof fetch = async (input, init) => {
    const res = await fetch(input, init);
    const headers = init!.headers as Record<string, string>;
    sent.push({ events: String(init!.body).trim().split('\n').length, key: headers['idempotency-key']!, status: res.status });
    return res;
  };
  return { sent, fetcher };
}

describe('IngestClient against the embedded endpoint', () => {
  it('sends batches within maxEventsPerRequest, each with its own Idempotency-Key, in order', async () => {
    const { out, url, drain } = await serve();
    const { sent, fetcher } = recording();
    const client = new IngestClient({ url, maxEventsPerRequest: 4, fetch: fetcher });
    const result = await client.send('events', events(0, 10));
    expect(result).toEqual({ sent: 10, accepted: 10, rejected: [], shed: [], replayed: [], requests: 3, retried: { saturated: 0, failed: 0 } });
    expect(sent.map((s) => s.events)).toEqual([4, 4, 2]);
    expect(new Set(sent.map((s) => s.key)).size).toBe(3);
    expect(sent[0]!.key).toMatch(/^[0-9a-f-]{36}:0-3$/);
    await drain();
    expect(out.records).toEqual(events(0, 10).map((e) => e.n));
  });

  it('cuts batches by bytes too, and splits a batch the endpoint finds too large (413)', async () => {
    const { out, url, drain } = await serve({ maxEventsPerRequest: 3 });
    const { sent, fetcher } = recording();
    const one = Buffer.byteLength(JSON.stringify(events(0, 1)[0])) + 1;
    const result = await new IngestClient({ url, maxEventsPerRequest: 100, maxBytesPerRequest: one * 5, fetch: fetcher }).send('events', events(0, 7));
    expect(result.accepted).toBe(7);
    // 5 by bytes, refused (413 above 3 events) and split 3 + 2; then the last 2.
    expect(sent.map((s) => [s.events, s.status])).toEqual([[5, 413], [3, 202], [2, 202], [2, 202]]);
    await drain();
    expect(out.records).toEqual(events(0, 7).map((e) => e.n));
  });

  it('honours a 429: waits its Retry-After, then resends the same batch with the same key; nothing twice', async () => {
    const { out, url, drain } = await serve({ maxQueuedRecords: 5 });
    expect((await publishEvents(url, 'events', events(0, 5))).accepted).toBe(5);
    const { sent, fetcher } = recording();
    const waits: number[] = [];
    // The endpoint is full until the job runs: the wait is where it catches up.
    const sleep = async (ms: number) => {
      waits.push(ms);
      await drain();
    };
    const result = await new IngestClient({ url, fetch: fetcher, sleep }).send('events', events(5, 3));
    expect(sent.map((s) => s.status)).toEqual([429, 202]);
    expect(waits).toEqual([1000]);
    expect(sent[0]!.key).toBe(sent[1]!.key);
    expect(result).toMatchObject({ accepted: 3, requests: 2, retried: { saturated: 1, failed: 0 } });
    await drain();
    expect(out.records).toEqual(events(0, 8).map((e) => e.n));
  });

  it('gives up after `retries` resends with a BackPressureError naming the batch, nothing enqueued', async () => {
    const { out, url, drain } = await serve({ maxQueuedRecords: 2 });
    await publishEvents(url, 'events', events(0, 2));
    const waits: number[] = [];
    const client = new IngestClient({ url, retries: 2, maxEventsPerRequest: 2, sleep: async (ms) => void waits.push(ms) });
    const sending = client.send('events', events(2, 3));
    await expect(sending).rejects.toThrow(BackPressureError);
    await expect(sending).rejects.toThrow(/still saturated after 2 retries; events 0-1 were not enqueued \(0 events of earlier batches were accepted\)/);
    expect(waits).toEqual([1000, 1000]);
    await drain();
    expect(out.records).toEqual([0, 1]);
  });

  it('stops waiting when its signal aborts', async () => {
    const { url } = await serve({ maxQueuedRecords: 1 });
    await publishEvents(url, 'events', events(0, 1));
    const abort = new AbortController();
    const sleep = (ms: number, signal?: AbortSignal) =>
      new Promise<void>((_, reject) => {
        signal!.addEventListener('abort', () => reject(signal!.reason));
        abort.abort(new Error(`aborted while waiting ${ms} ms`));
      });
    await expect(new IngestClient({ url, sleep }).send('events', events(1, 1), { signal: abort.signal })).rejects.toThrow('aborted while waiting 1000 ms');
  });

  it('counts rejected and shed events by their index in what was given', async () => {
    const { url, drain, out } = await serve({}, { whenQueued: 3, drop: 'newest' });
    const bad = [{ n: 0, t: 0 }, { n: 'x', t: 1 }, { n: 2, t: 2 }, { n: 3, t: 3 }, { n: 4, t: 4 }, { n: 5, t: 5 }];
    const result = await publishEvents(url, 'events', bad, { maxEventsPerRequest: 3 });
    // The first batch queues 2 (one rejected), under the bound of 3: the second is kept whole.
    expect(result).toMatchObject({ sent: 6, accepted: 5, shed: [] });
    expect(result.rejected.map((r) => r.index)).toEqual([1]);
    expect(result.rejected[0]!.error).toMatch(/^n: /);
    const more = await publishEvents(url, 'events', events(6, 2));
    expect(more).toMatchObject({ accepted: 0, shed: [{ index: 0, reason: 'newest' }, { index: 1, reason: 'newest' }] });
    await drain();
    expect(out.records).toEqual([0, 2, 3, 4, 5]);
  });

  it('reports a batch the endpoint had already taken as replayed (the same key and body again)', async () => {
    const { url, drain, out } = await serve();
    const client = new IngestClient({ url });
    const key = () => 'batch-1';
    expect((await client.send('events', events(0, 2), { idempotencyKey: key })).replayed).toEqual([]);
    const again = await client.send('events', events(0, 2), { idempotencyKey: key });
    expect(again).toMatchObject({ accepted: 2, replayed: [{ from: 0, to: 1, idempotencyKey: 'batch-1' }] });
    await drain();
    expect(out.records).toEqual([0, 1]);
  });

  it('names an unknown stream and bad options: field, expected, received', async () => {
    const { url } = await serve();
    await expect(publishEvents(url, 'nope', events(0, 1))).rejects.toThrow(InputRejectedError);
    await expect(publishEvents(url, 'nope', events(0, 1))).rejects.toThrow('stream: expected one of "events", received "nope"');
    expect(() => new IngestClient({ url: 'localhost:1' })).toThrow('ingest client url: expected an http(s) URL such as http://127.0.0.1:8787, received "localhost:1"');
    expect(() => new IngestClient({ url, retries: -1 })).toThrow(ConfigError);
    expect(() => new IngestClient({ url, maxEventsPerRequest: 0 })).toThrow('ingest client maxEventsPerRequest: expected a positive integer, received 0');
    expect(() => new IngestClient({ url, sleep: 5 as never })).toThrow('ingest client sleep: expected a function, received number');
    await expect(new IngestClient({ url }).send('events', [undefined])).rejects.toThrow('events[0]: expected a JSON-serialisable value, received undefined');
  });
});

describe('retryDelay', () => {
  const reply = (headers: Record<string, string>, body: Record<string, unknown> = {}) => ({ status: 429, headers: new Headers(headers), body });
  it('reads Retry-After as seconds or an HTTP date against the clock given; the body when it asks for longer; capped', () => {
    const now = Date.parse('2025-03-01T10:00:00Z');
    expect(retryDelay(reply({ 'retry-after': '2' }), 0, 500, now)).toBe(2000);
    expect(retryDelay(reply({ 'retry-after': 'Sat, 01 Mar 2025 10:00:04 GMT' }), 0, 500, now)).toBe(4000);
    expect(retryDelay(reply({ 'retry-after': '1' }, { retryAfterMs: 1500 }), 0, 500, now)).toBe(1500);
    expect(retryDelay(reply({ 'retry-after': '600' }), 0, 500, now, 60_000)).toBe(60_000);
    const backoff = retryDelay(reply({}), 3, 100, now);
    expect(backoff).toBeGreaterThanOrEqual(400);
    expect(backoff).toBeLessThanOrEqual(800);
  });
});
