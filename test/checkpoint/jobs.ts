/** Jobs and helpers shared by the checkpoint tests. */
import { mulberry32 } from '../../lib/local/faults.ts';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Sink } from '../../lib/api/sinks.ts';
import { Sinks } from '../../lib/api/sinks.ts';
import { mapState, valueState } from '../../lib/api/state.ts';
import { Job } from '../../lib/api/stream.ts';
import { WatermarkStrategies } from '../../lib/api/types.ts';
import { Windows } from '../../lib/api/windows.ts';

export interface Ev {
  user: string;
  amount: number;
  t: number;
}

export function payments(n: number): Ev[] {
  return Array.from({ length: n }, (_, i) => ({ user: `u${(i * 7919) % 23}`, amount: (i * 31) % 97, t: 1000 + i * 5 }));
}

/**
 * Three stages (running totals per user with event-time timers, then a sum per bucket):
 * the exactly-once suite's job. One source partition keeps running totals deterministic;
 * the bucket stage aligns barriers from three partitions.
 */
export function totalsJob(items: readonly Ev[], sink: Sink<unknown> = Sinks.collect(), parallelism = 3): Job {
  const job = new Job('ck-totals', { parallelism });
  job
    .fromItems('payments', items, { timestamp: (e) => e.t, watermark: WatermarkStrategies.boundedOutOfOrderness(20), parallelism: 1 })
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
        const second = Math.floor(t / 1000);
        ctx.emit({ user: ctx.key as string, total: ctx.state.perSecond.get(second)!, count: -1, at: t });
        ctx.state.perSecond.delete(second);
      },
    })
    .name('totals')
    .keyBy((r) => (r as { total: number }).total % 5)
    .process({
      state: { sum: valueState<number>() },
      processElement(r: { total: number }, ctx) {
        ctx.state.sum.set((ctx.state.sum.get() ?? 0) + r.total);
        ctx.emit({ ...r, bucket: ctx.key });
        ctx.timers.registerEventTimeTimer(Number.MAX_SAFE_INTEGER);
      },
      onTimer(_t, ctx) {
        ctx.emit({ bucket: ctx.key, sum: ctx.state.sum.get() });
      },
    })
    .name('buckets')
    .sinkTo(sink, 'out');
  return job;
}

/** Two source partitions into tumbling-window counts (order-independent results). */
export function windowJob(items: readonly Ev[], sink: Sink<unknown> = Sinks.collect()): Job {
  const job = new Job('ck-windows', { parallelism: 2 });
  job
    .fromItems('payments', items, { timestamp: (e) => e.t, watermark: WatermarkStrategies.boundedOutOfOrderness(50) })
    .keyBy((e) => e.user)
    .window(Windows.tumbling(200))
    .aggregate({ createAccumulator: () => 0, add: (e: Ev, n: number) => n + e.amount, getResult: (n) => n }, (sum, { key, window }) => ({ user: key, sum, start: window.start }))
    .name('sums')
    .sinkTo(sink, 'out');
  return job;
}

/**
 * windowJob with a merging aggregate over sliding windows: records cross the shuffle as
 * partial sums (lib/operators/window-combiner.ts), or one by one with `combine` false.
 */
export function combinedWindowJob(items: readonly Ev[], sink: Sink<unknown> = Sinks.collect(), combine = true): Job {
  const job = new Job('ck-combined', { parallelism: 2 });
  job
    .fromItems('payments', items, { timestamp: (e) => e.t, watermark: WatermarkStrategies.boundedOutOfOrderness(50) })
    .keyBy((e) => e.user)
    .window(Windows.sliding(200, 100))
    .preAggregate(combine)
    .aggregate({ createAccumulator: () => 0, add: (e: Ev, n: number) => n + e.amount, getResult: (n) => n, merge: (a: number, b: number) => a + b }, (sum, { key, window }) => ({ user: key, sum, start: window.start }))
    .name('sums')
    .sinkTo(sink, 'out');
  return job;
}

export function tmp(prefix: string): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

export function lines(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return text ? text.trimEnd().split('\n') : [];
}

/** The seeded choices of where to crash: the fault injector's PRNG. */
export const rng = mulberry32;

/**
 * Order keys for the checker (lib/testing/checker.ts): totalsJob's output is ordered per
 * user and bucket (a user's totals leave one totals partition in order, and those of one
 * bucket cross one channel to one bucket partition); its final sums carry no order.
 */
export function totalsOrder(r: unknown): string | undefined {
  const { user, bucket } = r as { user?: string; bucket: number };
  return user === undefined ? undefined : `${user}/${bucket}`;
}

/** windowJob's and combinedWindowJob's sums are ordered per user (one window partition per user; windows fire in event-time order). */
export function userOrder(r: unknown): string {
  return (r as { user: string }).user;
}
