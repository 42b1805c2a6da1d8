/**
 * Exactly-once on the embedded runtime under seeded faults: crashes before and
 * after the commit, after delivery and before the acknowledgement, plus duplicate
 * deliveries of envelopes and sink batches. Every seed's output must equal the
 * uninterrupted run's, with no duplicates and no losses.
 */
import { describe, expect, it } from 'vitest';
import { Job } from '../../lib/api/stream.ts';
import { payments, totalsJob, totalsOrder } from '../checkpoint/jobs.ts';
import { Sinks } from '../../lib/api/sinks.ts';
import { OutputTag, WatermarkStrategies } from '../../lib/api/types.ts';
import { Windows } from '../../lib/api/windows.ts';
import { FaultInjector, type FaultPlanOptions } from '../../lib/local/faults.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { assertExactlyOnce, compareOutputs } from '../../lib/testing/checker.ts';

/**
 * The job (test/checkpoint/jobs.ts, shared with the checkpoint suite): a running total per
 * user with event-time timers, then a sum per bucket of totals. The source has one
 * partition, so each user's records cross one channel; the bucket stage hears from three
 * partitions, whose interleaving may change after a crash, so it only emits
 * order-independent values and a final sum.
 * Its output is ordered per user and bucket (totalsOrder).
 */
async function runWith(faults?: FaultPlanOptions) {
  const out = Sinks.collect<unknown>();
  const injector = faults ? new FaultInjector(faults) : undefined;
  const { stats } = await runJob(totalsJob(payments(3000), out), { faults: injector, sourceBatchSize: 64, maxEnvelopesPerBatch: 4 });
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
      assertExactlyOnce(ref.records, faulty.records, { input: payments(3000), orderKey: totalsOrder });
      expect(faulty.stats.duplicatesDropped + faulty.sink.duplicatesDropped).toBeGreaterThan(0);
    });
  }

  it('the checker catches a run that loses or repeats a record (the test can fail)', async () => {
    const ref = await runWith();
    const broken = [...ref.records.slice(1), ref.records[5]];
    const cmp = compareOutputs(ref.records, broken, { orderKey: totalsOrder });
    expect(cmp.ok).toBe(false);
    expect(cmp.lost).toHaveLength(1);
    expect(cmp.duplicated).toHaveLength(1);
    // Two records of one user and bucket swapped: out of order, nothing lost.
    const i = ref.records.findIndex((r) => totalsOrder(r) !== undefined);
    const j = ref.records.findIndex((r, n) => n > i && totalsOrder(r) === totalsOrder(ref.records[i]));
    const swapped = [...ref.records];
    [swapped[i], swapped[j]] = [swapped[j], swapped[i]];
    const reordered = compareOutputs(ref.records, swapped, { orderKey: totalsOrder });
    expect(reordered.counts).toMatchObject({ lost: 0, duplicated: 0, unexpected: 0, reordered: 1 });
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
      // One source partition: each key's late records and window results keep the reference's order.
      const byKey = { orderKey: (r: unknown) => (r as { k?: string; key?: string }).k ?? (r as { key: string }).key };
      assertExactlyOnce(ref.late, faulty.late, byKey);
      assertExactlyOnce(ref.out, faulty.out, byKey);
    });
  }
});
