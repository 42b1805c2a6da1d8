/**
 * Pre-aggregation before the shuffle (lib/operators/window-combiner.ts) changes nothing
 * a job can see: a combined run and an uncombined run of the same job and input give
 * the same rows in the same order, and drop the same number of late records, for random
 * keyed, out-of-order input over several source and window partitions; tumbling and
 * sliding windows, aggregates and reduces whose results keep arrival order (lists of
 * ids). Under crashes and duplicate deliveries the rows are the same (order across
 * partitions may differ after a crash, so they are compared sorted, on input without late
 * records). Which windows combine is checked at compile time.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { AggregateFunction } from '../../lib/api/functions.ts';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { OutputTag, WatermarkStrategies } from '../../lib/api/types.ts';
import { type WindowAssigner, Windows } from '../../lib/api/windows.ts';
import { planFingerprint } from '../../lib/checkpoint/fingerprint.ts';
import { compile } from '../../lib/graph/compile.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { FaultInjector } from '../../lib/local/faults.ts';
import { droppedLate, sorted } from './helpers.ts';

interface Ev {
  readonly k: string;
  readonly t: number;
  readonly id: number;
  /** Reduced records: the ids they hold, in arrival order. */
  readonly ids?: number[];
}

/** Ids in arrival order and their sum: merge concatenates, so any reordering shows. */
const idList: AggregateFunction<Ev, { ids: number[]; sum: number }, { ids: number[]; sum: number }> = {
  createAccumulator: () => ({ ids: [], sum: 0 }),
  add: (e, acc) => {
    acc.ids.push(e.id);
    acc.sum += e.id;
    return acc;
  },
  getResult: (acc) => acc,
  merge: (a, b) => ({ ids: a.ids.concat(b.ids), sum: a.sum + b.sum }),
};

/** Associative, not commutative: the reduced record lists the ids in arrival order. */
const concatIds = (a: Ev, b: Ev): Ev => ({ k: a.k, t: Math.max(a.t, b.t), id: a.id + b.id, ids: [...(a.ids ?? [a.id]), ...(b.ids ?? [b.id])] });

type Fn = 'aggregate' | 'reduce';

interface Case {
  items: Ev[];
  delay: number;
  sourceP: number;
  windowP: number;
  batch: number;
  envelopes: number;
}

function job(c: Case, assigner: WindowAssigner, fn: Fn, combine: boolean) {
  const j = new Job('combiner', { parallelism: c.windowP, maxParallelism: 32 });
  const out = Sinks.collect<unknown>();
  const windowed = j
    .fromItems('in', c.items, { timestamp: (e) => e.t, watermark: WatermarkStrategies.boundedOutOfOrderness(c.delay), parallelism: c.sourceP })
    .keyBy((e) => e.k)
    .window(assigner)
    .preAggregate(combine);
  const rows =
    fn === 'aggregate'
      ? windowed.aggregate(idList, (r, { key, window }) => ({ key, ...window, ...r }))
      : windowed.reduce(concatIds, (r, { key, window }) => ({ key, ...window, ids: r.ids ?? [r.id] }));
  rows.name('win').sinkTo(out, 'out');
  return { job: j, out };
}

async function run(c: Case, assigner: WindowAssigner, fn: Fn, combine: boolean, faults?: FaultInjector) {
  const { job: j, out } = job(c, assigner, fn, combine);
  expect(compile(j.graph).edges.some((e) => e.combine)).toBe(combine && (fn === 'aggregate' || assigner.kind === 'tumbling' || (assigner.kind === 'sliding' && assigner.slide % assigner.size === 0)));
  const runtime = new EmbeddedRuntime(j, { sourceBatchSize: c.batch, maxEnvelopesPerBatch: c.envelopes, faults });
  const stats = await runtime.run();
  // What entered the window: partials when combined, records otherwise.
  return { rows: out.records, dropped: droppedLate(runtime, 'win'), partials: stats.recordsIn.win ?? 0 };
}

/** Disorder up to twice the watermark delay, and one record in eight far behind: some are late. Few keys, so panes collect several records. */
const caseArb: fc.Arbitrary<Case> = fc
  .record({
    delay: fc.integer({ min: 0, max: 8 }),
    rows: fc.array(fc.record({ k: fc.constantFrom('a', 'b', 'c'), step: fc.integer({ min: 0, max: 4 }), back: fc.nat(), far: fc.integer({ min: 0, max: 7 }) }), { minLength: 1, maxLength: 80, size: 'medium' }),
    start: fc.integer({ min: -50, max: 50 }),
    sourceP: fc.constantFrom(1, 2, 3),
    windowP: fc.constantFrom(1, 2, 3),
    batch: fc.integer({ min: 1, max: 12 }),
    envelopes: fc.integer({ min: 1, max: 3 }),
  })
  .map(({ delay, rows, start, ...rest }) => {
    let base = start;
    const items = rows.map((r, id) => {
      base += r.step;
      return { k: r.k, t: base - (r.far === 0 ? delay + 1 + (r.back % 30) : r.back % (2 * delay + 2)), id };
    });
    return { items, delay, ...rest };
  });

const assignerArb: fc.Arbitrary<WindowAssigner> = fc.oneof(
  fc.record({ size: fc.integer({ min: 1, max: 12 }), offset: fc.integer({ min: -10, max: 10 }) }).map(({ size, offset }) => Windows.tumbling(size, { offsetMs: offset })),
  fc.record({ size: fc.integer({ min: 1, max: 12 }), slide: fc.integer({ min: 1, max: 12 }), offset: fc.integer({ min: -10, max: 10 }) }).map(({ size, slide, offset }) => Windows.sliding(size, slide, { offsetMs: offset })),
);

describe('pre-aggregation before the shuffle', () => {
  it('gives the same rows, in the same order, and the same late drops as the uncombined run (property)', async () => {
    let withLate = 0;
    let folded = 0;
    await fc.assert(
      fc.asyncProperty(caseArb, assignerArb, fc.constantFrom<Fn>('aggregate', 'reduce'), async (c, assigner, fn) => {
        const combined = await run(c, assigner, fn, true);
        const plain = await run(c, assigner, fn, false);
        expect({ rows: combined.rows, dropped: combined.dropped }).toEqual({ rows: plain.rows, dropped: plain.dropped });
        if (plain.dropped > 0) withLate++;
        if (combined.partials < plain.partials) folded++;
      }),
      { seed: 20261130, numRuns: 150 },
    );
    // The cases exercise what matters: late records, and partials of several records.
    expect(withLate).toBeGreaterThan(30);
    expect(folded).toBeGreaterThan(50);
  });

  it('the property can fail: a merge that drops the earlier records changes the rows', async () => {
    const c: Case = { items: [0, 1, 2, 3].map((i) => ({ k: 'a', t: i, id: i })), delay: 0, sourceP: 1, windowP: 1, batch: 2, envelopes: 1 };
    const broken = { ...idList, merge: (_a: { ids: number[]; sum: number }, b: { ids: number[]; sum: number }) => b };
    const rowsOf = async (combine: boolean) => {
      const j = new Job('broken', { parallelism: 1 });
      const out = Sinks.collect<unknown>();
      j.fromItems('in', c.items, { timestamp: (e) => e.t }).keyBy((e) => e.k).window(Windows.tumbling(10)).preAggregate(combine).aggregate(broken).sinkTo(out, 'out');
      await new EmbeddedRuntime(j, { sourceBatchSize: c.batch }).run();
      return out.records;
    };
    expect(await rowsOf(false)).toEqual([{ ids: [0, 1, 2, 3], sum: 6 }]);
    expect(await rowsOf(true)).toEqual([{ ids: [2, 3], sum: 5 }]);
  });

  it('gives the same rows under crashes and duplicate deliveries', async () => {
    const items: Ev[] = Array.from({ length: 300 }, (_, i) => ({ k: `k${(i * 7) % 5}`, t: i * 3 + ((i * 31) % 13), id: i }));
    // One source partition: each key's records cross one channel, so arrival order (the
    // ids' order in a window) does not depend on how a crash interleaves channels.
    const c: Case = { items, delay: 14, sourceP: 1, windowP: 2, batch: 5, envelopes: 2 };
    for (const [assigner, fn] of [[Windows.tumbling(25), 'reduce'], [Windows.sliding(40, 10), 'aggregate']] as const) {
      const expected = await run(c, assigner, fn, false);
      expect(expected.dropped).toBe(0);
      for (const seed of [1, 2, 3]) {
        const faulty = await run(c, assigner, fn, true, new FaultInjector({ seed, crashProbability: 0.05, duplicateProbability: 0.1 }));
        expect(sorted(faulty.rows)).toEqual(sorted(expected.rows));
      }
    }
  });
});

describe('which windows pre-aggregate', () => {
  const plan = (build: (j: Job) => void) => {
    const j = new Job('which', { parallelism: 2 });
    build(j);
    return compile(j.graph);
  };
  const keyed = (j: Job) => j.fromItems('in', [{ k: 'a', t: 1 }], { timestamp: (e) => e.t }).keyBy((e) => e.k);
  const count: AggregateFunction<unknown, number, number> = { createAccumulator: () => 0, add: (_v, n) => n + 1, getResult: (n) => n };
  const counting = { ...count, merge: (a: number, b: number) => a + b };
  const combines = (build: (j: Job) => void) => plan(build).edges.filter((e) => e.combine).map((e) => e.partitioning);

  it('marks the hash edge into a pane window with a merging function, and no other', () => {
    expect(combines((j) => keyed(j).window(Windows.tumbling(10)).aggregate(counting).print())).toEqual(['hash']);
    expect(combines((j) => keyed(j).window(Windows.sliding(10, 5)).aggregate(counting).print())).toEqual(['hash']);
    expect(combines((j) => keyed(j).window(Windows.tumbling(10)).reduce((a) => a).print())).toEqual(['hash']);
    // No merge(); a reduce over overlapping panes (kept per window); a process function.
    expect(combines((j) => keyed(j).window(Windows.tumbling(10)).aggregate(count).print())).toEqual([]);
    expect(combines((j) => keyed(j).window(Windows.sliding(10, 5)).reduce((a) => a).print())).toEqual([]);
    expect(combines((j) => keyed(j).window(Windows.tumbling(10)).process(() => {}).print())).toEqual([]);
    // Sessions; allowed lateness; a late side output (late records must reach it as themselves); the opt-out.
    expect(combines((j) => keyed(j).window(Windows.session(10)).aggregate(counting).print())).toEqual([]);
    expect(combines((j) => keyed(j).window(Windows.tumbling(10)).allowedLateness(5).aggregate(counting).print())).toEqual([]);
    expect(combines((j) => keyed(j).window(Windows.tumbling(10)).sideOutputLateData(new OutputTag('late')).aggregate(counting).print())).toEqual([]);
    expect(combines((j) => keyed(j).window(Windows.tumbling(10)).preAggregate(false).aggregate(counting).print())).toEqual([]);
    expect(() => keyed(new Job('x')).window(Windows.tumbling(10)).preAggregate('no' as unknown as boolean)).toThrow(/preAggregate.*true or false.*no/);
  });

  it('changes the plan fingerprint: a checkpoint with records in flight does not continue a plan that expects partials', () => {
    const build = (combine: boolean) => (j: Job) => keyed(j).window(Windows.tumbling(10)).preAggregate(combine).aggregate(counting).name('w').print();
    expect(planFingerprint(plan(build(true)))).not.toBe(planFingerprint(plan(build(false))));
    // Jobs without a combined edge keep their fingerprint: the edge list hashes as before.
    const other = (j: Job) => keyed(j).window(Windows.tumbling(10)).aggregate(count).name('w').print();
    expect(planFingerprint(plan(other))).toBe(planFingerprint(plan(other)));
  });
});
