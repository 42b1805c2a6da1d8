/**
 * Nexmark Q7 "highest bid" (NEXMARK.md section 4, v1 canonical semantics): for each
 * 10 s tumbling window [s, s + 10 s), the bid(s) whose price is the window's maximum.
 *
 *   sluice run examples/nexmark/q7.ts --input events.jsonl --output highest.jsonl
 *
 * Flink computes MAX(price) per window and joins it back to the bid stream on price,
 * buffering every bid of the window. Here the window's aggregate keeps the maximum
 * together with the bids that reach it (the result of that join), so a window costs
 * the tied bids in state, not all of its bids. Bids are keyed by their window, as
 * Flink's GROUP BY window does, so successive windows spread over partitions.
 *
 * Flink's end-inclusive BETWEEN (a bid stamped exactly at the next window's start
 * that ties the previous window's maximum also matches it) is not reproduced.
 *
 * Output records: {auction, bidder, price, dateTime, extra, windowStart, windowEnd};
 * reference order: windowStart, dateTime, then input order (each window's ties come
 * out sorted by dateTime, stable).
 */
import { type AggregateFunction, type Job, Sinks, Windows } from '../../lib/index.ts';
import { type Bid, eventSchema, int, isBid, nexmarkEvents, nexmarkJob, type NexmarkParams, str } from './shared.ts';

export interface Q7Params extends NexmarkParams {
  /** Window size in ms (default 10 000). */
  sizeMs?: number;
}

export interface Q7Row {
  auction: number;
  bidder: number;
  price: number;
  dateTime: number;
  extra: string;
  windowStart: number;
  windowEnd: number;
}

type Top = Omit<Q7Row, 'windowStart' | 'windowEnd'>;

/** The highest price and every bid at it, in arrival order. */
interface MaxBids {
  price: number;
  bids: Top[];
}

const schema = eventSchema({ bid: { auction: int, bidder: int, price: int, extra: str } });

const top = (b: Bid): Top => ({ auction: b.auction, bidder: b.bidder, price: b.price, dateTime: b.dateTime, extra: b.extra });

const maxWithTies: AggregateFunction<Bid, MaxBids, MaxBids> = {
  createAccumulator: () => ({ price: -Infinity, bids: [] }),
  add(b, acc) {
    if (b.price > acc.price) return { price: b.price, bids: [top(b)] };
    if (b.price === acc.price) acc.bids.push(top(b));
    return acc;
  },
  getResult: (acc) => acc,
  merge(a, b) {
    if (a.price !== b.price) return a.price > b.price ? a : b;
    return { price: a.price, bids: a.bids.concat(b.bids) };
  },
};

export default function q7(params: Q7Params = {}): Job {
  const sizeMs = params.sizeMs ?? 10_000;
  const job = nexmarkJob('nexmark-q7', params);
  nexmarkEvents(job, schema, params)
    .filterAs(isBid)
    .name('bids')
    // Keyed by the window's number, not its start in epoch ms: the same grouping with
    // a short key, which is cheaper to route.
    .keyBy((b) => Math.floor(b.dateTime / sizeMs))
    .window(Windows.tumbling(sizeMs))
    .aggregate(maxWithTies, (m, { window }) => ({ ...m, windowStart: window.start, windowEnd: window.end }))
    .name('max-per-window')
    .flatMap((m) =>
      [...m.bids]
        .sort((x, y) => x.dateTime - y.dateTime)
        .map((b): Q7Row => ({ ...b, windowStart: m.windowStart, windowEnd: m.windowEnd })),
    )
    .name('highest-bids')
    .sinkTo(Sinks.stdout(), 'results');
  return job;
}

/** The query with its default parameters. */
export const job = q7();
