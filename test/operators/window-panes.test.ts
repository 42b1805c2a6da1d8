/**
 * The fast window paths against independent oracles, with late records included:
 * - panes (window-panes.ts) against the per-window operator (window.ts), which the same
 *   job uses when the aggregate has no merge(): the late side output must be identical,
 *   and so must each key's outputs, in order (across keys, timers of one time fire in
 *   no stated order);
 * - lazy sessions (window-session-lazy.ts) against a record-at-a-time model of session
 *   windows under a bounded-out-of-orderness watermark.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { AggregateFunction } from '../../lib/api/functions.ts';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { Windows } from '../../lib/api/windows.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { FaultInjector } from '../../lib/local/faults.ts';
import { type Ev, events, sorted } from './helpers.ts';
import { lazySessionOperator } from '../../lib/operators/window-session-lazy.ts';
import { counts, operatorOver, outcome, processSessions, sessionModel, streamOf, withMerge, withoutMerge } from './window-harness.ts';

/** Streams with disorder up to twice the watermark delay: some records are late. */

const streamArb = streamOf((delay) => 2 * delay + 2);

describe('panes', () => {
  it('sliding windows with merge() give exactly what the per-window operator gives (late records, offsets, gaps)', async () => {
    await fc.assert(
      fc.asyncProperty(streamArb, fc.integer({ min: 1, max: 24 }), fc.integer({ min: 1, max: 24 }), fc.integer({ min: -30, max: 30 }), async (s, size, slide, offsetMs) => {
        const assigner = Windows.sliding(size, slide, { offsetMs });
        const panes = await counts(s.items, assigner, withMerge, s);
        const perWindow = await counts(s.items, assigner, withoutMerge, s);
        expect(outcome(panes)).toEqual(outcome(perWindow));
      }),
      { seed: 424242, numRuns: 120 },
    );
  });

  it('crashes and duplicate deliveries change no result, panes and lazy sessions (order across partitions may differ)', async () => {
    const items: Ev[] = [];
    for (let i = 0; i < 400; i++) items.push({ k: `k${i % 5}`, t: i * 3 + ((i * 31) % 13) });
    const o = { delay: 12, parallelism: 2, batch: 3 };
    const clean = await counts(items, Windows.sliding(40, 10), withMerge, o);
    expect(outcome(clean)).toEqual(outcome(await counts(items, Windows.sliding(40, 10), withoutMerge, o)));
    for (const seed of [1, 2]) {
      for (const assigner of [Windows.tumbling(25), Windows.sliding(40, 10), Windows.session(7)]) {
        const faulty = await counts(items, assigner, withMerge, { ...o, faults: new FaultInjector({ seed, crashProbability: 0.05, duplicateProbability: 0.1 }) });
        const expected = await counts(items, assigner, withMerge, o);
        expect(sorted(faulty.rows)).toEqual(sorted(expected.rows));
        expect(faulty.late).toEqual([]);
      }
    }
  });
});

describe('pane windows with object accumulators', () => {
  /** Keeps the records' times; merge and getResult change their arguments, as a careless function may. */
  const times: AggregateFunction<Ev, { ts: number[] }, string> = {
    createAccumulator: () => ({ ts: [] }),
    add: (e, acc) => {
      acc.ts.push(e.t);
      return acc;
    },
    merge: (a, b) => {
      a.ts.push(...b.ts);
      b.ts.length = 0;
      return a;
    },
    getResult: (acc) => {
      const out = acc.ts.sort((x, y) => x - y).join(',');
      acc.ts.push(-1);
      return out;
    },
  };

  it('a window function that changes its arguments changes no later window, with crashes and duplicates too', async () => {
    const items: Ev[] = [];
    for (let i = 0; i < 300; i++) items.push({ k: `k${i % 3}`, t: i * 2 + ((i * 17) % 7) });
    const size = 30;
    const slide = 10;
    // Brute force: every window [s, s + size) a key's records fall in (the stream is in order
    // within the watermark delay, so nothing is late).
    const expected: string[] = [];
    const keys = [...new Set(items.map((e) => e.k))];
    for (const k of keys) {
      const mine = items.filter((e) => e.k === k);
      const ends = new Set(mine.flatMap((e) => [1, 2, 3].map((j) => Math.floor(e.t / slide) * slide + j * slide)));
      for (const end of ends) {
        const ts = mine.filter((e) => e.t >= end - size && e.t < end).map((e) => e.t).sort((x, y) => x - y);
        if (ts.length) expected.push(`${k} ${end} ${ts.join(',')}`);
      }
    }
    for (const faults of [undefined, new FaultInjector({ seed: 3, crashProbability: 0.05, duplicateProbability: 0.1 })]) {
      const job = new Job('pane-objects', { parallelism: 2 });
      const out = Sinks.collect<string>();
      events(job, 'in', items, 20)
        .keyBy((e) => e.k)
        .window(Windows.sliding(size, slide))
        .aggregate(times, (r, { key, window }) => `${key} ${window.end} ${r}`)
        .sinkTo(out);
      await runJob(job, { sourceBatchSize: 4, faults });
      expect([...out.records].sort()).toEqual(expected.sort());
    }
  });
});


describe('pane windows of an aggregate whose accumulator is null', () => {
  it("fire the null accumulator's result (a null pane is a value, not a process function's records)", async () => {
    const nothing = () => null as unknown as number;
    for (const preAggregate of [true, false]) {
      const job = new Job('null-pane', { parallelism: 1 });
      const out = Sinks.collect<unknown>();
      job
        .fromItems('e', [{ k: 'a', t: 1 }, { k: 'a', t: 2 }], { timestamp: (e) => e.t })
        .keyBy((e) => e.k)
        .window(Windows.sliding(1_000, 500))
        .preAggregate(preAggregate)
        .aggregate({ createAccumulator: nothing, add: nothing, getResult: (a) => a, merge: nothing }, (r) => ({ r }))
        .sinkTo(out);
      await runJob(job);
      expect(out.records, `preAggregate ${preAggregate}`).toEqual([{ r: null }, { r: null }]);
    }
  });
});

describe('lazy sessions', () => {
  it('match the record-at-a-time model, late records and bridging merges included', async () => {
    await fc.assert(
      fc.asyncProperty(streamArb, fc.integer({ min: 1, max: 20 }), async (s, gap) => {
        const run = await counts(s.items, Windows.session(gap), withMerge, { delay: s.delay, parallelism: 1, batch: 1 });
        expect(outcome(run)).toEqual(outcome(sessionModel(s.items, gap, s.delay)));
      }),
      { seed: 99, numRuns: 150 },
    );
  });

  it("a process function sees each session's records (kept in a field of their own per session), as the model counts them", async () => {
    await fc.assert(
      fc.asyncProperty(streamArb, fc.integer({ min: 1, max: 20 }), fc.integer({ min: 1, max: 3 }), async (s, gap, batch) => {
        const run = await processSessions(s.items, gap, { delay: s.delay, parallelism: 1, batch });
        if (batch === 1) expect(outcome(run)).toEqual(outcome(sessionModel(s.items, gap, s.delay)));
        // Every record once: in a session or late.
        expect(sorted([...run.seen, ...run.late])).toEqual(sorted(s.items));
        expect(run.rows.reduce((n, r) => n + r.n, 0)).toBe(run.seen.length);
      }),
      { seed: 98, numRuns: 150 },
    );
  });

  it('process sessions: crashes and duplicate deliveries change no session', async () => {
    const items: Ev[] = [];
    for (let i = 0; i < 400; i++) items.push({ k: `k${i % 5}`, t: i * 3 + ((i * 31) % 13) });
    const o = { delay: 12, parallelism: 2, batch: 3 };
    const clean = await processSessions(items, 7, o);
    for (const seed of [1, 2, 3]) {
      const faulty = await processSessions(items, 7, { ...o, faults: new FaultInjector({ seed, crashProbability: 0.05, duplicateProbability: 0.1 }) });
      expect(faulty.recoveries).toBeGreaterThan(0);
      expect(sorted(faulty.rows)).toEqual(sorted(clean.rows));
      expect(sorted(faulty.seen)).toEqual(sorted(clean.seen));
      expect(faulty.late).toEqual(clean.late);
    }
  });
});

/** A key's windows of a tumbling or gapped sliding assigner (slide a multiple of size), by brute force. */
function bruteProcess(items: readonly Ev[], size: number, slide: number) {
  const out = new Map<string, { key: string; start: number; end: number; times: number[] }>();
  for (const e of items) {
    const s = e.t - (((e.t % slide) + slide) % slide);
    if (e.t >= s + size) continue;
    const id = `${e.k}/${s}`;
    const w = out.get(id) ?? { key: e.k, start: s, end: s + size, times: [] };
    w.times.push(e.t);
    out.set(id, w);
  }
  return sorted([...out.values()].map((w) => ({ ...w, times: [...w.times].sort((a, b) => a - b) })));
}

async function processWindows(items: readonly Ev[], size: number, slide: number, o: { delay: number; parallelism: number; batch: number; faults?: FaultInjector }) {
  const job = new Job('process-panes', { parallelism: o.parallelism });
  const out = Sinks.collect<{ key: string; start: number; end: number; times: number[] }>();
  events(job, 'in', items, o.delay)
    .keyBy((e) => e.k)
    .window(size === slide ? Windows.tumbling(size) : Windows.sliding(size, slide))
    .process<{ key: string; start: number; end: number; times: number[] }>((es, { key, window }, c) => {
      // Changing its argument must change nothing stored.
      const times = es.map((e) => e.t).sort((a, b) => a - b);
      (es as Ev[]).length = 0;
      c.emit({ key: key as string, ...window, times });
    })
    .sinkTo(out);
  const { stats } = await runJob(job, { sourceBatchSize: o.batch, maxEnvelopesPerBatch: 2, faults: o.faults });
  return { rows: sorted(out.records), recoveries: stats.recoveries };
}

describe('process windows kept as panes (records in a field of their own per pane)', () => {
  it('give every window its records, in batches of any size, tumbling and with gaps (property)', async () => {
    // Disorder within the watermark delay: nothing is late.
    const arb = fc
      .record({ s: streamOf((delay) => delay + 1), size: fc.integer({ min: 1, max: 25 }), gap: fc.constantFrom(1, 2, 3) })
      .map(({ s, size, gap }) => ({ ...s, size, slide: size * gap }));
    await fc.assert(
      fc.asyncProperty(arb, async (s) => {
        const { rows } = await processWindows(s.items, s.size, s.slide, s);
        expect(rows).toEqual(bruteProcess(s.items, s.size, s.slide));
      }),
      { seed: 1612, numRuns: 60 },
    );
  });

  it('crashes and duplicate deliveries change no window', async () => {
    const items: Ev[] = [];
    for (let i = 0; i < 400; i++) items.push({ k: `k${i % 5}`, t: i * 3 + ((i * 37) % 11) });
    const want = bruteProcess(items, 40, 40);
    for (const seed of [1, 2, 3]) {
      const run = await processWindows(items, 40, 40, { delay: 10, parallelism: 2, batch: 3, faults: new FaultInjector({ seed, crashProbability: 0.05, duplicateProbability: 0.1 }) });
      expect(run.recoveries).toBeGreaterThan(0);
      expect(run.rows).toEqual(want);
    }
  });
});

describe('process windows, state layout', () => {
  it("keeps a pane's records in a field of their own, appended in place batch by batch, and drops it with the pane", () => {
    const { op, commit, stored, record, timers, emitted } = operatorOver();
    record(1);
    commit();
    const list = stored().get('R0');
    for (let t = 2; t <= 9; t++) {
      record(t);
      commit();
    }
    expect(stored()).toEqual(new Map<string, unknown>([['P', [0, null]], ['R0', [1, 2, 3, 4, 5, 6, 7, 8, 9].map((t) => ({ t }))]]));
    // Appended in place: the store's one array all along.
    expect(stored().get('R0')).toBe(list);
    expect(timers).toEqual([9]);
    op.onTimer!('event', 9, '');
    commit();
    expect(emitted).toEqual([[1, 2, 3, 4, 5, 6, 7, 8, 9]]);
    expect(stored().size).toBe(0);
  });

  it("keeps a session's records in a field named by its first record's time, and moves a bridged session's records into the earlier one's", () => {
    const { op, commit, stored, record, emitted, setWatermark } = operatorOver(Windows.session(5), (c, spec) => lazySessionOperator(c, spec, 5));
    record(0);
    record(2);
    commit();
    record(4);
    record(20);
    record(30);
    commit();
    expect(stored()).toEqual(
      new Map<string, unknown>([
        ['S', [0, 9, 0, 20, 25, 20, 30, 35, 30]],
        ['R0', [{ t: 0 }, { t: 2 }, { t: 4 }]],
        ['R20', [{ t: 20 }]],
        ['R30', [{ t: 30 }]],
      ]),
    );
    // 25 bridges [20, 25) and [30, 35) (sessions that touch merge): the later session's records move to the earlier one's field.
    record(25);
    commit();
    expect(stored()).toEqual(
      new Map<string, unknown>([
        ['S', [0, 9, 0, 20, 35, 20]],
        ['R0', [{ t: 0 }, { t: 2 }, { t: 4 }]],
        ['R20', [{ t: 20 }, { t: 30 }, { t: 25 }]],
      ]),
    );
    setWatermark(100);
    op.onTimer!('event', 100, '');
    commit();
    expect(emitted).toEqual([
      [0, 2, 4],
      [20, 30, 25],
    ]);
    expect(stored().size).toBe(0);
  });
});
