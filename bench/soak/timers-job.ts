/**
 * The crash soak's keyed process function with timers, over Nexmark bids: per bidder, a
 * running count emitted on every bid (ordered per bidder) and, at the end of each 10 s of
 * event time, an event-time timer that emits the bidder's bids in that period and clears
 * them. State (value and list) and timers both cross every checkpoint and restore.
 */
import { listState, Sinks, valueState, type Job } from '../../lib/index.ts';
import { type Bid, eventSchema, int, isBid, nexmarkEvents, nexmarkJob, type NexmarkParams } from '../../examples/nexmark/shared.ts';

const PERIOD_MS = 10_000;
const schema = eventSchema({ bid: { bidder: int, auction: int, price: int } });

export type TimersRow = { bidder: number; n: number; price: number } | { bidder: number; period: number; bids: number; total: number };

export default function timersJob(params: NexmarkParams = {}): Job {
  const job = nexmarkJob('soak-timers', params);
  nexmarkEvents(job, schema, params)
    .filterAs(isBid)
    .name('bids')
    .keyBy((b: Bid) => b.bidder)
    .process<TimersRow, { n: ReturnType<typeof valueState<number>>; prices: ReturnType<typeof listState<number>> }>({
      state: { n: valueState<number>(), prices: listState<number>() },
      processElement(b, ctx) {
        const n = (ctx.state.n.get() ?? 0) + 1;
        ctx.state.n.set(n);
        ctx.state.prices.add(b.price);
        ctx.emit({ bidder: b.bidder, n, price: b.price });
        ctx.timers.registerEventTimeTimer(Math.floor(b.dateTime / PERIOD_MS) * PERIOD_MS + PERIOD_MS - 1);
      },
      onTimer(t, ctx) {
        const prices = ctx.state.prices.get();
        ctx.emit({ bidder: ctx.key as number, period: t + 1 - PERIOD_MS, bids: prices.length, total: prices.reduce((a, p) => a + p, 0) });
        ctx.state.prices.clear();
      },
    })
    .name('bidder-periods')
    .sinkTo(Sinks.stdout(), 'results');
  return job;
}
