/**
 * Brute-force batch definitions of the Nexmark queries (NEXMARK.md sections 4 and 5),
 * written from the specification and independently of the jobs and the bench floors:
 * whole-input passes, no watermarks, no incremental state.
 */
import type { Auction, Bid, NexmarkEvent, Person } from '../../lib/nexmark/index.ts';

const bidsOf = (events: readonly NexmarkEvent[]) => events.filter((e): e is Bid => e.type === 'bid');
const auctionsOf = (events: readonly NexmarkEvent[]) => events.filter((e): e is Auction => e.type === 'auction');
const personsOf = (events: readonly NexmarkEvent[]) => events.filter((e): e is Person => e.type === 'person');
const floorTo = (t: number, size: number) => Math.floor(t / size) * size;

export const refQ0 = (events: readonly NexmarkEvent[]) =>
  bidsOf(events).map((b) => ({ auction: b.auction, bidder: b.bidder, price: b.price, dateTime: b.dateTime, extra: b.extra }));

/** 0.908 * price as the exact decimal price * 908 / 1000, parsed: the closest double. */
export const refQ1 = (events: readonly NexmarkEvent[]) =>
  bidsOf(events).map((b) => {
    const milli = BigInt(b.price) * 908n;
    const text = `${milli / 1000n}.${String(milli % 1000n).padStart(3, '0')}`;
    return { auction: b.auction, bidder: b.bidder, price: Number(text), dateTime: b.dateTime, extra: b.extra };
  });

export const refQ2 = (events: readonly NexmarkEvent[], skip = 123) =>
  bidsOf(events)
    .filter((b) => b.auction % skip === 0)
    .map((b) => ({ auction: b.auction, price: b.price }));

export function refQ3(events: readonly NexmarkEvent[]) {
  const rows = [];
  const persons = personsOf(events).filter((p) => ['OR', 'ID', 'CA'].includes(p.state));
  for (const a of auctionsOf(events)) {
    if (a.category !== 10) continue;
    for (const p of persons) if (p.id === a.seller) rows.push({ name: p.name, city: p.city, state: p.state, id: a.id });
  }
  return rows;
}

export function refQ4(events: readonly NexmarkEvent[]) {
  const bids = bidsOf(events);
  const totals = new Map<number, { sum: bigint; count: bigint }>();
  for (const a of auctionsOf(events)) {
    const prices = bids.filter((b) => b.auction === a.id && b.dateTime >= a.dateTime && b.dateTime <= a.expires).map((b) => b.price);
    if (prices.length === 0) continue;
    const t = totals.get(a.category) ?? { sum: 0n, count: 0n };
    t.sum += BigInt(Math.max(...prices));
    t.count++;
    totals.set(a.category, t);
  }
  return [...totals]
    .sort((x, y) => x[0] - y[0])
    .map(([category, t]) => ({ category, avg: Number(t.sum / t.count), count: Number(t.count), sum: Number(t.sum) }));
}

export function refQ5(events: readonly NexmarkEvent[], size = 10_000, slide = 2_000) {
  const counts = new Map<number, Map<number, number>>();
  for (const b of bidsOf(events)) {
    for (let s = floorTo(b.dateTime, slide); s > b.dateTime - size; s -= slide) {
      const w = counts.get(s) ?? new Map<number, number>();
      w.set(b.auction, (w.get(b.auction) ?? 0) + 1);
      counts.set(s, w);
    }
  }
  const rows = [];
  for (const [s, w] of counts) {
    const max = Math.max(...w.values());
    for (const [auction, num] of w) if (num === max) rows.push({ auction, num, windowStart: s, windowEnd: s + size });
  }
  return rows;
}

export function refQ7(events: readonly NexmarkEvent[], size = 10_000) {
  const bids = bidsOf(events);
  const max = new Map<number, number>();
  for (const b of bids) {
    const s = floorTo(b.dateTime, size);
    max.set(s, Math.max(max.get(s) ?? -Infinity, b.price));
  }
  return bids
    .filter((b) => b.price === max.get(floorTo(b.dateTime, size)))
    .map((b) => {
      const s = floorTo(b.dateTime, size);
      return { auction: b.auction, bidder: b.bidder, price: b.price, dateTime: b.dateTime, extra: b.extra, windowStart: s, windowEnd: s + size };
    });
}

export function refQ8(events: readonly NexmarkEvent[], size = 10_000) {
  const sellers = new Set(auctionsOf(events).map((a) => `${a.seller}@${floorTo(a.dateTime, size)}`));
  const rows = new Map<string, { id: number; name: string; windowStart: number; windowEnd: number }>();
  for (const p of personsOf(events)) {
    const s = floorTo(p.dateTime, size);
    if (sellers.has(`${p.id}@${s}`)) rows.set(`${p.id}|${p.name}|${s}`, { id: p.id, name: p.name, windowStart: s, windowEnd: s + size });
  }
  return [...rows.values()];
}

export function refQ11(events: readonly NexmarkEvent[], gap = 10_000) {
  const times = new Map<number, number[]>();
  for (const b of bidsOf(events)) {
    const ts = times.get(b.bidder) ?? [];
    ts.push(b.dateTime);
    times.set(b.bidder, ts);
  }
  const rows = [];
  for (const [bidder, ts] of times) {
    ts.sort((x, y) => x - y);
    let start = ts[0];
    let n = 0;
    for (let i = 0; i < ts.length; i++) {
      n++;
      if (i === ts.length - 1 || ts[i + 1] - ts[i] > gap) {
        rows.push({ bidder, bidCount: n, start, end: ts[i] + gap });
        start = ts[i + 1];
        n = 0;
      }
    }
  }
  return rows;
}
