import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Job } from '../../lib/api/stream.ts';
import { Sinks } from '../../lib/api/sinks.ts';
import { listState, mapState, valueState } from '../../lib/api/state.ts';
import { type Key, ManualClock, OutputTag, WatermarkStrategies } from '../../lib/api/types.ts';
import { EmbeddedRuntime, runJob } from '../../lib/local/embedded.ts';
import { InMemoryStateBackend } from '../../lib/state/memory.ts';

interface Ev {
  k: string;
  v: number;
  t: number;
}
const events = (n: number, keys = 5): Ev[] => Array.from({ length: n }, (_, i) => ({ k: `k${i % keys}`, v: i, t: i * 10 }));

describe('stateless operators', () => {
  it('map, filter, flatMap and union keep every record exactly once, in input order per partition', async () => {
    const job = new Job('stateless', { parallelism: 1 });
    const out = Sinks.collect<number>();
    const a = job.fromItems('a', [1, 2, 3, 4]);
    const b = job.fromItems('b', [10, 20]);
    a.filter((x) => x % 2 === 0)
      .flatMap((x) => [x, x * 100])
      .map((x) => x + 1)
      .union(b.map((x) => x))
      .sinkTo(out);
    await runJob(job);
    expect(out.records.slice().sort((x, y) => x - y)).toEqual([3, 5, 10, 20, 201, 401]);
    const fromA = out.records.filter((x) => x < 10 || x > 100);
    expect(fromA).toEqual([3, 201, 5, 401]);
  });
});

describe('keyed state', () => {
  it('value, list and map state are per key and survive across batches', async () => {
    const job = new Job('keyed', { parallelism: 2 });
    const out = Sinks.collect<{ k: string; sum: number; last3: number[]; parity: [string, number][] }>();
    job
      .fromItems('in', events(1000), { timestamp: (e) => e.t })
      .keyBy((e) => e.k)
      .process({
        state: { sum: valueState<number>(), last: listState<number>(), parity: mapState<string, number>() },
        processElement(e, ctx) {
          ctx.state.sum.set((ctx.state.sum.get() ?? 0) + e.v);
          ctx.state.last.update([...ctx.state.last.get(), e.v].slice(-3));
          const p = e.v % 2 ? 'odd' : 'even';
          ctx.state.parity.set(p, (ctx.state.parity.get(p) ?? 0) + 1);
          ctx.timers.registerEventTimeTimer(Number.MAX_SAFE_INTEGER);
        },
        onTimer(_t, ctx) {
          ctx.emit({ k: ctx.key, sum: ctx.state.sum.get()!, last3: ctx.state.last.get(), parity: ctx.state.parity.entries() });
        },
      })
      .sinkTo(out);
    await runJob(job, { sourceBatchSize: 37 });
    const byKey = Object.fromEntries(out.records.map((r) => [r.k, r]));
    expect(Object.keys(byKey).sort()).toEqual(['k0', 'k1', 'k2', 'k3', 'k4']);
    // k0 holds 0, 5, ..., 995: sum = 5 * (0 + ... + 199)
    expect(byKey.k0.sum).toBe(5 * 199 * 100);
    expect(byKey.k0.last3).toEqual([985, 990, 995]);
    expect(byKey.k1.parity).toEqual([['even', 100], ['odd', 100]]);
  });

  it("a timer's key is the key its records had (numbers, -0 as 0, strings and arrays)", async () => {
    const job = new Job('timer-keys', { parallelism: 1 });
    const keys: Key[] = [7, -0, 'seven', '', [7, 'x']];
    const out = Sinks.collect<{ key: unknown; same: boolean }>();
    job
      .fromItems('in', keys.map((key, t) => ({ key, t })), { timestamp: (e) => e.t })
      .keyBy((e) => e.key)
      .process({
        state: { seen: valueState<boolean>() },
        processElement(_e, ctx) {
          ctx.state.seen.set(true);
          ctx.timers.registerEventTimeTimer(100);
        },
        onTimer(_t, ctx) {
          ctx.emit({ key: ctx.key, same: typeof ctx.key !== 'object' && keys.includes(ctx.key) });
        },
      })
      .sinkTo(out);
    await runJob(job);
    const byKey = new Map(out.records.map((r) => [JSON.stringify(r.key), r]));
    expect(byKey.size).toBe(5);
    expect(Object.is(byKey.get('0')!.key, 0)).toBe(true);
    expect(byKey.get('7')).toEqual({ key: 7, same: true });
    expect(byKey.get('"seven"')).toEqual({ key: 'seven', same: true });
    expect(byKey.get('""')).toEqual({ key: '', same: true });
    expect(byKey.get('[7,"x"]')).toEqual({ key: [7, 'x'], same: false });
  });

  it('processes the records of one key in the order their source partition received them', async () => {
    const job = new Job('order', { parallelism: 3 });
    const out = Sinks.collect<{ k: string; seen: number[] }>();
    job
      .fromItems('in', events(3000, 7), { timestamp: (e) => e.t })
      .keyBy((e) => e.k)
      .process({
        state: { seen: listState<number>() },
        processElement(e, ctx) {
          ctx.state.seen.add(e.v);
          ctx.timers.registerEventTimeTimer(Number.MAX_SAFE_INTEGER);
        },
        onTimer(_t, ctx) {
          ctx.emit({ k: ctx.key as string, seen: ctx.state.seen.get() });
        },
      })
      .sinkTo(out);
    await runJob(job, { sourceBatchSize: 50 });
    expect(out.records).toHaveLength(7);
    for (const r of out.records) {
      // Source partition p holds chunks p, p+3, ...; within it values increase, so per key and partition they must too.
      const byPartition = new Map<number, number[]>();
      for (const v of r.seen) {
        const p = Math.floor(v / 50) % 3;
        byPartition.set(p, [...(byPartition.get(p) ?? []), v]);
      }
      for (const vs of byPartition.values()) expect(vs).toEqual([...vs].sort((a, b) => a - b));
    }
    expect(out.records.reduce((n, r) => n + r.seen.length, 0)).toBe(3000);
  });

  it('expires state after its TTL in processing time', async () => {
    const clock = new ManualClock(0);
    const job = new Job('ttl', { parallelism: 1 });
    const out = Sinks.collect<{ v: number; prev: number | null }>();
    job
      .ingest<{ v: number }>('in')
      .keyBy(() => 'one')
      .process({
        state: { last: valueState<number>({ ttlMs: 1000 }) },
        processElement(e, ctx) {
          ctx.emit({ v: e.v, prev: ctx.state.last.get() ?? null });
          ctx.state.last.set(e.v);
        },
      })
      .sinkTo(out);
    const rt = new EmbeddedRuntime(job, { clock });
    await rt.start();
    const drain = async () => {
      while (await rt.step()) {}
    };
    rt.offer('in', [{ v: 1 }]);
    await drain();
    clock.advance(999);
    rt.offer('in', [{ v: 2 }]);
    await drain();
    clock.advance(1000);
    rt.offer('in', [{ v: 3 }]);
    await drain();
    expect(out.records).toEqual([
      { v: 1, prev: null },
      { v: 2, prev: 1 },
      { v: 3, prev: null },
    ]);
  });
});

describe('timers', () => {
  it('event-time timers fire once the watermark passes them, in time order, and can be deleted', async () => {
    const job = new Job('timers', { parallelism: 1 });
    const out = Sinks.collect<string>();
    job
      .fromItems('in', [
        { k: 'a', t: 100 },
        { k: 'a', t: 150 },
        { k: 'b', t: 120 },
        { k: 'b', t: 400 },
      ], { timestamp: (e) => e.t, watermark: WatermarkStrategies.boundedOutOfOrderness(0) })
      .keyBy((e) => e.k)
      .process({
        processElement(e, ctx) {
          ctx.timers.registerEventTimeTimer(e.t + 100);
          if (e.t === 150) ctx.timers.deleteEventTimeTimer(200);
        },
        onTimer(t, ctx) {
          ctx.emit(`${ctx.key}@${t} wm>=${ctx.timers.currentWatermark() >= t}`);
        },
      })
      .sinkTo(out);
    await runJob(job, { sourceBatchSize: 1 });
    expect(out.records).toEqual(['b@220 wm>=true', 'a@250 wm>=true', 'b@500 wm>=true']);
  });

  it('processing-time timers fire from the clock', async () => {
    const clock = new ManualClock(1000);
    const job = new Job('ptimers', { parallelism: 1 });
    const out = Sinks.collect<string>();
    job
      .ingest<{ k: string }>('in')
      .keyBy((e) => e.k)
      .process({
        processElement(e, ctx) {
          ctx.timers.registerProcessingTimeTimer(ctx.timers.currentProcessingTime() + 500);
        },
        onTimer(t, ctx) {
          ctx.emit(`${ctx.key}@${t}:${(ctx as unknown as { timeDomain: string }).timeDomain}`);
        },
      })
      .sinkTo(out);
    const rt = new EmbeddedRuntime(job, { clock });
    await rt.start();
    rt.offer('in', [{ k: 'x' }]);
    while (await rt.step()) {}
    expect(out.records).toEqual([]);
    clock.advance(500);
    while (await rt.step()) {}
    expect(out.records).toEqual(['x@1500:processing']);
  });
});

describe('side outputs, errors and rejected input', () => {
  it('routes side outputs to their own stream', async () => {
    const job = new Job('side', { parallelism: 1 });
    const small = new OutputTag<number>('small');
    const main = Sinks.collect<number>();
    const side = Sinks.collect<number>();
    const processed = job
      .fromItems('in', [1, 50, 2, 70])
      .keyBy((x) => x % 2)
      .process({
        processElement(x, ctx) {
          if (x < 10) ctx.output(small, x);
          else ctx.emit(x);
        },
      });
    processed.sinkTo(main);
    processed.getSideOutput(small).sinkTo(side);
    await runJob(job);
    expect(main.records.sort()).toEqual([50, 70]);
    expect(side.records.sort()).toEqual([1, 2]);
  });

  it('retries a record whose user code throws, then parks it in the dead-letter queue; its neighbours are processed', async () => {
    const job = new Job('dlq', { parallelism: 1 });
    const out = Sinks.collect<number>();
    let calls = 0;
    job
      .fromItems('in', [1, 2, 3, 4, 5])
      .keyBy(() => 'k')
      .process({
        processElement(x, ctx) {
          if (x === 3) {
            calls++;
            throw new Error('three is bad');
          }
          ctx.emit(x);
        },
      })
      .name('picky')
      .sinkTo(out);
    const { runtime, stats } = await runJob(job, { maxAttempts: 3 });
    expect(out.records).toEqual([1, 2, 4, 5]);
    expect(calls).toBe(3);
    expect(stats.deadLetters).toBe(1);
    expect(runtime.deadLetters[0]).toMatchObject({ operator: 'picky', attempts: 3, record: { value: 3 } });
    expect(runtime.deadLetters[0].error).toMatch(/operator "picky" threw: three is bad/);
  });

  it('reports events whose timestamp cannot be read instead of dropping them silently', async () => {
    const job = new Job('badts', { parallelism: 1 });
    const out = Sinks.collect<{ t: unknown }>();
    job.fromItems('in', [{ t: 1 }, { t: 'x' }, { t: 3 }], { timestamp: (e) => e.t as number }).sinkTo(out);
    const { runtime } = await runJob(job);
    expect(out.records).toEqual([{ t: 1 }, { t: 3 }]);
    expect(runtime.rejectedInputs).toHaveLength(1);
    expect(runtime.rejectedInputs[0].error).toMatch(/timestamp: expected a finite number of epoch milliseconds, received "x" \(string\)/);
  });

  it('names the file line of every input it rejects', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-'));
    const file = join(dir, 'in.jsonl');
    writeFileSync(file, '{"t":1}\n{"t":\n\n{"t":"late"}\n{"t":4}\n');
    const job = new Job('lines', { parallelism: 1 });
    const out = Sinks.collect<{ t: number }>();
    job.fromFile<{ t: number }>('in', file, { timestamp: (e) => e.t }).sinkTo(out);
    const { runtime } = await runJob(job);
    expect(out.records).toEqual([{ t: 1 }, { t: 4 }]);
    expect(runtime.rejectedInputs.map((r) => r.position)).toEqual([`${file}:2`, `${file}:4`]);
  });

  it('refuses an ingestion batch whole when the runtime is saturated', async () => {
    const job = new Job('bp', { parallelism: 1 });
    job.ingest<number>('in').sinkTo(Sinks.collect());
    const rt = new EmbeddedRuntime(job, { queueCapacity: 10 });
    await rt.start();
    expect(rt.offer('in', new Array(8).fill(1))).toEqual({ ok: true });
    expect(rt.offer('in', new Array(5).fill(1))).toEqual({ ok: false, retryAfterMs: 1000 });
    while (await rt.step()) {}
    expect(rt.offer('in', new Array(5).fill(1))).toEqual({ ok: true });
  });
});

describe('determinism', () => {
  it('gives the same output, in the same order, on every run', async () => {
    const run = async () => {
      const job = new Job('det', { parallelism: 3 });
      const out = Sinks.collect<unknown>();
      job
        .fromItems('in', events(2000, 13), { timestamp: (e) => e.t })
        .keyBy((e) => e.k)
        .process({
          state: { n: valueState<number>() },
          processElement(e, ctx) {
            const n = (ctx.state.n.get() ?? 0) + 1;
            ctx.state.n.set(n);
            if (n % 10 === 0) ctx.emit({ k: e.k, n });
          },
        })
        .sinkTo(out);
      await runJob(job, { backend: new InMemoryStateBackend(), sourceBatchSize: 64 });
      return out.records;
    };
    expect(await run()).toEqual(await run());
  });
});

describe('source channels with log offsets', () => {
  it('drops redelivered offsets, accepts gaps, and derives the watermark from the records', async () => {
    const { PartitionRuntime } = await import('../../lib/runtime/partition.ts');
    const { compile } = await import('../../lib/graph/compile.ts');
    const job = new Job('offsets', { parallelism: 1 });
    const out = Sinks.collect<string>();
    job
      .ingest<{ k: string; t: number }>('in', { timestamp: (e) => e.t, watermark: WatermarkStrategies.boundedOutOfOrderness(5) })
      .keyBy((e) => e.k)
      .process({
        processElement(e, ctx) {
          ctx.timers.registerEventTimeTimer(e.t);
        },
        onTimer(t, ctx) {
          ctx.emit(`${ctx.key}@${t}`);
        },
      })
      .sinkTo(out);
    const plan = compile(job.graph);
    const backend = new InMemoryStateBackend();
    const rt = await PartitionRuntime.open({ plan, stage: 0, partition: 0, backend, clock: new ManualClock(0) });
    const env = (offset: string, t: number) => ({
      channel: '0:0',
      edge: 0,
      toPartition: 0,
      seq: 0,
      offset,
      records: [{ value: { k: 'a', t }, timestamp: t }],
      watermark: Number.NEGATIVE_INFINITY,
    });
    const first = await rt.process([env('18000000000000000001', 100), env('18000000000000000007', 120)]);
    expect(first.recordsIn).toBe(2);
    const again = await rt.process([env('18000000000000000007', 120), env('9', 1)]);
    expect(again.duplicatesDropped).toBe(2);
    const next = await rt.process([env('18000000000000000100', 130)]);
    expect(next.recordsIn).toBe(1);
    // The keyed stage learns the source watermark 130 - 5 - 1 = 124 from the envelopes the source stage sent.
    const wms = next.outbox.flatMap((o) => (o.kind === 'channel' ? [o.envelope.watermark] : []));
    expect(Math.max(...wms)).toBe(124);
  });
});
