import { describe, expect, it } from 'vitest';
import { type Sink, Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { keyToString } from '../../lib/api/types.ts';
import { compile } from '../../lib/graph/compile.ts';
import { keyGroupOfString } from '../../lib/graph/keygroups.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { entityId } from '../../lib/runtime/partition.ts';
import { InMemoryStateBackend } from '../../lib/state/memory.ts';
import { droppedLate, events, sorted, stageOf, withTimestamps } from './helpers.ts';

interface Tagged {
  readonly side: 'L' | 'R';
  readonly k: string;
  readonly t: number;
}
const L = (t: number, k = 'x'): Tagged => ({ side: 'L', k, t });
const R = (t: number, k = 'x'): Tagged => ({ side: 'R', k, t });

interface Pair {
  readonly key: string;
  readonly l: number;
  readonly r: number;
  readonly lt: number;
  readonly rt: number;
}

/**
 * Both sides come from one source, so they share its watermark. Their relative order
 * holds only with one record per source envelope (batch: 1): a batch sends its left and
 * right records in separate envelopes, one per edge.
 */
function intervalJob(name: string, items: readonly Tagged[], lower: number, upper: number, opts: { delay?: number; parallelism?: number; emitAt?: (p: Pair) => number } = {}) {
  const job = new Job(name, { parallelism: opts.parallelism ?? 1 });
  const src = events(job, 'in', items, opts.delay ?? 100);
  const left = src.filter((e) => e.side === 'L').keyBy((e) => e.k);
  const right = src.filter((e) => e.side === 'R').keyBy((e) => e.k);
  const joined = left
    .intervalJoin(right)
    .between(lower, upper)
    .process<Pair>((l, r, ctx) => {
      const p = { key: ctx.key as string, l: l.t, r: r.t, lt: ctx.leftTimestamp, rt: ctx.rightTimestamp };
      ctx.emit(p, opts.emitAt?.(p));
    })
    .name('ij');
  return { job, joined };
}

async function run(items: readonly Tagged[], lower: number, upper: number, opts: { delay?: number; parallelism?: number; batch?: number; emitAt?: (p: Pair) => number } = {}) {
  const { job, joined } = intervalJob('ij', items, lower, upper, opts);
  const sink = Sinks.collect<Pair & { ts: number }>();
  withTimestamps(joined).sinkTo(sink);
  const backend = new InMemoryStateBackend();
  const { runtime } = await runJob(job, { sourceBatchSize: opts.batch ?? 512, backend });
  return { rows: sink.records, dropped: droppedLate(runtime, 'ij'), entities: backend.entityCount('ij', stageOf(runtime, 'ij')) };
}

const pair = (l: number, r: number, ts = Math.max(l, r), key = 'x') => ({ key, l, r, lt: l, rt: r, ts });

describe('interval join', () => {
  it('bounds are inclusive at both ends; negative lower bound; either side may arrive first', async () => {
    // between(-2, 3): left 10 meets rights in [8, 13]
    const { rows, entities } = await run([R(7), R(8), L(10), R(13), R(14)], -2, 3, { batch: 1 });
    expect(rows).toEqual([pair(10, 8), pair(10, 13)]);
    expect(entities).toBe(0);
  });

  it('both bounds negative; the function may set the output timestamp', async () => {
    // between(-5, -1): left 10 meets rights in [5, 9]
    const { rows } = await run([R(4), R(5), L(10), R(9), R(10)], -5, -1, { batch: 1, emitAt: (p) => p.l * 100 });
    expect(rows).toEqual([pair(10, 5, 1000), pair(10, 9, 1000)]);
  });

  it('joins only equal keys, in the other side\'s timestamp order', async () => {
    const { rows } = await run([R(6), R(3), R(5, 'y'), R(4), L(4), L(5, 'y')], 0, 2, { batch: 1 });
    expect(rows).toEqual([pair(4, 4), pair(4, 6), pair(5, 5, 5, 'y')]);
  });

  it('drops and counts records whose partners may already be cleaned up', async () => {
    // Watermark = max t - 1 after each record. 20 moves it to 19: left 10 is cleaned up
    // (10 + 5 <= 19), so left 15 (15 <= 19) is late: dropped, not joined with what remains.
    const { rows, dropped, entities } = await run([L(10), R(12), R(20), L(15), L(21), R(24)], 0, 5, { delay: 0, batch: 1 });
    expect(rows).toEqual([pair(10, 12), pair(21, 24)]);
    expect(dropped).toBe(1);
    expect(entities).toBe(0);
  });

  it('same result with parallelism 1 and 2 and out-of-order input', async () => {
    const items = [L(10, 'a'), R(3, 'a'), L(4, 'b'), R(12, 'a'), R(9, 'b'), L(7, 'a'), R(14, 'b'), L(16, 'b'), R(8, 'a')];
    // between(-3, 2): a: 10 meets [7,12] -> 12, 8; 7 meets [4,9] -> 8. b: 4 meets [1,6] -> none; 16 meets [13,18] -> 14
    const want = sorted([pair(10, 12), pair(10, 8), pair(7, 8), pair(16, 14, 16, 'b')].map((p, i) => (i < 3 ? { ...p, key: 'a' } : p)));
    for (const parallelism of [1, 2]) {
      const { rows, dropped } = await run(items, -3, 2, { parallelism, batch: 2, delay: 10 });
      expect(sorted(rows)).toEqual(want);
      expect(dropped).toBe(0);
    }
  });

  it('cleans up as the watermark advances: one key\'s state does not grow', async () => {
    // Left at 0, 10, 20, ...; right at 5, 15, 25, ...; between(-20, 20): each left meets
    // the rights 15 and 5 ms before and after it (fewer at the edges).
    const n = 400;
    const items: Tagged[] = [];
    for (let i = 0; i < n; i++) items.push(L(10 * i), R(10 * i + 5));
    const { job, joined } = intervalJob('ij-state', items, -20, 20, { delay: 0 });
    const backend = new InMemoryStateBackend();
    let stage = -1;
    const ks = keyToString('x');
    const fieldsOfKey = () => backend.peek({ job: 'ij-state', stage, partition: 0 }, keyGroupOfString(ks, 128), entityId('ij', ks))?.size ?? 0;
    const samples: number[] = [];
    let pairs = 0;
    const probe: Sink<Pair> = {
      kind: 'probe',
      write: (batch) => {
        pairs += batch.records.length;
        samples.push(fieldsOfKey());
      },
    };
    joined.sinkTo(probe);
    stage = compile(job.graph).stageOfNode[job.graph.nodes.find((x) => x.name === 'ij')!.id];
    // A sample per sink batch: small batches, and no lingering to merge them.
    await runJob(job, { sourceBatchSize: 8, lingerRounds: 0, backend });
    // 4 partners per left, minus 2 + 1 at the start and 1 at the end
    expect(pairs).toBe(4 * n - 4);
    expect(samples.length).toBeGreaterThan(50);
    expect(Math.max(...samples)).toBeLessThan(20);
    expect(fieldsOfKey()).toBe(0);
    expect(backend.entityCount('ij-state', stage)).toBe(0);
    expect((await backend.recover({ job: 'ij-state', stage, partition: 0 })).timers).toEqual([]);
  });
});
