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
import { type AggregateFunction, type Job, Sinks, valueState, Windows } from '../../lib/index.ts';
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

/** Per window: the highest count so far and the auctions that reach it. */
const maxState = { best: valueState<{ num: number; auctions: number[] }>() };

/** With merge(), the window operator can keep one partial count per slide and add them up at firing. */
const count: AggregateFunction<Bid, number, number> = {
  createAccumulator: () => 0,
  add: (_bid, n) => n + 1,
  getResult: (n) => n,
  merge: (a, b) => a + b,
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
    // All counts of one window meet in one partition. A window's counts carry
    // timestamp windowEnd - 1, so once the watermark reaches it every count is in.
    // The key is the window's number rather than its start in epoch ms: a short key
    // is cheaper to route (its string form stays under V8's 13-character cons-string
    // threshold, see BENCHMARKS.md).
    .keyBy((c) => c.windowStart / slideMs)
    .process<HotItem, typeof maxState>({
      state: maxState,
      processElement(c, ctx) {
        const best = ctx.state.best.get();
        if (!best) {
          ctx.state.best.set({ num: c.num, auctions: [c.auction] });
          ctx.timers.registerEventTimeTimer(c.windowEnd - 1);
        } else if (c.num > best.num) {
          ctx.state.best.set({ num: c.num, auctions: [c.auction] });
        } else if (c.num === best.num) {
          best.auctions.push(c.auction);
          ctx.state.best.set(best);
        }
      },
      onTimer(time, ctx) {
        const best = ctx.state.best.get();
        ctx.state.best.clear();
        if (!best) return;
        const windowEnd = time + 1;
        const windowStart = windowEnd - sizeMs;
        for (const auction of [...best.auctions].sort((a, b) => a - b)) {
          ctx.emit({ auction, num: best.num, windowStart, windowEnd });
        }
      },
    })
    .name('hot-items')
    .sinkTo(Sinks.stdout(), 'results');

  return job;
}

/** The query with its default parameters. */
export const job = q5();
