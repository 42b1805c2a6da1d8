/**
 * Source chunks stamped when their partition applies them (lib/local/source-feed.ts,
 * SourceStamp: a source with a timestamp extractor and no schema). The same rows, the same
 * rejections in the input's order with their positions, the same counts as a source
 * whose chunks are stamped before they are sent (with a schema that accepts every event),
 * also when a chained operator throws on a record of a chunk that has rejections: the
 * record's dead letter names its place among the chunk's records, and each rejection is
 * reported once, whatever the retries.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { WatermarkStrategies } from '../../lib/api/types.ts';
import { Windows } from '../../lib/api/windows.ts';
import { runJob } from '../../lib/local/embedded.ts';

type Ev = { t: unknown; v: number };

/** Timestamps from the events (an extractor that throws on 'throw'); with a schema, chunks are stamped before they are sent, without one when applied. */
function sourceOptions(withSchema: boolean) {
  return {
    timestamp: (e: Ev) => {
      if (e.t === 'throw') throw new Error(`no time in ${e.v}`);
      return e.t as number;
    },
    watermark: WatermarkStrategies.boundedOutOfOrderness(3),
    ...(withSchema ? { schema: z.any() as unknown as z.ZodType<Ev> } : {}),
  };
}

function job(items: readonly Ev[], parallelism: number, withSchema: boolean, poison: number | undefined) {
  const j = new Job(withSchema ? 'stamped-before' : 'stamped-on-apply', { parallelism, maxParallelism: 16 });
  const out = Sinks.collect<number>();
  j.fromItems('in', items, sourceOptions(withSchema))
    .filter((e) => e.v % 3 !== 0)
    .name('not-threes')
    .map((e) => {
      if (e.v === poison) throw new Error(`poison ${e.v}`);
      return e.v;
    })
    .name('values')
    .sinkTo(out);
  return { job: j, out };
}

const evArb: fc.Arbitrary<Ev> = fc
  .tuple(fc.oneof({ weight: 5, arbitrary: fc.integer({ min: 0, max: 1000 }) }, { weight: 1, arbitrary: fc.constantFrom<unknown>('throw', Number.NaN, 'late', undefined) }), fc.integer({ min: 0, max: 30 }))
  .map(([t, v]) => ({ t, v }));

describe('source chunks stamped when applied', () => {
  it('give the rows, rejections, counts and dead letters of chunks stamped before they are sent', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(evArb, { maxLength: 40 }), fc.integer({ min: 1, max: 6 }), fc.option(fc.integer({ min: 0, max: 30 }), { nil: undefined }), async (items, batchSize, poison) => {
        const runs = [];
        for (const withSchema of [true, false]) {
          const { job: j, out } = job(items, 1, withSchema, poison);
          const { runtime, stats } = await runJob(j, { sourceBatchSize: batchSize, maxAttempts: 2 });
          runs.push({
            rows: out.records,
            rejected: runtime.rejectedInputs,
            sourceRecords: stats.sourceRecords,
            dead: runtime.deadLetters.map((d) => ({ operator: d.operator, record: d.record, error: d.error, attempts: d.attempts })),
          });
        }
        expect(runs[1]).toEqual(runs[0]);
        // And what each should be: every event rejected or a record, once.
        const bad = items.filter((e) => typeof e.t !== 'number' || !Number.isFinite(e.t));
        expect(runs[1].rejected.map((r) => r.position)).toEqual(items.flatMap((e, i) => (bad.includes(e) ? [`event ${i}`] : [])));
        expect(runs[1].sourceRecords).toBe(items.length - bad.length);
      }),
      { numRuns: 60 },
    );
  });

  it('names the record that threw by its place among the chunk\'s records, before or after a rejected event', async () => {
    const cases: { items: Ev[]; index: number; record: Ev }[] = [
      { items: [{ t: 1, v: 1 }, { t: 'throw', v: 2 }, { t: 3, v: 4 }, { t: 4, v: 5 }], index: 1, record: { t: 3, v: 4 } },
      { items: [{ t: 1, v: 1 }, { t: 3, v: 4 }, { t: 'throw', v: 2 }, { t: 4, v: 5 }], index: 1, record: { t: 3, v: 4 } },
      { items: [{ t: 'throw', v: 2 }, { t: 'late', v: 7 }, { t: 1, v: 1 }, { t: 3, v: 4 }, { t: 4, v: 5 }], index: 1, record: { t: 3, v: 4 } },
    ];
    for (const c of cases) {
      const { job: j, out } = job(c.items, 1, false, 4);
      // One attempt: the location of the first failure decides what is parked.
      const { runtime, stats } = await runJob(j, { sourceBatchSize: 8, maxAttempts: 1 });
      expect(out.records).toEqual([1, 5]);
      expect(runtime.rejectedInputs.map((r) => r.position)).toEqual(c.items.flatMap((e, i) => (typeof e.t === 'number' ? [] : [`event ${i}`])));
      expect(stats.sourceRecords).toBe(3);
      expect(runtime.deadLetters).toMatchObject([{ operator: 'values', index: c.index, record: { value: c.record, timestamp: c.record.t }, attempts: 1 }]);
    }
  });

  it('gives a chunk applied whole its timestamps again when its batch is retried, read from its events', async () => {
    // Two chunks in one batch: the second throws (parked at once), the batch is retried,
    // and the first, applied whole before, goes through again; its event v=2 throws on
    // that second pass, so its dead letter shows the timestamp the retry gave it.
    const items: Ev[] = [{ t: 10, v: 1 }, { t: 11, v: 2 }, { t: 12, v: 4 }, { t: 13, v: 5 }];
    const runs = [];
    for (const withSchema of [true, false]) {
      const j = new Job('retried', { parallelism: 1, maxParallelism: 16 });
      const out = Sinks.collect<number>();
      let seen2 = 0;
      j.fromItems('in', items, { timestamp: (e) => e.t as number, ...(withSchema ? { schema: z.any() as unknown as z.ZodType<Ev> } : {}) })
        .map((e) => {
          if (e.v === 5 || (e.v === 2 && ++seen2 === 2)) throw new Error(`poison ${e.v}`);
          return e.v;
        })
        .name('values')
        .sinkTo(out);
      const { runtime } = await runJob(j, { sourceBatchSize: 2, maxAttempts: 1 });
      runs.push({ rows: out.records, dead: runtime.deadLetters.map((d) => ({ record: d.record, attempts: d.attempts })) });
    }
    expect(runs[1]).toEqual(runs[0]);
    expect(runs[1].rows).toEqual([1, 4]);
    expect(runs[1].dead).toEqual(expect.arrayContaining([{ record: { value: { t: 11, v: 2 }, timestamp: 11 }, attempts: 1 }]));
  });

  it('fails with a clear error when a retry finds the timestamp extractor answering differently for an event', async () => {
    const items: Ev[] = [{ t: 10, v: 1 }, { t: 11, v: 2 }, { t: 12, v: 4 }, { t: 13, v: 5 }];
    const j = new Job('unstable-extractor', { parallelism: 1, maxParallelism: 16 });
    // Once the batch has failed, event v=1 no longer has a finite timestamp.
    let failed = false;
    j.fromItems('in', items, { timestamp: (e) => (e.v === 1 && failed ? Number.NaN : (e.t as number)) })
      .map((e) => {
        if (e.v === 5) {
          failed = true;
          throw new Error('poison 5');
        }
        return e.v;
      })
      .sinkTo(Sinks.collect<number>());
    await expect(runJob(j, { sourceBatchSize: 2, maxAttempts: 1 })).rejects.toThrow(/source "in": the timestamp extractor gave event 0 .* NaN when its batch was retried/);
  });

  it('give a job of several stages and partitions the rows, rejections and counts of chunks stamped before they are sent', async () => {
    // The source stage (2 partitions) filters and maps; a keyed stage sums per key and
    // event-time window, so the timestamps and watermarks the source stage gives decide the rows.
    await fc.assert(
      fc.asyncProperty(fc.array(evArb, { maxLength: 60 }), fc.integer({ min: 1, max: 6 }), async (items, batchSize) => {
        const runs = [];
        for (const withSchema of [true, false]) {
          const j = new Job(withSchema ? 'stages-before' : 'stages-on-apply', { parallelism: 2, maxParallelism: 16 });
          const out = Sinks.collect<{ key: number; sum: number; end: number }>();
          j.fromItems('in', items, sourceOptions(withSchema))
            .filter((e) => e.v % 3 !== 0)
            .map((e) => e.v)
            .keyBy((v) => v % 4)
            .window(Windows.tumbling(100))
            .reduce((a, b) => a + b, (sum, { key, window }) => ({ key, sum, end: window.end }))
            .sinkTo(out);
          const { runtime, stats } = await runJob(j, { sourceBatchSize: batchSize });
          runs.push({ rows: [...out.records].sort((a, b) => a.key - b.key || a.end - b.end), rejected: runtime.rejectedInputs, sourceRecords: stats.sourceRecords });
        }
        expect(runs[1]).toEqual(runs[0]);
      }),
      {
        numRuns: 40,
        examples: [
          // A round's chunks pulled one at a time ended the round early when stamping took a
          // rejected event out of a chunk (the pull's own array): partitions then interleaved
          // otherwise downstream, and this record of partition 1 was late on one path only.
          [[{ t: 'throw', v: 0 }, { t: 0, v: 0 }, { t: 'throw', v: 0 }, { t: 103, v: 0 }, { t: 'throw', v: 0 }, { t: 0, v: 0 }, { t: 0, v: 0 }, { t: 0, v: 1 }, { t: 0, v: 0 }], 2],
        ],
      },
    );
  });
});
