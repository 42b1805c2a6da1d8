/**
 * The crash soak's keyed process function with timers, over Nexmark bids: per bidder, a
 * running count emitted on every bid (ordered per bidder) and, for each 10 s period of
 * event time, an event-time timer at its end that emits the bidder's bids and their total
 * in that period. Periods are kept apart in a map, so what a timer emits does not depend
 * on how far the watermark trails the bids. Value and map state and timers all cross
 * every checkpoint and restore.
 */
import { mapState, Sinks, valueState, WatermarkStrategies, type Job } from '../../lib/index.ts';
import { type Bid, eventSchema, int, isBid, type NexmarkEvent, nexmarkJob, type NexmarkParams, WATERMARK_DELAY_MS } from '../../examples/nexmark/shared.ts';

const PERIOD_MS = 10_000;
const schema = eventSchema({ bid: { bidder: int, auction: int, price: int } });

export type TimersRow = { bidder: number; n: number; price: number } | { bidder: number; period: number; bids: number; total: number };

const timerState = { n: valueState<number>(), periods: mapState<number, { bids: number; total: number }>() };

export default function timersJob(params: NexmarkParams = {}): Job {
  const job = nexmarkJob('soak-timers', params);
  // One source partition: a bidder's bids then reach its partition over one channel, in
  // input order, so the running count a bid gets is defined whatever the interleaving.
  job
    .ingest<NexmarkEvent>('events', { timestamp: (e) => e.dateTime, watermark: WatermarkStrategies.boundedOutOfOrderness(WATERMARK_DELAY_MS), schema, parallelism: 1 })
    .filterAs(isBid)
    .name('bids')
    .keyBy((b: Bid) => b.bidder)
    .process<TimersRow, typeof timerState>({
      state: timerState,
      processElement(b, ctx) {
        const n = (ctx.state.n.get() ?? 0) + 1;
        ctx.state.n.set(n);
        ctx.emit({ bidder: b.bidder, n, price: b.price });
        const period = Math.floor(b.dateTime / PERIOD_MS) * PERIOD_MS;
        const p = ctx.state.periods.get(period) ?? { bids: 0, total: 0 };
        ctx.state.periods.set(period, { bids: p.bids + 1, total: p.total + b.price });
        ctx.timers.registerEventTimeTimer(period + PERIOD_MS - 1);
      },
      onTimer(t, ctx) {
        const period = t + 1 - PERIOD_MS;
        const p = ctx.state.periods.get(period);
        if (!p) return;
        ctx.emit({ bidder: ctx.key as number, period, ...p });
        ctx.state.periods.delete(period);
      },
    })
    .name('bidder-periods')
    .sinkTo(Sinks.stdout(), 'results');
  return job;
}
