/**
 * Nexmark Q11 "user sessions" (NEXMARK.md section 4): bids per bidder per session,
 * where a session ends after 10 s without a bid from that bidder.
 *
 *   sluice run examples/nexmark/q11.ts --input events.jsonl --output sessions.jsonl [--param gapMs=10000]
 *
 * Session windows of the API: each bid opens [t, t + gap); a bidder's windows that
 * overlap or touch merge (Flink's TimeWindow.intersects), so two bids are in one
 * session iff they are at most gap apart; start = first bid, end = last bid + gap.
 *
 * Output records: {bidder, bidCount, start, end}; reference order: bidder, start.
 */
import { type AggregateFunction, type Job, Sinks, Windows } from '../../lib/index.ts';
import { type Bid, eventSchema, int, isBid, nexmarkEvents, nexmarkJob, type NexmarkParams } from './shared.ts';

export interface Q11Params extends NexmarkParams {
  /** Session gap in ms (default 10 000). */
  gapMs?: number;
}

export interface Q11Row {
  bidder: number;
  bidCount: number;
  start: number;
  end: number;
}

const schema = eventSchema({ bid: { bidder: int } });

const count: AggregateFunction<Bid, number, number> = {
  createAccumulator: () => 0,
  add: (_b, n) => n + 1,
  getResult: (n) => n,
  merge: (a, b) => a + b,
};

export default function q11(params: Q11Params = {}): Job {
  const gapMs = params.gapMs ?? 10_000;
  const job = nexmarkJob('nexmark-q11', params);
  nexmarkEvents(job, schema, params)
    .filterAs(isBid)
    .name('bids')
    .keyBy((b) => b.bidder)
    .window(Windows.session(gapMs))
    .aggregate(count, (bidCount, { key, window }): Q11Row => ({ bidder: key, bidCount, start: window.start, end: window.end }))
    .name('sessions')
    .sinkTo(Sinks.stdout(), 'results');
  return job;
}

/** The query with its default parameters. */
export const job = q11();
