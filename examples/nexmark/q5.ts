/**
 * Nexmark Q5 "hot items" (NEXMARK.md section 4): for each sliding window, the
 * auction(s) with the most bids. Written with the public API only.
 *
 *   sluice run examples/nexmark/q5.ts --input events.jsonl --output hot.jsonl
 *   sluice run examples/nexmark/q5.ts --input events.jsonl --output hot.jsonl --param sizeMs=60000 --param slideMs=10000
 *
 * Output records: {auction, num, windowStart, windowEnd}, one per auction tied
 * at the window's maximum, emitted once the window is complete.
 */
import { type AggregateFunction, type Job, Sinks, Windows } from '../../lib/index.ts';
import { type Bid, eventSchema, int, isBid, nexmarkEvents, nexmarkJob, type NexmarkParams } from './shared.ts';

export interface Q5Params extends NexmarkParams {
  /** Window size in ms (default 10 000, as in Flink's Nexmark SQL). */
  sizeMs?: number;
  /** Window slide in ms (default 2 000). */
  slideMs?: number;
}

export interface HotItem {
  auction: number;
  num: number;
  windowStart: number;
  windowEnd: number;
}

/** Only what the query reads is checked; other fields pass through. */
const schema = eventSchema({ bid: { auction: int } });

/** With merge(), the window operator can keep one partial count per slide and add them up at firing. */
const count: AggregateFunction<Bid, number, number> = {
  createAccumulator: () => 0,
  add: (_bid, n) => n + 1,
  getResult: (n) => n,
  merge: (a, b) => a + b,
};

/** A window's highest count and the auctions that reach it (in any order until the result). */
interface Best {
  num: number;
  auctions: number[];
}

/**
 * The maximum with its ties. With merge() the maxima of one window's counts are taken
 * in two phases, as Flink's planner does for this query: each sending partition folds
 * the counts it emits into one partial before the shuffle, and the window merges them.
 */
const maxWithTies: AggregateFunction<HotItem, Best, Best> = {
  createAccumulator: () => ({ num: 0, auctions: [] }),
  add: (c, best) => {
    if (c.num > best.num) return { num: c.num, auctions: [c.auction] };
    if (c.num === best.num) best.auctions.push(c.auction);
    return best;
  },
  getResult: (best) => ({ num: best.num, auctions: [...best.auctions].sort((a, b) => a - b) }),
  merge: (a, b) => {
    if (a.num !== b.num) return a.num > b.num ? a : b;
    for (const auction of b.auctions) a.auctions.push(auction);
    return a;
  },
};

export default function q5(params: Q5Params = {}): Job {
  const sizeMs = params.sizeMs ?? 10_000;
  const slideMs = params.slideMs ?? 2_000;
  const job = nexmarkJob('nexmark-q5', params);

  nexmarkEvents(job, schema, params)
    .filterAs(isBid)
    .name('bids')
    .keyBy((b) => b.auction)
    .window(Windows.sliding(sizeMs, slideMs))
    .aggregate(count, (num, { key, window }): HotItem => ({ auction: key, num, windowStart: window.start, windowEnd: window.end }))
    .name('bids-per-auction')
    // All counts of one window meet in one partition. A window's counts carry timestamp
    // windowEnd - 1, which lies in the tumbling window of one slide that ends at
    // windowEnd (the offset aligns those ends with the sliding windows' ends when the
    // slide does not divide the size): it fires when the watermark reaches windowEnd - 1,
    // once every count is in. The key is the window's number rather than its start in
    // epoch ms: a short key is cheaper to route.
    .keyBy((c) => c.windowStart / slideMs)
    .window(Windows.tumbling(slideMs, { offsetMs: sizeMs % slideMs }))
    .aggregate(maxWithTies, (best, { window }) => ({ ...best, windowEnd: window.end }))
    .name('hot-items')
    .flatMap(({ num, auctions, windowEnd }) => auctions.map((auction): HotItem => ({ auction, num, windowStart: windowEnd - sizeMs, windowEnd })))
    .name('hot-items-rows')
    .sinkTo(Sinks.stdout(), 'results');

  return job;
}

/** The query with its default parameters. */
export const job = q5();
