/** The HTTP endpoint in front of the real embedded runtime: accepted events come out of the job, refused ones never enter. */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Job } from '../../lib/api/stream.ts';
import { Sinks } from '../../lib/api/sinks.ts';
import { valueState } from '../../lib/api/state.ts';
import { ManualClock } from '../../lib/api/types.ts';
import { JobDefinitionError } from '../../lib/errors.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { startIngestServer, type IngestServer } from '../../lib/local/ingest-server.ts';

const Click = z.object({ user: z.string(), at: z.number().int() });
type Click = z.infer<typeof Click>;

let server: IngestServer | undefined;
let runtime: EmbeddedRuntime | undefined;
afterEach(async () => {
  runtime?.stop();
  await server?.close();
  runtime = undefined;
  server = undefined;
});

function buildJob() {
  const out = Sinks.collect<{ user: string; clicks: number }>();
  const job = new Job('clicks', { parallelism: 2 });
  job
    .ingest<Click>('clicks', { schema: Click, timestamp: (c) => c.at })
    .keyBy((c) => c.user)
    .process({
      state: { n: valueState<number>() },
      processElement(c, ctx) {
        const n = (ctx.state.n.get() ?? 0) + 1;
        ctx.state.n.set(n);
        ctx.emit({ user: c.user, clicks: n });
      },
    })
    .sinkTo(out);
  return { job, out };
}

describe('ingestion endpoint over the embedded runtime', () => {
  it('processes every accepted event once and reports rejected ones by index', async () => {
    const { job, out } = buildJob();
    runtime = new EmbeddedRuntime(job);
    await runtime.start();
    const loop = runtime.loop();
    server = await startIngestServer(runtime, { port: 0 });
    const res = await fetch(`${server.url}/streams/clicks/events`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify([{ user: 'ann', at: 1 }, { user: 'bob', at: 'soon' }, { user: 'ann', at: 2 }, { at: 3 }]),
    });
    expect(res.status).toBe(202);
    const body = (await res.json()) as { accepted: number; rejected: { index: number; error: string }[] };
    expect(body.accepted).toBe(2);
    expect(body.rejected.map((r) => r.index)).toEqual([1, 3]);
    expect(body.rejected[0].error).toMatch(/^at: /);
    expect(body.rejected[1].error).toMatch(/^user: /);
    const deadline = Date.now() + 5000;
    while (out.records.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    expect(out.records).toEqual([
      { user: 'ann', clicks: 1 },
      { user: 'ann', clicks: 2 },
    ]);
    runtime.stop();
    await loop;
  });

  it('answers 429 with Retry-After and enqueues nothing when the runtime is saturated', async () => {
    const { job, out } = buildJob();
    runtime = new EmbeddedRuntime(job, { queueCapacity: 2 });
    await runtime.start();
    server = await startIngestServer(runtime, { port: 0 });
    const events = Array.from({ length: 5 }, (_, i) => ({ user: 'u', at: i }));
    const res = await fetch(`${server.url}/streams/clicks/events`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(events),
    });
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBe('1');
    while (await runtime.step()) {}
    expect(out.records).toEqual([]);
  });

  it('maxFutureMs: an event time further ahead of arrival is rejected naming the field, the limit and the value; so is a non-integer one', async () => {
    const clock = new ManualClock(1_700_000_000_000);
    const out = Sinks.collect<number>();
    const job = new Job('future', { parallelism: 1 });
    job
      .ingest<{ t: number }>('ticks', { timestamp: (e) => e.t, maxFutureMs: 60_000 })
      .map((e) => e.t)
      .sinkTo(out);
    runtime = new EmbeddedRuntime(job, { clock });
    await runtime.start();
    server = await startIngestServer(runtime, { port: 0 });
    const now = clock.now();
    const post = (events: unknown[]) =>
      fetch(`${server!.url}/streams/ticks/events`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(events) });
    // The year-275760 event of the report (the largest date there is), one just past the bound, one on it, a fraction, and the past.
    const res = await post([{ t: 8_640_000_000_000_000 }, { t: now + 60_001 }, { t: now + 60_000 }, { t: now + 0.5 }, { t: now - 3_600_000 }]);
    expect(res.status).toBe(202);
    const body = (await res.json()) as { accepted: number; rejected: { index: number; error: string }[] };
    expect(body.accepted).toBe(2);
    expect(body.rejected).toEqual([
      { index: 0, error: `timestamp: expected at most 60000 ms after arrival (maxFutureMs; arrival ${now}, 2023-11-14T22:13:20.000Z), received 8640000000000000 (+275760-09-13T00:00:00.000Z, ${8_640_000_000_000_000 - now} ms ahead)` },
      { index: 1, error: `timestamp: expected at most 60000 ms after arrival (maxFutureMs; arrival ${now}, 2023-11-14T22:13:20.000Z), received ${now + 60_001} (2023-11-14T22:14:20.001Z, 60001 ms ahead)` },
      { index: 3, error: `timestamp: expected an integer number of epoch milliseconds, received ${now + 0.5}` },
    ]);
    // Only one far-future event: every event rejected, nothing enqueued.
    const only = await post([{ t: 8_640_000_000_000_000 }]);
    expect(only.status).toBe(400);
    // Arrival moves with the clock: the same time is fine later.
    clock.advance(1);
    expect((await post([{ t: now + 60_001 }])).status).toBe(202);
    while (await runtime.step()) {}
    expect(out.records).toEqual([now + 60_000, now - 3_600_000, now + 60_001]);
  });

  it('maxFutureMs must be a non-negative integer, on an ingestion stream', () => {
    expect(() => new Job('j').ingest('s', { maxFutureMs: -1 })).toThrow(JobDefinitionError);
    expect(() => new Job('j').ingest('s', { maxFutureMs: 1.5 })).toThrow(/maxFutureMs as a non-negative integer/);
    expect(() => new Job('j').fromItems('s', [1], { maxFutureMs: 1000 })).toThrow(/only on an ingestion stream/);
  });
});
