/**
 * Nexmark Q3 "local item suggestion" (NEXMARK.md section 4): for every auction in
 * category 10 whose seller lives in OR, ID or CA, the seller's name, city and state
 * with the auction id.
 *
 *   sluice run examples/nexmark/q3.ts --input events.jsonl --output local.jsonl
 *
 * An unbounded inner join, as in Flink: persons keyed by id meet auctions keyed by
 * seller in one keyed two-input function. A person is kept forever (auctions by that
 * seller may come at any time); an auction that arrives before its seller (ids may
 * point up to 10 persons ahead) waits for the seller. Both filters run before the
 * join, so only matching persons and auctions are kept.
 *
 * Output records: {name, city, state, id}; reference order: by auction id.
 */
import { listState, Sinks, valueState, type Job } from '../../lib/index.ts';
import { type Auction, eventSchema, int, isAuction, isPerson, nexmarkEvents, nexmarkJob, type NexmarkParams, type Person, str } from './shared.ts';

export interface Q3Row {
  name: string;
  city: string;
  state: string;
  id: number;
}

const schema = eventSchema({
  person: { id: int, name: str, city: str, state: str },
  auction: { id: int, seller: int, category: int },
});

const STATES = new Set(['OR', 'ID', 'CA']);

interface Seller {
  id: number;
  name: string;
  city: string;
  state: string;
}

const joinState = {
  seller: valueState<Seller>(),
  /** Auction ids whose seller has not arrived yet. */
  waiting: listState<number>(),
};

export default function q3(params: NexmarkParams = {}): Job {
  const job = nexmarkJob('nexmark-q3', params);
  const events = nexmarkEvents(job, schema, params);
  const sellers = events
    .filter((e) => isPerson(e) && STATES.has(e.state))
    .name('persons-in-or-id-ca')
    .map((e): Seller => {
      const p = e as Person;
      return { id: p.id, name: p.name, city: p.city, state: p.state };
    })
    .name('sellers');
  const auctions = events
    .filter((e) => isAuction(e) && e.category === 10)
    .name('auctions-in-category-10')
    .map((e) => ({ id: (e as Auction).id, seller: (e as Auction).seller }))
    .name('auction-ids');

  sellers
    .keyBy((p) => p.id)
    .connect(auctions.keyBy((a) => a.seller))
    .process<Q3Row, typeof joinState>({
      state: joinState,
      processElement1(p, ctx) {
        ctx.state.seller.set(p);
        const waiting = ctx.state.waiting.get();
        if (waiting.length === 0) return;
        for (const id of waiting) ctx.emit({ name: p.name, city: p.city, state: p.state, id });
        ctx.state.waiting.clear();
      },
      processElement2(a, ctx) {
        const p = ctx.state.seller.get();
        if (p) ctx.emit({ name: p.name, city: p.city, state: p.state, id: a.id });
        else ctx.state.waiting.add(a.id);
      },
    })
    .name('join-seller')
    .sinkTo(Sinks.stdout(), 'results');
  return job;
}

/** The query with its default parameters. */
export const job = q3();
