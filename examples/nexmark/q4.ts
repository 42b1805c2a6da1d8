/**
 * Nexmark Q4 "average selling price per category" (NEXMARK.md section 4, Flink's
 * version): an auction's final price is its highest bid with
 * a.dateTime <= b.dateTime <= a.expires (BETWEEN, both ends inclusive); the result
 * is, per category, the average of those finals over auctions that have one.
 *
 *   sluice run examples/nexmark/q4.ts --input events.jsonl --output categories.jsonl
 *
 * Two keyed stages:
 * 1. auctions and bids connected by auction id. The running maximum is kept with the
 *    auction; bids that arrive before their auction (ids may point 10 ahead) wait for
 *    it. When the watermark reaches `expires`, no
 *    qualifying bid can still come, so the final is sent on and the auction's state
 *    shrinks to a "closed" mark that makes later bids for it (all outside the window)
 *    cost nothing.
 * 2. finals keyed by category: sum and count, emitted once when the input is complete
 *    (an event-time timer at the largest time, which only the +infinity watermark of
 *    the end of a bounded input reaches), which is the batch semantics of section 5.2.
 *
 * Output records: {category, avg, count, sum} with avg = trunc(sum / count) (Flink's
 * BIGINT AVG); reference order: by category.
 */
import { listState, Sinks, valueState, type Job } from '../../lib/index.ts';
import { type Auction, type Bid, eventSchema, int, isAuction, isBid, nexmarkEvents, nexmarkJob, type NexmarkParams } from './shared.ts';

export interface Q4Row {
  category: number;
  avg: number;
  count: number;
  sum: number;
}

export interface AuctionFinal {
  auction: number;
  category: number;
  final: number;
}

const schema = eventSchema({
  auction: { id: int, category: int, expires: int },
  bid: { auction: int, price: int },
});

/** An auction's window and its highest qualifying price so far; after expiry only `closed`. */
type AuctionState = { category: number; dateTime: number; expires: number; max: number | null } | { closed: true };

const auctionState = {
  /** One field, so that a bid costs one state read (and a write when it raises the maximum). */
  auction: valueState<AuctionState>(),
  /** [dateTime, price] of bids that arrived before their auction. */
  early: listState<[number, number]>(),
};

const categoryState = { total: valueState<{ sum: number; count: number }>() };

/** End of input: only the +infinity watermark of a bounded source passes this. */
const END_OF_INPUT = Number.MAX_SAFE_INTEGER;

/** trunc(sum / count) exactly, even where the double quotient rounds up to an integer. */
export function truncDiv(sum: number, count: number): number {
  let q = Math.trunc(sum / count);
  if (q * count > sum) q--;
  return q;
}

export default function q4(params: NexmarkParams = {}): Job {
  const job = nexmarkJob('nexmark-q4', params);
  const events = nexmarkEvents(job, schema, params);
  const auctions = events
    .filterAs(isAuction)
    .name('auctions')
    .map((a: Auction) => ({ id: a.id, category: a.category, dateTime: a.dateTime, expires: a.expires }))
    .name('auction-windows');
  const bids = events.filterAs(isBid).name('bids');

  auctions
    .keyBy((a) => a.id)
    .connect(bids.keyBy((b: Bid) => b.auction))
    .process<AuctionFinal, typeof auctionState>({
      state: auctionState,
      processElement1(a, ctx) {
        if (ctx.state.auction.get() !== undefined) return; // a duplicate id
        let max: number | null = null;
        const early = ctx.state.early.get();
        if (early.length) {
          for (const [t, price] of early) if (t >= a.dateTime && t <= a.expires && (max === null || price > max)) max = price;
          ctx.state.early.clear();
        }
        ctx.state.auction.set({ category: a.category, dateTime: a.dateTime, expires: a.expires, max });
        ctx.timers.registerEventTimeTimer(a.expires);
      },
      processElement2(b, ctx) {
        const a = ctx.state.auction.get();
        if (a === undefined) ctx.state.early.add([b.dateTime, b.price]);
        else if (!('closed' in a) && (a.max === null || b.price > a.max) && b.dateTime >= a.dateTime && b.dateTime <= a.expires) {
          a.max = b.price;
          ctx.state.auction.set(a);
        }
      },
      onTimer(_time, ctx) {
        const a = ctx.state.auction.get();
        if (a === undefined || 'closed' in a) return;
        if (a.max !== null) ctx.emit({ auction: ctx.key, category: a.category, final: a.max });
        ctx.state.auction.set({ closed: true });
      },
    })
    .name('auction-finals')
    .keyBy((f) => f.category)
    .process<Q4Row, typeof categoryState>({
      state: categoryState,
      processElement(f, ctx) {
        const total = ctx.state.total.get();
        if (total === undefined) {
          ctx.state.total.set({ sum: f.final, count: 1 });
          ctx.timers.registerEventTimeTimer(END_OF_INPUT);
        } else {
          total.sum += f.final;
          total.count++;
          ctx.state.total.set(total);
        }
      },
      onTimer(_time, ctx) {
        const total = ctx.state.total.get();
        if (!total) return;
        ctx.emit({ category: ctx.key as number, avg: truncDiv(total.sum, total.count), count: total.count, sum: total.sum });
        ctx.state.total.clear();
      },
    })
    .name('category-averages')
    .sinkTo(Sinks.stdout(), 'results');
  return job;
}

/** The query with its default parameters. */
export const job = q4();
