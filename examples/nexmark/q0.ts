/**
 * Nexmark Q0 "pass-through" (NEXMARK.md section 4): every bid, unchanged. It
 * measures the cost of source, routing and sink with no query work at all.
 *
 *   sluice run examples/nexmark/q0.ts --input events.jsonl --output bids.jsonl
 *
 * Output records: {auction, bidder, price, dateTime, extra}, in input order.
 * Input order holds because the job defaults to one partition: with several, the
 * source deals chunks of events to partitions whose outputs interleave.
 */
import { Sinks, type Job } from '../../lib/index.ts';
import { type Bid, eventSchema, int, isBid, nexmarkEvents, nexmarkJob, type NexmarkParams, str } from './shared.ts';

export interface Q0Row {
  auction: number;
  bidder: number;
  price: number;
  dateTime: number;
  extra: string;
}

const schema = eventSchema({ bid: { auction: int, bidder: int, price: int, extra: str } });

export default function q0(params: NexmarkParams = {}): Job {
  const job = nexmarkJob('nexmark-q0', params, 1);
  nexmarkEvents(job, schema, params)
    .filterAs(isBid)
    .name('bids')
    .map((b: Bid): Q0Row => ({ auction: b.auction, bidder: b.bidder, price: b.price, dateTime: b.dateTime, extra: b.extra }))
    .name('project')
    .sinkTo(Sinks.stdout(), 'results');
  return job;
}

/** The query with its default parameters. */
export const job = q0();
