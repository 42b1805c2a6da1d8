/**
 * The floors: each Nexmark query as one hand-written loop over the in-memory events,
 * with no framework (no records, partitions, state overlay or commits). They produce
 * the same rows as the jobs, and for each row the index of the event after which the
 * row is determined (its "trigger"), which the bench uses to measure latency:
 * - stateless rows and join rows: the event that produced them;
 * - window rows: the first event whose watermark (max timestamp - 4 s - 1, as the
 *   jobs' sources compute it) reaches the window's end - 1;
 * - rows that need the whole input (Q4, windows still open at the end): the last event.
 * The floors rely on what the generator guarantees (timestamps never decrease), which
 * the jobs do not; the bench checks that both give the same rows.
 */
import type { Auction, Bid, NexmarkEvent, Person } from '../../lib/nexmark/index.ts';
import { toEuro } from '../../examples/nexmark/q1.ts';
import { truncDiv } from '../../examples/nexmark/q4.ts';

export type Emit = (row: unknown, trigger: number) => void;
export type Floor = (events: readonly NexmarkEvent[], emit: Emit) => void;

const DELAY = 4000;

export const q0Floor: Floor = (events, emit) => {
  for (let i = 0; i < events.length; i++) {
    const e = events[i];
    if (e.type === 'bid') emit({ auction: e.auction, bidder: e.bidder, price: e.price, dateTime: e.dateTime, extra: e.extra }, i);
  }
};

export const q1Floor: Floor = (events, emit) => {
  for (let i = 0; i < events.length; i++) {
    const e = events[i];
    if (e.type === 'bid') emit({ auction: e.auction, bidder: e.bidder, price: toEuro(e.price), dateTime: e.dateTime, extra: e.extra }, i);
  }
};

export const q2Floor: Floor = (events, emit) => {
  for (let i = 0; i < events.length; i++) {
    const e = events[i];
    if (e.type === 'bid' && e.auction % 123 === 0) emit({ auction: e.auction, price: e.price }, i);
  }
};

export const q3Floor: Floor = (events, emit) => {
  const sellers = new Map<number, Person>();
  const waiting = new Map<number, number[]>();
  for (let i = 0; i < events.length; i++) {
    const e = events[i];
    if (e.type === 'person') {
      if (e.state !== 'OR' && e.state !== 'ID' && e.state !== 'CA') continue;
      sellers.set(e.id, e);
      const w = waiting.get(e.id);
      if (w) {
        for (const id of w) emit({ name: e.name, city: e.city, state: e.state, id }, i);
        waiting.delete(e.id);
      }
    } else if (e.type === 'auction' && e.category === 10) {
      const p = sellers.get(e.seller);
      if (p) emit({ name: p.name, city: p.city, state: p.state, id: e.id }, i);
      else {
        const w = waiting.get(e.seller);
        if (w) w.push(e.id);
        else waiting.set(e.seller, [e.id]);
      }
    }
  }
};

// Q4 needs the whole input, so the floor keeps every auction and aggregates at the end.
export const q4Floor: Floor = (events, emit) => {
  const open = new Map<number, { a: Auction; max: number }>();
  const early = new Map<number, Bid[]>();
  for (const e of events) {
    if (e.type === 'auction') {
      const o = { a: e, max: -1 };
      for (const b of early.get(e.id) ?? []) if (b.dateTime >= e.dateTime && b.dateTime <= e.expires && b.price > o.max) o.max = b.price;
      early.delete(e.id);
      open.set(e.id, o);
    } else if (e.type === 'bid') {
      const o = open.get(e.auction);
      if (!o) {
        const list = early.get(e.auction);
        if (list) list.push(e);
        else early.set(e.auction, [e]);
      } else if (e.dateTime >= o.a.dateTime && e.dateTime <= o.a.expires && e.price > o.max) o.max = e.price;
    }
  }
  const totals = new Map<number, { sum: number; count: number }>();
  for (const { a, max } of open.values()) {
    if (max < 0) continue;
    const t = totals.get(a.category);
    if (t) {
      t.sum += max;
      t.count++;
    } else totals.set(a.category, { sum: max, count: 1 });
  }
  for (const [category, t] of [...totals].sort((x, y) => x[0] - y[0])) {
    emit({ category, avg: truncDiv(t.sum, t.count), count: t.count, sum: t.sum }, events.length - 1);
  }
};

/** Q5: counts per (window, auction), each window closed by the watermark with its ties in auction order. */
export function q5Floor(sizeMs = 10_000, slideMs = 2_000): Floor {
  return (events, emit) => {
    const windows = new Map<number, Map<number, number>>();
    let maxTs = -Infinity;
    let nextEnd = Infinity; // earliest end among open windows
    const closeUpTo = (wm: number, trigger: number) => {
      const due = [...windows.keys()].filter((s) => s + sizeMs - 1 <= wm).sort((a, b) => a - b);
      for (const s of due) {
        const counts = windows.get(s)!;
        windows.delete(s);
        let max = 0;
        for (const n of counts.values()) if (n > max) max = n;
        const tied: number[] = [];
        for (const [a, n] of counts) if (n === max) tied.push(a);
        tied.sort((a, b) => a - b);
        for (const auction of tied) emit({ auction, num: max, windowStart: s, windowEnd: s + sizeMs }, trigger);
      }
      nextEnd = Infinity;
      for (const s of windows.keys()) nextEnd = Math.min(nextEnd, s + sizeMs);
    };
    for (let i = 0; i < events.length; i++) {
      const e = events[i];
      const t = e.dateTime;
      if (t > maxTs) {
        maxTs = t;
        if (maxTs - DELAY - 1 >= nextEnd - 1) closeUpTo(maxTs - DELAY - 1, i);
      }
      if (e.type !== 'bid') continue;
      const rem = t % slideMs;
      for (let s = t - (rem < 0 ? rem + slideMs : rem); s > t - sizeMs; s -= slideMs) {
        let counts = windows.get(s);
        if (!counts) {
          windows.set(s, (counts = new Map()));
          if (s + sizeMs < nextEnd) nextEnd = s + sizeMs;
        }
        counts.set(e.auction, (counts.get(e.auction) ?? 0) + 1);
      }
    }
    closeUpTo(Infinity, events.length - 1);
  };
}

/**
 * Tumbling windows closed in order by the watermark: `add` puts an event into its
 * window's state, `close` emits a window's rows. Windows open in time order, so the
 * oldest is the first in the map.
 */
function tumbling<S>(sizeMs: number, create: () => S, add: (state: S, e: NexmarkEvent) => void, close: (state: S, start: number, emit: (row: unknown) => void) => void): Floor {
  return (events, emit) => {
    const windows = new Map<number, S>();
    let maxTs = -Infinity;
    let trigger = 0;
    const out = (row: unknown) => emit(row, trigger);
    const closeUpTo = (wm: number) => {
      for (const [s, state] of windows) {
        if (s + sizeMs - 1 > wm) break;
        windows.delete(s);
        close(state, s, out);
      }
    };
    for (let i = 0; i < events.length; i++) {
      const e = events[i];
      const t = e.dateTime;
      if (t > maxTs) {
        maxTs = t;
        trigger = i;
        closeUpTo(t - DELAY - 1);
      }
      const s = t - (t % sizeMs);
      let state = windows.get(s);
      if (state === undefined) windows.set(s, (state = create()));
      add(state, e);
    }
    trigger = events.length - 1;
    closeUpTo(Infinity);
  };
}

type Top = { auction: number; bidder: number; price: number; dateTime: number; extra: string };

/** Q7: per window the highest price and the bids at it (emitted by dateTime, stable). */
export function q7Floor(sizeMs = 10_000): Floor {
  return tumbling<{ price: number; bids: Top[] }>(
    sizeMs,
    () => ({ price: -Infinity, bids: [] }),
    (w, e) => {
      if (e.type !== 'bid' || e.price < w.price) return;
      const top = { auction: e.auction, bidder: e.bidder, price: e.price, dateTime: e.dateTime, extra: e.extra };
      if (e.price > w.price) {
        w.price = e.price;
        w.bids = [top];
      } else w.bids.push(top);
    },
    (w, s, emit) => {
      if (w.bids.length === 0) return;
      for (const b of [...w.bids].sort((x, y) => x.dateTime - y.dateTime)) emit({ ...b, windowStart: s, windowEnd: s + sizeMs });
    },
  );
}

/** Q8: per window the persons (id -> names) and the sellers; a row per person who sold. */
export function q8Floor(sizeMs = 10_000): Floor {
  return tumbling<{ persons: Map<number, Set<string>>; sellers: Set<number> }>(
    sizeMs,
    () => ({ persons: new Map(), sellers: new Set() }),
    (w, e) => {
      if (e.type === 'person') {
        const names = w.persons.get(e.id);
        if (names) names.add(e.name);
        else w.persons.set(e.id, new Set([e.name]));
      } else if (e.type === 'auction') w.sellers.add(e.seller);
    },
    (w, s, emit) => {
      for (const [id, names] of w.persons) {
        if (!w.sellers.has(id)) continue;
        for (const name of names) emit({ id, name, windowStart: s, windowEnd: s + sizeMs });
      }
    },
  );
}

interface Session {
  bidder: number;
  start: number;
  last: number;
  count: number;
  closed: boolean;
}

/**
 * Q11: one open session per bidder. Sessions end at last + gap, so every bid appends
 * (session, its end then) to a queue that is sorted by end because time never goes
 * back; a queue entry whose session has moved on since is skipped when it comes up.
 */
export function q11Floor(gapMs = 10_000): Floor {
  return (events, emit) => {
    const current = new Map<number, Session>();
    const queue: Session[] = [];
    const ends: number[] = [];
    let head = 0;
    let maxTs = -Infinity;
    const closeUpTo = (wm: number, trigger: number) => {
      while (head < queue.length && ends[head] - 1 <= wm) {
        const s = queue[head];
        // Two bids at one time queue a session twice: it closes once.
        if (!s.closed && s.last + gapMs === ends[head]) {
          s.closed = true;
          if (current.get(s.bidder) === s) current.delete(s.bidder);
          emit({ bidder: s.bidder, bidCount: s.count, start: s.start, end: s.last + gapMs }, trigger);
        }
        head++;
      }
      if (head > 65536 && head * 2 > queue.length) {
        queue.splice(0, head);
        ends.splice(0, head);
        head = 0;
      }
    };
    for (let i = 0; i < events.length; i++) {
      const e = events[i];
      const t = e.dateTime;
      if (t > maxTs) {
        maxTs = t;
        closeUpTo(t - DELAY - 1, i);
      }
      if (e.type !== 'bid') continue;
      let s = current.get(e.bidder);
      if (s && t - s.last <= gapMs) {
        s.last = t;
        s.count++;
      } else {
        s = { bidder: e.bidder, start: t, last: t, count: 1, closed: false };
        current.set(e.bidder, s);
      }
      queue.push(s);
      ends.push(t + gapMs);
    }
    closeUpTo(Infinity, events.length - 1);
  };
}
