/**
 * Shared by the Nexmark query tests: hand-made events, running a query job on the
 * embedded runtime with its `events` source and `results` sink rebound in memory,
 * and the sort orders of NEXMARK.md section 5.3.
 */
import { Sinks } from '../../lib/api/sinks.ts';
import type { Job } from '../../lib/api/stream.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { generateEvent, type Auction, type Bid, type NexmarkEvent, type Person } from '../../lib/nexmark/index.ts';

export async function runQuery<R>(job: Job, events: readonly unknown[]): Promise<{ rows: R[]; rejected: number }> {
  const sink = Sinks.collect<R>();
  const { runtime } = await runJob(job, { sources: { events: { kind: 'items', items: events } }, sinks: { results: sink } });
  return { rows: sink.records, rejected: runtime.rejectedInputs.length };
}

/** `count` events of the seeded generator at `ratePerSec` events per second of event time. */
export function generated(count: number, ratePerSec: number, seed = 11): NexmarkEvent[] {
  return Array.from({ length: count }, (_, n) => generateEvent(n, { seed, ratePerSec }));
}

export function person(id: number, dateTime: number, o: Partial<Person> = {}): Person {
  return { type: 'person', id, name: `P${id}`, emailAddress: 'a@b.com', creditCard: '0000 0000 0000 0000', city: 'Bend', state: 'OR', dateTime, extra: '', ...o };
}

export function auction(id: number, dateTime: number, o: Partial<Auction> = {}): Auction {
  return { type: 'auction', id, itemName: 'item', description: 'd', initialBid: 100, reserve: 200, dateTime, expires: dateTime + 1000, seller: 1000, category: 10, extra: '', ...o };
}

export function bid(auction: number, dateTime: number, o: Partial<Bid> = {}): Bid {
  return { type: 'bid', auction, bidder: 2000, price: 100, channel: 'Google', url: 'https://www.nexmark.com/a/b/c/item.htm?query=1', dateTime, extra: 'x', ...o };
}

/** Sort by the given numeric fields, then by the whole row (a total order, for multiset comparison). */
export function sortBy<R extends object>(rows: readonly R[], ...fields: (keyof R)[]): R[] {
  return [...rows].sort((a, b) => {
    for (const f of fields) {
      const d = (a[f] as number) - (b[f] as number);
      if (d !== 0) return d;
    }
    const x = JSON.stringify(a);
    const y = JSON.stringify(b);
    return x < y ? -1 : x > y ? 1 : 0;
  });
}
