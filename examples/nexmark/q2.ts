/**
 * Nexmark Q2 "selection" (NEXMARK.md section 4): bids on auctions whose id is a
 * multiple of 123 (Beam's auctionSkip), about 0.76 % of bids.
 *
 *   sluice run examples/nexmark/q2.ts --input events.jsonl --output selected.jsonl [--param auctionSkip=123]
 *
 * Output records: {auction, price}, in input order (one partition by default, as for Q0).
 */
import { Sinks, type Job } from '../../lib/index.ts';
import { type Bid, eventSchema, int, nexmarkEvents, nexmarkJob, type NexmarkParams } from './shared.ts';

export interface Q2Params extends NexmarkParams {
  /** Keep bids whose auction id is a multiple of this (default 123). */
  auctionSkip?: number;
}

export interface Q2Row {
  auction: number;
  price: number;
}

const schema = eventSchema({ bid: { auction: int, price: int } });

export default function q2(params: Q2Params = {}): Job {
  const skip = params.auctionSkip ?? 123;
  const job = nexmarkJob('nexmark-q2', params, 1);
  nexmarkEvents(job, schema, params)
    .filter((e) => e.type === 'bid' && e.auction % skip === 0)
    .name('selected-bids')
    .map((e): Q2Row => ({ auction: (e as Bid).auction, price: (e as Bid).price }))
    .name('project')
    .sinkTo(Sinks.stdout(), 'results');
  return job;
}

/** The query with its default parameters. */
export const job = q2();
