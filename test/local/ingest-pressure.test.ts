/**
 * Back-pressure at the embedded endpoint: with slow user code the endpoint still answers
 * (time slicing), a request past the queued-records bound or the lag bound gets a 429 with
 * Retry-After and enqueues nothing, and every refusal is counted per event. Order, not
 * time, is observed: what the runtime still had queued when an answer arrived.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { ManualClock } from '../../lib/api/types.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { type IngestServer, type IngestServerOptions, startIngestServer } from '../../lib/local/ingest-server.ts';
import type { EmbeddedOptions } from '../../lib/local/embedded-options.ts';

interface Ev {
  n: number;
  t: number;
}

/** Busy for `ms` of CPU: user code that blocks the event loop, as a heavy map does. */
function busy(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    // spin
  }
}

function slowJob(msPerRecord: number) {
  const out = Sinks.collect<number>();
  const job = new Job('slow', { parallelism: 1 });
  job
    .ingest<Ev>('events', { timestamp: (e) => e.t })
    .map((e) => {
      busy(msPerRecord);
      return e.n;
    })
    .sinkTo(out);
  return { job, out };
}

let runtime: EmbeddedRuntime | undefined;
let server: IngestServer | undefined;
let loop: Promise<void> | undefined;
afterEach(async () => {
  runtime?.stop();
  await loop;
  await server?.close();
  runtime = server = loop = undefined;
});

async function serve(job: Job, options: EmbeddedOptions, endpoint: IngestServerOptions = {}, run = true) {
  runtime = new EmbeddedRuntime(job, options);
  await runtime.start();
  if (run) loop = runtime.loop();
  server = await startIngestServer(runtime, { port: 0, ...endpoint });
  return { runtime, server };
}

const events = (from: number, n: number): Ev[] => Array.from({ length: n }, (_, i) => ({ n: from + i, t: from + i }));

async function post(s: IngestServer, body: unknown, contentType = 'application/json') {
  const res = await fetch(`${s.url}/streams/events/events`, { method: 'POST', headers: { 'content-type': contentType }, body: typeof body === 'string' ? body : JSON.stringify(body) });
  return { status: res.status, retryAfter: res.headers.get('retry-after'), body: (await res.json()) as Record<string, any> };
}

const until = async (f: () => boolean) => {
  for (let i = 0; !f(); i++) {
    if (i > 20_000) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 1));
  }
};

describe('back-pressure at the embedded endpoint', () => {
  it('answers a request while an earlier request is still being processed by slow user code (time slicing)', async () => {
    const { job, out } = slowJob(1);
    const { runtime: rt, server: s } = await serve(job, { sliceMs: 20 });
    expect((await post(s, events(0, 500))).status).toBe(202);
    // The job has started on the first request's events...
    await until(() => out.records.length > 0);
    // ...and a second request is answered before it has finished them: the runtime still has queued records.
    const second = await post(s, events(500, 1));
    expect(second.status).toBe(202);
    const queued = rt.stats().queuedRecords;
    expect(out.records.length).toBeLessThan(500);
    expect(queued).toBeGreaterThan(0);
    // Nothing lost, in order.
    await until(() => out.records.length === 501);
    expect(out.records).toEqual(events(0, 501).map((e) => e.n));
  });

  it('a request that would pass the queued-records bound gets a 429 with Retry-After and enqueues nothing', async () => {
    const { job, out } = slowJob(0);
    const { runtime: rt, server: s } = await serve(job, {}, { maxQueuedRecords: 10 }, false);
    expect((await post(s, events(0, 8))).status).toBe(202);
    expect(rt.pressure('events')!.queuedRecords).toBe(8);
    const refused = await post(s, events(8, 3));
    expect(refused.status).toBe(429);
    expect(Number(refused.retryAfter)).toBeGreaterThanOrEqual(1);
    expect(refused.body.message).toMatch(/8 records queued; with these 3 it would pass the bound of 10/);
    expect(rt.pressure('events')!.queuedRecords).toBe(8);
    // Exactly up to the bound is fine.
    expect((await post(s, events(8, 2))).status).toBe(202);
    while (await rt.step()) {}
    expect(out.records).toEqual(events(0, 10).map((e) => e.n));
    expect(s.rejections()).toEqual({ events: 3, byStatus: { 429: 3 }, requests: 0 });
  });

  it('the lag bound: 429 once the oldest accepted, unprocessed event is maxLagMs old; accepted again once processed', async () => {
    const clock = new ManualClock(1_000_000);
    const { job, out } = slowJob(0);
    const { runtime: rt, server: s } = await serve(job, { clock }, { maxLagMs: 5000 }, false);
    expect((await post(s, events(0, 3))).status).toBe(202);
    clock.advance(4999);
    expect(rt.pressure('events')!.lagMs).toBe(4999);
    expect((await post(s, events(3, 1))).status).toBe(202);
    clock.advance(1);
    const refused = await post(s, events(4, 2));
    expect(refused.status).toBe(429);
    expect(refused.retryAfter).toBe('1');
    expect(refused.body.message).toMatch(/lags 5000 ms behind, at or past the bound of 5000 ms/);
    // Read into a chunk but not processed yet: still lagging.
    await rt.step();
    expect(rt.pressure('events')!.lagMs).toBe(5000);
    while (await rt.step()) {}
    expect(rt.pressure('events')).toMatchObject({ queuedRecords: 0, lagMs: 0 });
    expect((await post(s, events(6, 1))).status).toBe(202);
    while (await rt.step()) {}
    expect(out.records).toEqual([0, 1, 2, 3, 6]);
    expect(s.rejections().byStatus).toEqual({ 429: 2 });
  });

  it('counts what the endpoint refuses, per event (400 invalid, 429) and per request when its events are unknown (400 malformed, 415)', async () => {
    const { job } = slowJob(0);
    const { server: s } = await serve(job, {}, { maxQueuedRecords: 5 }, false);
    // One invalid event in a 202 (no timestamp field: the extractor yields undefined).
    expect((await post(s, [{ n: 1, t: 1 }, { n: 2 }])).status).toBe(202);
    // All invalid: 400.
    expect((await post(s, [{ n: 3 }, { n: 4 }])).status).toBe(400);
    // Past the bound: the valid ones count as 429, the invalid one as 400.
    expect((await post(s, [...events(10, 5), { n: 99 }])).status).toBe(429);
    expect((await post(s, '[{', 'application/json')).status).toBe(400);
    expect((await post(s, 'x', 'text/plain')).status).toBe(415);
    expect(s.rejections()).toEqual({ events: 9, byStatus: { 400: 4, 429: 5 }, requests: 2 });
  });
});
