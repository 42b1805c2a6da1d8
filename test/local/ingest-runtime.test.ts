/** The HTTP endpoint in front of the real embedded runtime: accepted events come out of the job, refused ones never enter. */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Job } from '../../lib/api/stream.ts';
import { Sinks } from '../../lib/api/sinks.ts';
import { valueState } from '../../lib/api/state.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { startIngestServer, type IngestServer } from '../../lib/local/ingest-server.ts';

const Click = z.object({ user: z.string(), at: z.number().int() });
type Click = z.infer<typeof Click>;

let server: IngestServer | undefined;
let runtime: EmbeddedRuntime | undefined;
afterEach(async () => {
  runtime?.stop();
  await server?.close();
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
});
