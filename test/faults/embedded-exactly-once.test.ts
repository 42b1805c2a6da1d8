/**
 * Exactly-once on the embedded runtime under seeded faults: crashes before and
 * after the commit, after delivery and before the acknowledgement, plus duplicate
 * deliveries of envelopes and sink batches. Every seed's output must equal the
 * uninterrupted run's, with no duplicates and no losses.
 */
import { describe, expect, it } from 'vitest';
import { Job } from '../../lib/api/stream.ts';
import { Sinks } from '../../lib/api/sinks.ts';
import { mapState, valueState } from '../../lib/api/state.ts';
import { OutputTag, WatermarkStrategies } from '../../lib/api/types.ts';
import { Windows } from '../../lib/api/windows.ts';
import { FaultInjector, type FaultPlanOptions } from '../../lib/local/faults.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { compareOutputs } from '../../lib/testing/checker.ts';

interface Ev {
  user: string;
  amount: number;
  t: number;
}

interface Total {
  user: string;
  total: number;
  count: number;
  at?: number;
}

function input(n: number): Ev[] {
  return Array.from({ length: n }, (_, i) => ({ user: `u${(i * 7919) % 23}`, amount: (i * 31) % 97, t: 1000 + i * 5 }));
}

/**
 * Three stages: a running total per user (with event-time timers), then a sum per
 * bucket of totals. The source has one partition, so each user's records cross one
 * channel and the running totals are deterministic; the bucket stage hears from
 * three partitions, whose interleaving may change after a crash (as in any
 * distributed run), so it only emits order-independent values and a final sum.
 */
function buildJob(out: ReturnType<typeof Sinks.collect<unknown>>): Job {
  const job = new Job('exactly-once', { parallelism: 3 });
  job
    .fromItems('payments', input(3000), { timestamp: (e) => e.t, watermark: WatermarkStrategies.boundedOutOfOrderness(20), parallelism: 1 })
    .map((e) => ({ ...e, amount: e.amount + 1 }))
    .keyBy((e) => e.user)
    .process({
      state: { total: valueState<number>(), count: valueState<number>(), perSecond: mapState<number, number>() },
      processElement(e, ctx) {
        const total = (ctx.state.total.get() ?? 0) + e.amount;
        const count = (ctx.state.count.get() ?? 0) + 1;
        ctx.state.total.set(total);
        ctx.state.count.set(count);
        ctx.emit({ user: e.user, total, count });
        const second = Math.floor(e.t / 1000);
        ctx.state.perSecond.set(second, (ctx.state.perSecond.get(second) ?? 0) + e.amount);
        ctx.timers.registerEventTimeTimer(second * 1000 + 999);
      },
      onTimer(t, ctx) {
        // Event-time result: the second's sum is complete once the watermark passes its end.
        const second = Math.floor(t / 1000);
        ctx.emit({ user: ctx.key as string, total: ctx.state.perSecond.get(second)!, count: -1, at: t });
        ctx.state.perSecond.delete(second);
      },
    })
    .name('totals')
    .keyBy((r) => (r as Total).total % 5)
    .process({
      state: { sum: valueState<number>() },
      processElement(r: Total, ctx) {
        ctx.state.sum.set((ctx.state.sum.get() ?? 0) + r.total);
        ctx.emit({ ...r, bucket: ctx.key });
        ctx.timers.registerEventTimeTimer(Number.MAX_SAFE_INTEGER);
      },
      onTimer(_t, ctx) {
        ctx.emit({ bucket: ctx.key, sum: ctx.state.sum.get() });
      },
    })
    .name('buckets')
    .sinkTo(out);
  return job;
}

async function runWith(faults?: FaultPlanOptions) {
  const out = Sinks.collect<unknown>();
  const injector = faults ? new FaultInjector(faults) : undefined;
  const { stats } = await runJob(buildJob(out), { faults: injector, sourceBatchSize: 64, maxEnvelopesPerBatch: 4 });
  return { records: out.records, stats, injector, sink: out };
}

describe('exactly-once on the embedded runtime', () => {
  it('the reference run produces output (sanity)', async () => {
    const ref = await runWith();
    expect(ref.records.length).toBeGreaterThan(3000);
  });

  for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
    it(`seed ${seed}: crashes at every boundary and duplicate deliveries change nothing`, async () => {
      const ref = await runWith();
      const faulty = await runWith({ seed, crashProbability: 0.08, duplicateProbability: 0.1 });
      expect(faulty.injector!.total).toBeGreaterThan(10);
      for (const point of ['before-commit', 'after-commit', 'after-deliver', 'before-ack'] as const) {
        expect(faulty.injector!.injected[point], point).toBeGreaterThan(0);
      }
      const cmp = compareOutputs(ref.records, faulty.records);
      expect(cmp.ok, cmp.summary()).toBe(true);
      expect(faulty.stats.duplicatesDropped + faulty.sink.duplicatesDropped).toBeGreaterThan(0);
    });
  }

  it('the checker catches a run that loses or repeats a record (the test can fail)', async () => {
    const ref = await runWith();
    const broken = [...ref.records.slice(1), ref.records[5]];
    const cmp = compareOutputs(ref.records, broken);
    expect(cmp.ok).toBe(false);
    expect(cmp.lost).toHaveLength(1);
    expect(cmp.duplicated).toHaveLength(1);
  });
});

describe('late data under crashes', () => {
  /** Out-of-order input with lateness: which records are late must not depend on how batches were cut. */
  async function lateRun(faults?: FaultPlanOptions) {
    const job = new Job('late-crash', { parallelism: 1 });
    const tag = new OutputTag<{ k: string; t: number }>('late');
    const items = Array.from({ length: 300 }, (_, i) => ({ k: `k${i % 7}`, t: 3 * i + ((37 * i) % 61) }));
    const out = Sinks.collect<unknown>();
    const late = Sinks.collect<unknown>();
    const counts = job
      .fromItems('in', items, { timestamp: (e) => e.t, watermark: WatermarkStrategies.boundedOutOfOrderness(10) })
      .keyBy((e) => e.k)
      .window(Windows.sliding(20, 7))
      .allowedLateness(8)
      .sideOutputLateData(tag)
      .aggregate({ createAccumulator: () => 0, add: (_e, n: number) => n + 1, getResult: (n) => n }, (n, { key, window }) => ({ key, ...window, n }));
    counts.sinkTo(out);
    counts.getSideOutput(tag).sinkTo(late);
    const injector = faults ? new FaultInjector(faults) : undefined;
    await runJob(job, { faults: injector, sourceBatchSize: 4, maxEnvelopesPerBatch: 3 });
    return { out: out.records, late: late.records, injector };
  }

  for (const seed of [1, 2, 3, 4, 5]) {
    it(`seed ${seed}: the same records are late, and the same windows fire, as without faults`, async () => {
      const ref = await lateRun();
      expect(ref.late.length).toBeGreaterThan(0);
      const faulty = await lateRun({ seed, crashProbability: 0.08, duplicateProbability: 0.1 });
      expect(faulty.injector!.total).toBeGreaterThan(0);
      expect(compareOutputs(ref.late, faulty.late).summary()).toBe(compareOutputs(ref.late, ref.late).summary());
      const cmp = compareOutputs(ref.out, faulty.out);
      expect(cmp.ok, cmp.summary()).toBe(true);
    });
  }
});
