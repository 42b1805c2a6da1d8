/**
 * The job test/testing/local-aws/local-rescale.test.ts rescales: one source stage and four
 * keyed stages (tumbling, sliding and session windows, a keyed process function with
 * event-time timers), their results in one sink. Every record carries `op` and `user`:
 * the per-key order the checker keeps is per (op, user).
 */
import { Job, mapState, Sinks, WatermarkStrategies, Windows } from '../../../lib/index.ts';

export interface Ev {
  user: string;
  amount: number;
  t: number;
}

type Out = { op: string; user: string } & Record<string, unknown>;

const count = { createAccumulator: () => 0, add: (_e: Ev, n: number) => n + 1, getResult: (n: number) => n, merge: (a: number, b: number) => a + b };
const sum = { createAccumulator: () => 0, add: (e: Ev, n: number) => n + e.amount, getResult: (n: number) => n };

const job = new Job('rescale-mix', { parallelism: 2, maxParallelism: 16 });
const events = job.ingest<Ev>('events', { timestamp: (e) => e.t, watermark: WatermarkStrategies.boundedOutOfOrderness(50) });
const tumbling = events
  .keyBy((e) => e.user)
  .window(Windows.tumbling(200))
  .aggregate(count, (n, { key, window }): Out => ({ op: 'tumbling', user: key, start: window.start, n }))
  .name('tumbling');
const sliding = events
  .keyBy((e) => e.user)
  .window(Windows.sliding(400, 200))
  .aggregate(sum, (total, { key, window }): Out => ({ op: 'sliding', user: key, start: window.start, total }))
  .name('sliding');
const sessions = events
  .keyBy((e) => e.user)
  .window(Windows.session(100))
  .aggregate(count, (n, { key, window }): Out => ({ op: 'session', user: key, start: window.start, end: window.end, n }))
  .name('sessions');
const totals = events
  .keyBy((e) => e.user)
  .process<Out>({
    state: { perSecond: mapState<number, number>() },
    processElement(e, ctx) {
      const second = Math.floor(e.t / 1000);
      ctx.state.perSecond.set(second, (ctx.state.perSecond.get(second) ?? 0) + e.amount);
      ctx.timers.registerEventTimeTimer(second * 1000 + 999);
    },
    onTimer(t, ctx) {
      const second = Math.floor(t / 1000);
      ctx.emit({ op: 'totals', user: ctx.key, second, sum: ctx.state.perSecond.get(second) });
      ctx.state.perSecond.delete(second);
    },
  })
  .name('totals');
tumbling.union(sliding, sessions, totals).sinkTo(Sinks.stdout(), 'out');

export default job;

/** `n` events of 20 users, 3 ms apart in event time with a 300 ms pause every 500 (sessions end there). */
export function rescaleEvents(n: number): Ev[] {
  return Array.from({ length: n }, (_, i) => ({ user: `u${(i * 7919) % 20}`, amount: (i * 31) % 97, t: 1_700_000_000_000 + i * 3 + Math.floor(i / 500) * 300 }));
}
