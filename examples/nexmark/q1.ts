/**
 * Nexmark Q1 "currency conversion" (NEXMARK.md section 4): every bid with its
 * price converted from dollars to euros at 0.908.
 *
 *   sluice run examples/nexmark/q1.ts --input events.jsonl --output euros.jsonl
 *
 * Output records: {auction, bidder, price, dateTime, extra}, in input order (one
 * partition by default, as for Q0). The price is price * 908 / 1000: the integer
 * product is exact in a double (price <= 2e8), so the division yields the double
 * closest to the exact decimal, which 0.908 * price does not always do.
 */
import { Sinks, type Job } from '../../lib/index.ts';
import { type Bid, eventSchema, int, isBid, nexmarkEvents, nexmarkJob, type NexmarkParams, str } from './shared.ts';
import type { Q0Row } from './q0.ts';

export type Q1Row = Q0Row;

const schema = eventSchema({ bid: { auction: int, bidder: int, price: int, extra: str } });

/** Dollars to euros, exactly rounded (NEXMARK.md Q1, v1). */
export const toEuro = (price: number): number => (price * 908) / 1000;

export default function q1(params: NexmarkParams = {}): Job {
  const job = nexmarkJob('nexmark-q1', params, 1);
  nexmarkEvents(job, schema, params)
    .filterAs(isBid)
    .name('bids')
    .map((b: Bid): Q1Row => ({ auction: b.auction, bidder: b.bidder, price: toEuro(b.price), dateTime: b.dateTime, extra: b.extra }))
    .name('to-euro')
    .sinkTo(Sinks.stdout(), 'results');
  return job;
}

/** The query with its default parameters. */
export const job = q1();
