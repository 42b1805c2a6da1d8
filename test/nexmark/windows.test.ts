/** Nexmark Q5, Q7, Q8, Q11 (windowed): hand-computed edge cases and the batch definitions over generated events. */
import { describe, expect, it } from 'vitest';
import q11, { type Q11Row } from '../../examples/nexmark/q11.ts';
import q5, { type HotItem } from '../../examples/nexmark/q5.ts';
import q7, { type Q7Row } from '../../examples/nexmark/q7.ts';
import q8, { type Q8Row } from '../../examples/nexmark/q8.ts';
import { refQ11, refQ5, refQ7, refQ8 } from './reference.ts';
import { auction, bid, generated, person, runQuery, sortBy } from './support.ts';

const events = generated(6000, 300);

describe('Q5 hot items', () => {
  it('window boundaries and ties (size 10 s, slide 2 s)', async () => {
    // Bids at 0, 1999 and 2000 straddle a slide; 9999 and 10000 straddle a window end.
    const input = [bid(1, 0), bid(2, 1999), bid(2, 2000), bid(1, 9999), bid(1, 10_000)];
    const w = (auction: number, num: number, windowStart: number) => ({ auction, num, windowStart, windowEnd: windowStart + 10_000 });
    const expected = [
      w(1, 1, -8000), w(2, 1, -8000), // a tie: both
      w(2, 2, -6000), w(2, 2, -4000), w(2, 2, -2000),
      w(1, 2, 0), w(2, 2, 0), // a tie at 2
      w(1, 2, 2000), w(1, 2, 4000), w(1, 2, 6000), w(1, 2, 8000),
      w(1, 1, 10_000),
    ];
    for (const parallelism of [1, 3]) {
      const { rows } = await runQuery<HotItem>(q5({ parallelism }), input);
      expect(sortBy(rows, 'windowStart', 'auction')).toEqual(expected);
    }
  });

  it('equals the batch definition on generated events', async () => {
    const { rows } = await runQuery<HotItem>(q5(), events);
    expect(sortBy(rows, 'windowStart', 'auction')).toEqual(sortBy(refQ5(events), 'windowStart', 'auction'));
  });

  it('equals the batch definition when the slide does not divide the size (the maxima window is offset to end where each sliding window ends)', async () => {
    for (const parallelism of [1, 3]) {
      const { rows } = await runQuery<HotItem>(q5({ parallelism, sizeMs: 5000, slideMs: 2000 }), events);
      expect(sortBy(rows, 'windowStart', 'auction')).toEqual(sortBy(refQ5(events, 5000, 2000), 'windowStart', 'auction'));
    }
  });
});

describe('Q7 highest bid', () => {
  it('[s, s + 10 s) windows: a bid at the end belongs to the next window; ties all come out, by dateTime then input order', async () => {
    const input = [
      bid(1, 0, { price: 5 }),
      bid(4, 3000, { price: 7 }),
      bid(2, 9999, { price: 7 }),
      bid(3, 10_000, { price: 7 }), // equals W0's max but is in W10000 (canonical, not Flink's inclusive BETWEEN)
      bid(8, 15_000, { price: 3 }),
      bid(5, 20_000, { price: 9, extra: 'first' }),
      bid(6, 20_000, { price: 9, extra: 'second' }),
      bid(7, 25_000, { price: 1 }),
    ];
    const row = (auction: number, price: number, dateTime: number, windowStart: number, extra = 'x') => ({ auction, bidder: 2000, price, dateTime, extra, windowStart, windowEnd: windowStart + 10_000 });
    const { rows } = await runQuery<Q7Row>(q7({ parallelism: 1 }), input);
    expect(rows).toEqual([row(4, 7, 3000, 0), row(2, 7, 9999, 0), row(3, 7, 10_000, 10_000), row(5, 9, 20_000, 20_000, 'first'), row(6, 9, 20_000, 20_000, 'second')]);
    const { rows: p3 } = await runQuery<Q7Row>(q7({ parallelism: 3 }), input);
    expect(sortBy(p3, 'windowStart', 'dateTime')).toEqual(sortBy(rows, 'windowStart', 'dateTime'));
    expect(Object.keys(rows[0])).toEqual(['auction', 'bidder', 'price', 'dateTime', 'extra', 'windowStart', 'windowEnd']);
  });

  it('equals the batch definition on generated events (10 s and 1 s windows)', async () => {
    for (const sizeMs of [10_000, 1000]) {
      const { rows } = await runQuery<Q7Row>(q7({ sizeMs }), events);
      const expected = sortBy(refQ7(events, sizeMs), 'windowStart', 'dateTime');
      expect(new Set(expected.map((r) => r.windowStart)).size).toBeGreaterThan(sizeMs === 1000 ? 15 : 1);
      expect(sortBy(rows, 'windowStart', 'dateTime')).toEqual(expected);
    }
  });
});

describe('Q8 monitor new users', () => {
  it('one row per (person, window) with an auction by them in the same tumbling window', async () => {
    const input = [
      person(1, 100, { name: 'Ann' }),
      auction(50, 200, { seller: 1 }),
      auction(51, 300, { seller: 1 }), // a second auction: still one row
      person(2, 9999, { name: 'Bob' }),
      auction(52, 10_000, { seller: 2 }), // next window: no row
      auction(53, 10_000, { seller: 3 }), // before its seller registers, same window: a row
      person(3, 10_001, { name: 'Cy' }),
      person(4, 12_000, { name: 'Di' }), // no auction
      auction(54, 12_000, { seller: 5 }), // no person
      person(6, 19_999, { name: 'Ed' }),
      auction(55, 20_000, { seller: 6 }),
    ];
    for (const parallelism of [1, 3]) {
      const { rows } = await runQuery<Q8Row>(q8({ parallelism }), input);
      expect(sortBy(rows, 'windowStart', 'id')).toEqual([
        { id: 1, name: 'Ann', windowStart: 0, windowEnd: 10_000 },
        { id: 3, name: 'Cy', windowStart: 10_000, windowEnd: 20_000 },
      ]);
    }
  });

  it('equals the batch definition on generated events', async () => {
    const { rows } = await runQuery<Q8Row>(q8(), events);
    const expected = sortBy(refQ8(events), 'windowStart', 'id');
    expect(expected.length).toBeGreaterThan(5);
    expect(sortBy(rows, 'windowStart', 'id')).toEqual(expected);
  });
});

describe('Q11 user sessions', () => {
  it('bids exactly gap apart share a session (touching windows merge); gap + 1 apart do not', async () => {
    const input = [
      bid(1, 0, { bidder: 1 }),
      bid(1, 1000, { bidder: 3 }),
      bid(1, 1500, { bidder: 3 }),
      bid(1, 5000, { bidder: 2 }),
      bid(1, 10_000, { bidder: 1 }), // 10 000 after the first: same session
      bid(1, 11_499, { bidder: 3 }),
      bid(1, 20_001, { bidder: 1 }), // 10 001 after the last: a new session
    ];
    for (const parallelism of [1, 3]) {
      const { rows } = await runQuery<Q11Row>(q11({ parallelism }), input);
      expect(sortBy(rows, 'bidder', 'start')).toEqual([
        { bidder: 1, bidCount: 2, start: 0, end: 20_000 },
        { bidder: 1, bidCount: 1, start: 20_001, end: 30_001 },
        { bidder: 2, bidCount: 1, start: 5000, end: 15_000 },
        { bidder: 3, bidCount: 3, start: 1000, end: 21_499 },
      ]);
    }
  });

  it('a late bid (within the 4 s watermark delay) bridges two sessions into one', async () => {
    const input = [bid(1, 30_000, { bidder: 4 }), bid(1, 32_000, { bidder: 4 }), bid(1, 31_000, { bidder: 4 })];
    const { rows } = await runQuery<Q11Row>(q11({ gapMs: 1000 }), input);
    expect(rows).toEqual([{ bidder: 4, bidCount: 3, start: 30_000, end: 33_000 }]);
  });

  it('equals the batch definition on generated events', async () => {
    const { rows } = await runQuery<Q11Row>(q11(), events);
    const expected = sortBy(refQ11(events), 'bidder', 'start');
    expect(expected.length).toBeGreaterThan(100);
    expect(sortBy(rows, 'bidder', 'start')).toEqual(expected);
    expect(Object.keys(rows[0])).toEqual(['bidder', 'bidCount', 'start', 'end']);
  });
});
