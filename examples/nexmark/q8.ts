/**
 * Nexmark Q8 "monitor new users" (NEXMARK.md section 4): persons who registered and
 * also opened an auction within the same 10 s tumbling window.
 *
 *   sluice run examples/nexmark/q8.ts --input events.jsonl --output new-sellers.jsonl
 *
 * A window join: persons keyed by id and auctions keyed by seller, cogrouped per
 * window (inner: both sides present), so each (person, window) gives one row however
 * many auctions matched (the SQL's GROUP BY on both sides). Only the fields the join
 * needs enter its state.
 *
 * Output records: {id, name, windowStart, windowEnd}; reference order: windowStart, id.
 */
import { type Job, Sinks, Windows } from '../../lib/index.ts';
import { type Auction, eventSchema, int, isAuction, isPerson, nexmarkEvents, nexmarkJob, type NexmarkParams, type Person, str } from './shared.ts';

export interface Q8Params extends NexmarkParams {
  /** Window size in ms (default 10 000). */
  sizeMs?: number;
}

export interface Q8Row {
  id: number;
  name: string;
  windowStart: number;
  windowEnd: number;
}

const schema = eventSchema({ person: { id: int, name: str }, auction: { seller: int } });

export default function q8(params: Q8Params = {}): Job {
  const sizeMs = params.sizeMs ?? 10_000;
  const job = nexmarkJob('nexmark-q8', params);
  const events = nexmarkEvents(job, schema, params);
  const persons = events
    .filterAs(isPerson)
    .name('persons')
    .map((p: Person) => ({ id: p.id, name: p.name }))
    .name('person-names');
  const sellers = events
    .filterAs(isAuction)
    .name('auctions')
    .map((a: Auction) => a.seller)
    .name('sellers');

  persons
    .keyBy((p) => p.id)
    .join(sellers.keyBy((s) => s))
    .window(Windows.tumbling(sizeMs))
    .coGroup<Q8Row>(
      (people, _auctions, { window }, out) => {
        // GROUP BY id, name: one row per distinct person (ids are unique, so almost always
        // one: a scan of the earlier ones, not a Set per firing).
        for (let i = 0; i < people.length; i++) {
          const p = people[i];
          if (isEarlierName(people, i)) continue;
          out.emit({ id: p.id, name: p.name, windowStart: window.start, windowEnd: window.end });
        }
      },
      // The SQL's P JOIN A: only windows where the person also opened an auction.
      { inner: true },
    )
    .name('new-sellers')
    .sinkTo(Sinks.stdout(), 'results');
  return job;
}

/** Does a person before index i have the same name as people[i]? */
function isEarlierName(people: readonly { name: string }[], i: number): boolean {
  for (let j = 0; j < i; j++) if (people[j].name === people[i].name) return true;
  return false;
}

/** The query with its default parameters. */
export const job = q8();
