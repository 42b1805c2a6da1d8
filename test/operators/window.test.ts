import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { OutputTag } from '../../lib/api/types.ts';
import { type WindowAssigner, Windows } from '../../lib/api/windows.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { FaultInjector } from '../../lib/local/faults.ts';
import { InMemoryStateBackend } from '../../lib/state/memory.ts';
import { count, type Counted, countRow, droppedLate, type Ev, events, sorted, stageOf, withTimestamps } from './helpers.ts';

const ev = (k: string, t: number, v = 0): Ev => ({ k, t, v });

/** Count per (key, window) through the window operator; rows with their output timestamps. */
async function windowCounts(items: readonly Ev[], assigner: WindowAssigner, opts: { parallelism?: number; delay?: number; batch?: number } = {}) {
  const job = new Job('counts', { parallelism: opts.parallelism ?? 1 });
  const sink = Sinks.collect<Counted & { ts: number }>();
  const counted = events(job, 'in', items, opts.delay ?? 0)
    .keyBy((e) => e.k)
    .window(assigner)
    .aggregate(count, countRow)
    .name('win');
  withTimestamps(counted).sinkTo(sink);
  const { runtime } = await runJob(job, { sourceBatchSize: opts.batch ?? 512 });
  return { rows: sink.records, dropped: droppedLate(runtime, 'win') };
}

const row = (key: string, start: number, end: number, n: number) => ({ key, start, end, n, ts: end - 1 });

describe('tumbling windows', () => {
  it('an event exactly at a window end goes to the next window; negative timestamps', async () => {
    const items = [-11, -10, -1, 0, 5, 9, 10, 19, 20].map((t) => ev('a', t)).concat([ev('b', 3)]);
    const { rows } = await windowCounts(items, Windows.tumbling(10));
    expect(sorted(rows)).toEqual(
      sorted([row('a', -20, -10, 1), row('a', -10, 0, 2), row('a', 0, 10, 3), row('a', 10, 20, 2), row('a', 20, 30, 1), row('b', 0, 10, 1)]),
    );
  });

  it('reduce with project', async () => {
    const job = new Job('reduce', { parallelism: 1 });
    const sink = Sinks.collect<{ key: string; start: number; sum: number }>();
    events(job, 'in', [ev('a', 1, 1), ev('a', 4, 2), ev('a', 12, 4), ev('b', 2, 8), ev('a', 9, 16)], 10)
      .keyBy((e) => e.k)
      .window(Windows.tumbling(10))
      .reduce(
        (x, y) => ({ k: x.k, t: Math.max(x.t, y.t), v: x.v! + y.v! }),
        (r, { key, window }) => ({ key: key as string, start: window.start, sum: r.v! }),
      )
      .sinkTo(sink);
    await runJob(job);
    expect(sorted(sink.records)).toEqual(
      sorted([
        { key: 'a', start: 0, sum: 19 },
        { key: 'a', start: 10, sum: 4 },
        { key: 'b', start: 0, sum: 8 },
      ]),
    );
  });

  it('reduce without project emits the reduced record', async () => {
    const job = new Job('reduce-plain', { parallelism: 1 });
    const sink = Sinks.collect<Ev>();
    events(job, 'in', [ev('a', 1, 5), ev('a', 2, 7), ev('a', 3, 6)])
      .keyBy((e) => e.k)
      .window(Windows.tumbling(10))
      .reduce((x, y) => (y.v! > x.v! ? y : x))
      .sinkTo(sink);
    await runJob(job);
    expect(sink.records).toEqual([ev('a', 2, 7)]);
  });

  it('process: all elements in arrival order, several outputs, default timestamp end - 1', async () => {
    const job = new Job('process', { parallelism: 1 });
    const sink = Sinks.collect<{ key: string; ts: number; times?: number[]; n?: number }>();
    const out = events(job, 'in', [ev('a', 3), ev('a', 1), ev('a', 2), ev('a', 14)], 5)
      .keyBy((e) => e.k)
      .window(Windows.tumbling(10))
      .process<{ key: string; times?: number[]; n?: number }>((elements, { key }, collector) => {
        collector.emit({ key: key as string, times: elements.map((e) => e.t) });
        collector.emit({ key: key as string, n: elements.length }, 1000);
      });
    withTimestamps(out).sinkTo(sink);
    await runJob(job);
    expect(sink.records).toEqual([
      { key: 'a', times: [3, 1, 2], ts: 9 },
      { key: 'a', n: 3, ts: 1000 },
      { key: 'a', times: [14], ts: 19 },
      { key: 'a', n: 1, ts: 1000 },
    ]);
  });
});

describe('sliding windows', () => {
  it('size 10, slide 3: each record is in exactly the windows with t - size < start <= t; one key fires by end', async () => {
    const items = [0, 1, 5, 10, 12].map((t) => ev('a', t));
    // windows of 0: -9,-6,-3,0; of 1: -6,-3,0; of 5: -3,0,3; of 10: 3,6,9; of 12: 3,6,9,12
    const { rows } = await windowCounts(items, Windows.sliding(10, 3));
    expect(rows).toEqual([
      row('a', -9, 1, 1),
      row('a', -6, 4, 2),
      row('a', -3, 7, 3),
      row('a', 0, 10, 3),
      row('a', 3, 13, 3),
      row('a', 6, 16, 2),
      row('a', 9, 19, 2),
      row('a', 12, 22, 1),
    ]);
  });

  it('a reduce that updates its first argument in place does not leak between overlapping windows', async () => {
    const job = new Job('mutating', { parallelism: 1 });
    const sink = Sinks.collect<{ start: number; sum: number }>();
    const items = [ev('a', 1, 1), ev('a', 6, 10), ev('a', 12, 100)];
    events(job, 'in', items)
      .keyBy((e) => e.k)
      .window(Windows.sliding(10, 5))
      .reduce(
        (acc, e) => Object.assign(acc, { v: acc.v! + e.v! }),
        (r, { window }) => ({ start: window.start, sum: r.v! }),
      )
      .sinkTo(sink);
    await runJob(job);
    expect(sink.records).toEqual([
      { start: -5, sum: 1 },
      { start: 0, sum: 11 },
      { start: 5, sum: 110 },
      { start: 10, sum: 100 },
    ]);
    expect(items[0]).toEqual(ev('a', 1, 1));
  });

  it('matches a brute-force batch computation (property)', async () => {
    await fc.assert(
      fc.asyncProperty(streamArb, fc.integer({ min: 1, max: 30 }), fc.integer({ min: 1, max: 30 }), async (s, size, slide) => {
        const { rows, dropped } = await windowCounts(s.items, Windows.sliding(size, slide), s);
        expect(dropped).toBe(0);
        expect(sorted(rows.map(({ ts: _ts, ...r }) => r))).toEqual(sorted(bruteSliding(s.items, size, slide)));
      }),
      { seed: 20240611, numRuns: 60 },
    );
  });
});

describe('session windows', () => {
  it('merges overlapping and touching windows; bridges two sessions; out-of-order arrival', async () => {
    const items = [
      ev('a', 0), ev('a', 10), // touching: one session [0, 20)
      ev('b', 0), ev('b', 11), // 11 apart: two sessions
      ev('c', 0), ev('c', 20), ev('c', 10), // 10 bridges [0, 10) and [20, 30)
      ev('d', 20), ev('d', 5), ev('d', 12), // out of order within the watermark delay
    ];
    const { rows } = await windowCounts(items, Windows.session(10), { delay: 50 });
    expect(sorted(rows)).toEqual(
      sorted([row('a', 0, 20, 2), row('b', 0, 10, 1), row('b', 11, 21, 1), row('c', 0, 30, 3), row('d', 5, 30, 3)]),
    );
  });

  it('fires a session once the watermark passes its end, then starts a new one', async () => {
    const { rows } = await windowCounts([0, 5, 30, 31].map((t) => ev('e', t)), Windows.session(10), { batch: 1 });
    expect(rows).toEqual([row('e', 0, 15, 2), row('e', 30, 41, 2)]);
  });

  it('process and reduce see merged contents (earlier session first, then the bridging record)', async () => {
    const job = new Job('sess-fns', { parallelism: 1 });
    const lists = Sinks.collect<{ start: number; end: number; times: number[] }>();
    const sums = Sinks.collect<{ start: number; sum: number }>();
    const keyed = events(job, 'in', [ev('c', 0, 1), ev('c', 20, 2), ev('c', 10, 4), ev('c', 50, 8)], 100).keyBy((e) => e.k);
    keyed
      .window(Windows.session(10))
      .process<{ start: number; end: number; times: number[] }>((elements, { window }, out) => out.emit({ ...window, times: elements.map((e) => e.t) }))
      .sinkTo(lists);
    keyed
      .window(Windows.session(10))
      .reduce(
        (a, b) => ({ ...a, v: a.v! + b.v! }),
        (r, { window }) => ({ start: window.start, sum: r.v! }),
      )
      .sinkTo(sums);
    await runJob(job);
    expect(lists.records).toEqual([
      { start: 0, end: 30, times: [0, 20, 10] },
      { start: 50, end: 60, times: [50] },
    ]);
    expect(sums.records).toEqual([
      { start: 0, sum: 7 },
      { start: 50, sum: 8 },
    ]);
  });

  it('matches a brute-force batch computation (property)', async () => {
    await fc.assert(
      fc.asyncProperty(streamArb, fc.integer({ min: 1, max: 40 }), async (s, gap) => {
        const { rows, dropped } = await windowCounts(s.items, Windows.session(gap), s);
        expect(dropped).toBe(0);
        expect(sorted(rows.map(({ ts: _ts, ...r }) => r))).toEqual(sorted(bruteSessions(s.items, gap)));
      }),
      { seed: 7, numRuns: 60 },
    );
  });
});

describe('process windows kept per window (sliding, lateness)', () => {
  type Listed = { key: string; start: number; end: number; times: number[] };
  const listed = (job: Job, items: readonly Ev[], assigner: WindowAssigner, delay: number, lateness = 0) => {
    const out = Sinks.collect<Listed>();
    let w = events(job, 'in', items, delay).keyBy((e) => e.k).window(assigner);
    if (lateness > 0) w = w.allowedLateness(lateness);
    w.process<Listed>((es, { key, window }, c) => c.emit({ key: key as string, ...window, times: es.map((e) => e.t).sort((a, b) => a - b) }))
      .name('win')
      .sinkTo(out);
    return out;
  };

  it('give every window its records, in batches of any size (property)', async () => {
    await fc.assert(
      fc.asyncProperty(streamArb, fc.integer({ min: 2, max: 30 }), fc.integer({ min: 1, max: 30 }), async (s, size, slide) => {
        // A slide that the size does not divide: these windows are kept per window (window.ts), not as panes.
        fc.pre(slide % size !== 0);
        const job = new Job('process-sliding', { parallelism: s.parallelism });
        const out = listed(job, s.items, Windows.sliding(size, slide), s.delay);
        await runJob(job, { sourceBatchSize: s.batch });
        const want = new Map<string, Listed>();
        for (const e of s.items) {
          for (let st = e.t - size + 1; st <= e.t; st++) {
            if (((st % slide) + slide) % slide !== 0) continue;
            const id = `${e.k}/${st}`;
            const x = want.get(id) ?? { key: e.k, start: st, end: st + size, times: [] };
            x.times.push(e.t);
            want.set(id, x);
          }
        }
        expect(sorted(out.records)).toEqual(sorted([...want.values()].map((x) => ({ ...x, times: [...x.times].sort((a, b) => a - b) }))));
      }),
      { seed: 31, numRuns: 60 },
    );
  });

  it('a record within the allowed lateness fires the whole updated list', async () => {
    // Watermark = max t - 1, one record per envelope: 12 fires [0, 10) with {1, 5}; 3 comes late within lateness.
    const job = new Job('process-late', { parallelism: 1 });
    const out = listed(job, [ev('a', 1), ev('a', 5), ev('a', 12), ev('a', 3), ev('a', 13)], Windows.tumbling(10), 0, 5);
    await runJob(job, { sourceBatchSize: 1 });
    expect(out.records).toEqual([
      { key: 'a', start: 0, end: 10, times: [1, 5] },
      { key: 'a', start: 0, end: 10, times: [1, 3, 5] },
      { key: 'a', start: 10, end: 20, times: [12, 13] },
    ]);
  });
});

describe('allowed lateness and late data', () => {
  // Watermark = max t - 1, one record per envelope: the watermark moves after every record.
  const items = [ev('a', 1), ev('a', 5), ev('a', 12), ev('a', 3), ev('a', 16), ev('a', 4)];

  async function lateJob(withTag: boolean) {
    const backend = new InMemoryStateBackend();
    const job = new Job('late', { parallelism: 1 });
    const main = Sinks.collect<Counted>();
    const late = Sinks.collect<Ev>();
    const tag = new OutputTag<Ev>('late');
    const windowed = events(job, 'in', items).keyBy((e) => e.k).window(Windows.tumbling(10)).allowedLateness(5);
    if (withTag) windowed.sideOutputLateData(tag);
    const result = windowed.aggregate(count, countRow).name('win');
    result.sinkTo(main);
    if (withTag) result.getSideOutput(tag).sinkTo(late);
    const { runtime } = await runJob(job, { sourceBatchSize: 1, backend });
    return { main: main.records, late: late.records, dropped: droppedLate(runtime, 'win'), entities: backend.entityCount('late', stageOf(runtime, 'win')) };
  }

  it('fires on time, fires an update for a record within lateness, side-outputs a record beyond it', async () => {
    const r = await lateJob(true);
    // 12 moves the watermark to 11: [0, 10) fires with {1, 5}; 3 is late but within
    // lateness (9 + 5 > 11): an updated full result; 16 moves it to 15 and cleans
    // [0, 10) up (at 14), so 4 is late for all its windows.
    expect(r.main).toEqual([
      { key: 'a', start: 0, end: 10, n: 2 },
      { key: 'a', start: 0, end: 10, n: 3 },
      { key: 'a', start: 10, end: 20, n: 2 },
    ]);
    expect(r.late).toEqual([ev('a', 4)]);
    expect(r.dropped).toBe(0);
    expect(r.entities).toBe(0);
  });

  it('without a late tag the record is dropped and counted', async () => {
    const r = await lateJob(false);
    expect(r.main).toHaveLength(3);
    expect(r.dropped).toBe(1);
  });

  it('sliding: a record late for some windows is added to the live ones only', async () => {
    const job = new Job('late-sliding', { parallelism: 1 });
    const main = Sinks.collect<Counted>();
    const late = Sinks.collect<Ev>();
    const tag = new OutputTag<Ev>('late');
    const result = events(job, 'in', [1, 7, 16, 8, 14].map((t) => ev('a', t)))
      .keyBy((e) => e.k)
      .window(Windows.sliding(10, 5))
      .sideOutputLateData(tag)
      .aggregate(count, countRow);
    result.sinkTo(main);
    result.getSideOutput(tag).sinkTo(late);
    await runJob(job, { sourceBatchSize: 1 });
    // 16 fires [-5,5), [0,10), [5,15); 8 is late for [0,10) and [5,15): side output;
    // 14 is late for [5,15) but joins [10,20).
    expect(main.records).toEqual([
      { key: 'a', start: -5, end: 5, n: 1 },
      { key: 'a', start: 0, end: 10, n: 2 },
      { key: 'a', start: 5, end: 15, n: 1 },
      { key: 'a', start: 10, end: 20, n: 2 },
      { key: 'a', start: 15, end: 25, n: 1 },
    ]);
    expect(late.records).toEqual([ev('a', 8)]);
  });

  it('sessions: a late record that extends a fired session fires the merged session again', async () => {
    const job = new Job('late-session', { parallelism: 1 });
    const main = Sinks.collect<Counted>();
    events(job, 'in', [0, 25, 5, 40, 3].map((t) => ev('a', t)))
      .keyBy((e) => e.k)
      .window(Windows.session(10))
      .allowedLateness(20)
      .aggregate(count, countRow)
      .name('win')
      .sinkTo(main);
    const { runtime } = await runJob(job, { sourceBatchSize: 1 });
    // 25 fires [0,10); 5 merges into [0,15) (late but within lateness: fires at once);
    // 40 cleans [0,15) up (14 + 20 <= 39) and fires [25,35); 3 is then too late.
    expect(main.records).toEqual([
      { key: 'a', start: 0, end: 10, n: 1 },
      { key: 'a', start: 0, end: 15, n: 2 },
      { key: 'a', start: 25, end: 35, n: 1 },
      { key: 'a', start: 40, end: 50, n: 1 },
    ]);
    expect(droppedLate(runtime, 'win')).toBe(1);
  });
});

describe('results do not depend on parallelism', () => {
  // Out of order by up to 5 ms, watermark delay 5: nothing is late.
  const items = [ev('a', 3), ev('b', 1), ev('a', 12), ev('a', 8), ev('b', 15), ev('a', 11), ev('b', 10), ev('a', 25), ev('a', 21), ev('b', 22)];
  const expected = sorted([row('a', 0, 10, 2), row('a', 10, 20, 2), row('a', 20, 30, 2), row('b', 0, 10, 1), row('b', 10, 20, 2), row('b', 20, 30, 1)]);
  for (const parallelism of [1, 2]) {
    for (const batch of [1, 2, 512]) {
      it(`parallelism ${parallelism}, ${batch} records per source envelope`, async () => {
        const { rows, dropped } = await windowCounts(items, Windows.tumbling(10), { parallelism, batch, delay: 5 });
        expect(sorted(rows)).toEqual(expected);
        expect(dropped).toBe(0);
      });
    }
  }
});

describe('crash recovery', () => {
  it('injected crashes and duplicate deliveries do not change the results (retained windows, sessions)', async () => {
    // Disorder within the watermark delay, so no record is late: with late records the
    // results would legitimately depend on batch boundaries, which recovery changes.
    const items: Ev[] = [];
    for (let i = 0; i < 300; i++) items.push(ev(`k${i % 7}`, i * 3 + ((i * 37) % 11)));
    const once = async (faults?: FaultInjector) => {
      const job = new Job('faults', { parallelism: 2 });
      const slide = Sinks.collect<Counted>();
      const sess = Sinks.collect<{ key: string; start: number; end: number; times: number[] }>();
      const keyed = events(job, 'in', items, 10).keyBy((e) => e.k);
      keyed.window(Windows.sliding(20, 7)).allowedLateness(8).aggregate(count, countRow).sinkTo(slide);
      keyed
        .window(Windows.session(4))
        .allowedLateness(5)
        .process<{ key: string; start: number; end: number; times: number[] }>((es, { key, window }, out) =>
          out.emit({ key: key as string, ...window, times: es.map((e) => e.t).sort((a, b) => a - b) }),
        )
        .sinkTo(sess);
      const { stats } = await runJob(job, { sourceBatchSize: 4, maxEnvelopesPerBatch: 3, faults });
      return { slide: sorted(slide.records), sess: sorted(sess.records), recoveries: stats.recoveries };
    };
    const clean = await once();
    expect(clean.slide).toEqual(sorted(bruteSliding(items, 20, 7)));
    expect(clean.sess).toHaveLength(sorted(bruteSessions(items, 4)).length);
    for (const seed of [1, 2, 3]) {
      const faulty = await once(new FaultInjector({ seed, crashProbability: 0.05, duplicateProbability: 0.1 }));
      expect(faulty.recoveries).toBeGreaterThan(0);
      expect(faulty.slide).toEqual(clean.slide);
      expect(faulty.sess).toEqual(clean.sess);
    }
  });
});

// ---- brute force over the finite stream ----

/**
 * Random streams whose disorder stays within the watermark delay (so nothing is late):
 * t = a non-decreasing base + jitter in [0, delay].
 */
const streamArb = fc
  .record({
    delay: fc.integer({ min: 0, max: 20 }),
    rows: fc.array(fc.record({ k: fc.constantFrom('a', 'b', 'c'), step: fc.integer({ min: 0, max: 15 }), jitter: fc.nat() }), { maxLength: 40 }),
    start: fc.integer({ min: -200, max: 100 }),
    parallelism: fc.constantFrom(1, 2),
    batch: fc.integer({ min: 1, max: 5 }),
  })
  .map(({ delay, rows, start, parallelism, batch }) => {
    let base = start;
    const items = rows.map((r) => {
      base += r.step;
      return ev(r.k, base + (r.jitter % (delay + 1)));
    });
    return { items, delay, parallelism, batch };
  });

function bruteSliding(items: readonly Ev[], size: number, slide: number) {
  const counts = new Map<string, Counted>();
  for (const e of items) {
    for (let s = e.t - size + 1; s <= e.t; s++) {
      if (((s % slide) + slide) % slide !== 0) continue;
      const id = `${e.k}/${s}`;
      const c = counts.get(id);
      counts.set(id, { key: e.k, start: s, end: s + size, n: (c?.n ?? 0) + 1 });
    }
  }
  return [...counts.values()];
}

function bruteSessions(items: readonly Ev[], gap: number) {
  const out: Counted[] = [];
  for (const k of new Set(items.map((e) => e.k))) {
    const ts = items.filter((e) => e.k === k).map((e) => e.t).sort((x, y) => x - y);
    let start = ts[0];
    let n = 0;
    for (let i = 0; i < ts.length; i++) {
      n++;
      if (i === ts.length - 1 || ts[i + 1] - ts[i] > gap) {
        out.push({ key: k, start, end: ts[i] + gap, n });
        start = ts[i + 1];
        n = 0;
      }
    }
  }
  return out;
}
