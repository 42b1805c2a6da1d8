import { describe, expect, it } from 'vitest';
import { Sinks } from '../../lib/api/sinks.ts';
import { type DataStream, Job } from '../../lib/api/stream.ts';
import { type WindowAssigner, Windows } from '../../lib/api/windows.ts';
import { JobDefinitionError } from '../../lib/errors.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { InMemoryStateBackend } from '../../lib/state/memory.ts';
import { droppedLate, events, sorted, stageOf, withTimestamps } from './helpers.ts';

/**
 * Both sides come from one source, so they share its watermark. Their relative order
 * holds only with one record per source envelope (batch: 1): a batch sends its left and
 * right records in separate envelopes, one per edge.
 */
interface Tagged {
  readonly side: 'L' | 'R';
  readonly k: string;
  readonly t: number;
  readonly id: string;
}
const L = (k: string, t: number, id: string): Tagged => ({ side: 'L', k, t, id });
const R = (k: string, t: number, id: string): Tagged => ({ side: 'R', k, t, id });

function sides(stream: DataStream<Tagged>) {
  return {
    left: stream.filter((e) => e.side === 'L').keyBy((e) => e.k),
    right: stream.filter((e) => e.side === 'R').keyBy((e) => e.k),
  };
}

async function pairs(items: readonly Tagged[], assigner: WindowAssigner, opts: { delay?: number; batch?: number; parallelism?: number } = {}) {
  const backend = new InMemoryStateBackend();
  const job = new Job('pairs', { parallelism: opts.parallelism ?? 1 });
  const sink = Sinks.collect<{ l: string; r: string; key: string; start: number; ts: number }>();
  const { left, right } = sides(events(job, 'in', items, opts.delay ?? 100));
  const joined = left
    .join(right)
    .window(assigner)
    .apply((l, r, { key, window }) => ({ l: l.id, r: r.id, key: key as string, start: window.start }))
    .name('join');
  withTimestamps(joined).sinkTo(sink);
  const { runtime } = await runJob(job, { sourceBatchSize: opts.batch ?? 512, backend });
  return { rows: sink.records, dropped: droppedLate(runtime, 'join'), entities: backend.entityCount('pairs', stageOf(runtime, 'join')) };
}

describe('window join: pairs', () => {
  it('tumbling: every pair of one key and window, left order then right order, timestamp end - 1', async () => {
    const items = [L('x', 1, 'l1'), R('x', 2, 'r1'), L('x', 5, 'l2'), L('y', 3, 'l3'), R('x', 9, 'r2'), R('x', 10, 'r3'), R('z', 4, 'r4'), L('x', 12, 'l4')];
    const { rows, entities } = await pairs(items, Windows.tumbling(10));
    expect(rows).toEqual([
      { l: 'l1', r: 'r1', key: 'x', start: 0, ts: 9 },
      { l: 'l1', r: 'r2', key: 'x', start: 0, ts: 9 },
      { l: 'l2', r: 'r1', key: 'x', start: 0, ts: 9 },
      { l: 'l2', r: 'r2', key: 'x', start: 0, ts: 9 },
      { l: 'l4', r: 'r3', key: 'x', start: 10, ts: 19 },
    ]);
    expect(entities).toBe(0);
  });

  it('sliding: a pair meets in every window holding both', async () => {
    // 7 is in [0,10) and [5,15); 3 in [-5,5) and [0,10); 12 in [5,15) and [10,20)
    const { rows } = await pairs([R('x', 3, 'r3'), L('x', 7, 'l7'), R('x', 12, 'r12')], Windows.sliding(10, 5));
    expect(rows).toEqual([
      { l: 'l7', r: 'r3', key: 'x', start: 0, ts: 9 },
      { l: 'l7', r: 'r12', key: 'x', start: 5, ts: 14 },
    ]);
  });

  it('drops and counts records late for all their windows', async () => {
    // Watermark = max t - 1 after each record: 15 fires [0,10), so r2 (t 2) is late.
    const { rows, dropped } = await pairs([L('x', 1, 'l1'), L('x', 15, 'l15'), R('x', 2, 'r2'), R('x', 16, 'r16')], Windows.tumbling(10), { delay: 0, batch: 1 });
    expect(rows).toEqual([{ l: 'l15', r: 'r16', key: 'x', start: 10, ts: 19 }]);
    expect(dropped).toBe(1);
  });

  it('same result with parallelism 2 and out-of-order input', async () => {
    const items = [L('x', 4, 'a'), R('x', 1, 'b'), L('y', 8, 'c'), R('y', 3, 'd'), R('x', 12, 'e'), L('x', 9, 'f'), L('x', 14, 'g'), R('y', 11, 'h')];
    const want = sorted([
      { l: 'a', r: 'b', key: 'x', start: 0, ts: 9 },
      { l: 'f', r: 'b', key: 'x', start: 0, ts: 9 },
      { l: 'g', r: 'e', key: 'x', start: 10, ts: 19 },
      { l: 'c', r: 'd', key: 'y', start: 0, ts: 9 },
    ]);
    for (const parallelism of [1, 2]) {
      const { rows, dropped } = await pairs(items, Windows.tumbling(10), { parallelism, batch: 2, delay: 5 });
      expect(sorted(rows)).toEqual(want);
      expect(dropped).toBe(0);
    }
  });

  it('rejects session windows when the operator is created', async () => {
    const job = new Job('session-join', { parallelism: 1 });
    const { left, right } = sides(events(job, 'in', [L('x', 1, 'l')]));
    left
      .join(right)
      .window(Windows.session(10))
      .apply((l, r) => [l, r])
      .sinkTo(Sinks.collect());
    await expect(runJob(job)).rejects.toThrow(JobDefinitionError);
    await expect(runJob(job)).rejects.toThrow(/tumbling or sliding/);
  });
});

describe('window join: coGroup', () => {
  interface Person {
    readonly id: number;
    readonly name: string;
    readonly t: number;
  }
  interface Auction {
    readonly id: number;
    readonly seller: number;
    readonly t: number;
  }

  it('Nexmark Q8 shape: persons who opened an auction in the same 10 s window, one row per (person, window)', async () => {
    const job = new Job('q8', { parallelism: 2 });
    const sink = Sinks.collect<{ id: number; name: string; windowStart: number; windowEnd: number }>();
    const persons = events<Person>(job, 'persons', [
      { id: 1, name: 'Alice', t: 1000 },
      { id: 2, name: 'Bob', t: 2000 },
      { id: 3, name: 'Carol', t: 12_000 },
    ]);
    const auctions = events<Auction>(job, 'auctions', [
      { id: 10, seller: 1, t: 3000 },
      { id: 11, seller: 1, t: 4000 }, // a second auction of Alice's: still one row
      { id: 12, seller: 2, t: 11_000 }, // Bob's auction is in the next window
      { id: 13, seller: 3, t: 15_000 },
      { id: 14, seller: 9, t: 5000 }, // no such person
    ]);
    persons
      .keyBy((p) => p.id)
      .join(auctions.keyBy((a) => a.seller))
      .window(Windows.tumbling(10_000))
      .coGroup<{ id: number; name: string; windowStart: number; windowEnd: number }>((ps, as, { window }, out) => {
        if (as.length === 0) return;
        for (const p of ps) out.emit({ id: p.id, name: p.name, windowStart: window.start, windowEnd: window.end });
      })
      .sinkTo(sink);
    await runJob(job);
    expect(sorted(sink.records)).toEqual(
      sorted([
        { id: 1, name: 'Alice', windowStart: 0, windowEnd: 10_000 },
        { id: 3, name: 'Carol', windowStart: 10_000, windowEnd: 20_000 },
      ]),
    );
  });

  it('is called once per window with a record on either side, empty sides included', async () => {
    const job = new Job('cogroup', { parallelism: 1 });
    const sink = Sinks.collect<{ key: string; start: number; lefts: string[]; rights: string[]; ts: number }>();
    const { left, right } = sides(events(job, 'in', [L('x', 1, 'l1'), R('x', 2, 'r1'), L('x', 3, 'l2'), R('x', 14, 'r2'), L('y', 5, 'l3')]));
    const out = left
      .join(right)
      .window(Windows.tumbling(10))
      .coGroup<{ key: string; start: number; lefts: string[]; rights: string[] }>((ls, rs, { key, window }, c) =>
        c.emit({ key: key as string, start: window.start, lefts: ls.map((e) => e.id), rights: rs.map((e) => e.id) }),
      );
    withTimestamps(out).sinkTo(sink);
    await runJob(job);
    expect(sink.records).toEqual([
      { key: 'x', start: 0, lefts: ['l1', 'l2'], rights: ['r1'], ts: 9 },
      { key: 'y', start: 0, lefts: ['l3'], rights: [], ts: 9 },
      { key: 'x', start: 10, lefts: [], rights: ['r2'], ts: 19 },
    ]);
  });

  /** Each call's key, window start and sides, with the node's entities left after the run. */
  async function coGroupCalls(items: readonly Tagged[], options?: { inner?: boolean }) {
    const backend = new InMemoryStateBackend();
    const job = new Job('cogroup-calls', { parallelism: 1 });
    const sink = Sinks.collect<{ key: string; start: number; lefts: string[]; rights: string[] }>();
    const { left, right } = sides(events(job, 'in', items));
    left
      .join(right)
      .window(Windows.tumbling(10))
      .coGroup<{ key: string; start: number; lefts: string[]; rights: string[] }>(
        (ls, rs, { key, window }, c) => c.emit({ key: key as string, start: window.start, lefts: ls.map((e) => e.id), rights: rs.map((e) => e.id) }),
        options,
      )
      .name('join')
      .sinkTo(sink);
    const { runtime } = await runJob(job, { backend });
    return { calls: sorted(sink.records), entities: backend.entityCount('cogroup-calls', stageOf(runtime, 'join')) };
  }

  // x: both sides in [0,10), only a right in [10,20); y: only a left; z: both in [10,20), only a right in [20,30).
  const mixed = [L('x', 1, 'l1'), R('x', 2, 'r1'), L('y', 5, 'l3'), L('x', 3, 'l2'), R('x', 14, 'r2'), L('z', 11, 'l4'), R('z', 12, 'r3'), R('z', 25, 'r4')];

  it('inner: called only for windows with records on both sides; one-sided windows are purged all the same', async () => {
    const inner = await coGroupCalls(mixed, { inner: true });
    expect(inner.calls).toEqual(
      sorted([
        { key: 'x', start: 0, lefts: ['l1', 'l2'], rights: ['r1'] },
        { key: 'z', start: 10, lefts: ['l4'], rights: ['r3'] },
      ]),
    );
    expect(inner.entities).toBe(0);
    // The default (outer) sees the same two windows and the three one-sided ones.
    const outer = await coGroupCalls(mixed);
    expect(outer.calls).toHaveLength(5);
    expect(outer.calls).toEqual(expect.arrayContaining(inner.calls));
    expect(outer.entities).toBe(0);
    expect(await coGroupCalls(mixed, { inner: false })).toEqual(outer);
  });

  it('rejects an inner option that is not a boolean, and unknown options, naming them', () => {
    const job = new Job('cogroup-options', { parallelism: 1 });
    const { left, right } = sides(events(job, 'in', [L('x', 1, 'l')]));
    const joined = left.join(right).window(Windows.tumbling(10));
    const bad = { inner: 'yes' } as unknown as { inner: boolean };
    expect(() => joined.coGroup(() => {}, bad)).toThrow(JobDefinitionError);
    expect(() => joined.coGroup(() => {}, bad)).toThrow(/options\.inner: true or false.*"yes"/);
    const typo = { innner: true } as unknown as { inner: boolean };
    expect(() => joined.coGroup(() => {}, typo)).toThrow(/at most "inner".*"innner"/);
  });
});
