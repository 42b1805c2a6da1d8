/** Nexmark Q0, Q1, Q2 (stateless): hand-made edge cases and the batch definition over generated events, in input order. */
import { describe, expect, it } from 'vitest';
import q0 from '../../examples/nexmark/q0.ts';
import q1 from '../../examples/nexmark/q1.ts';
import q2 from '../../examples/nexmark/q2.ts';
import { refQ0, refQ1, refQ2 } from './reference.ts';
import { auction, bid, generated, person, runQuery } from './support.ts';

const events = generated(3000, 500);

describe('Q0 pass-through', () => {
  it('every bid in input order, projected to auction, bidder, price, dateTime, extra', async () => {
    const input = [person(1, 0), bid(7, 0, { price: 5, extra: 'e1' }), auction(7, 1), bid(3, 1, { bidder: 9, price: 6, extra: '' }), bid(7, 1)];
    const { rows } = await runQuery<object>(q0(), input);
    expect(rows).toEqual([
      { auction: 7, bidder: 2000, price: 5, dateTime: 0, extra: 'e1' },
      { auction: 3, bidder: 9, price: 6, dateTime: 1, extra: '' },
      { auction: 7, bidder: 2000, price: 100, dateTime: 1, extra: 'x' },
    ]);
    expect(Object.keys(rows[0])).toEqual(['auction', 'bidder', 'price', 'dateTime', 'extra']);
  });

  it('equals the batch definition on generated events', async () => {
    const { rows } = await runQuery(q0(), events);
    expect(rows).toEqual(refQ0(events));
  });

  it('rejects an event without an integer dateTime and keeps going', async () => {
    const { rows, rejected } = await runQuery(q0(), [bid(1, 0), { type: 'bid', auction: 1, bidder: 1, price: 1, extra: '' }, bid(2, 1)]);
    expect(rejected).toBe(1);
    expect(rows.map((r) => (r as { auction: number }).auction)).toEqual([1, 2]);
  });
});

describe('Q1 currency conversion', () => {
  it('price * 908 / 1000, the double closest to the exact decimal (not 0.908 * price)', async () => {
    // 0.908 * 108 = 98.06400000000001 in doubles; the exact value is 98.064.
    const input = [bid(1, 0, { price: 108 }), bid(1, 0, { price: 100 }), bid(1, 1, { price: 100_000_000 }), bid(1, 2, { price: 1_000 })];
    const { rows } = await runQuery<{ price: number }>(q1(), input);
    expect(rows.map((r) => r.price)).toEqual([98.064, 90.8, 90_800_000, 908]);
  });

  it('equals the batch definition on generated events', async () => {
    const { rows } = await runQuery(q1(), events);
    expect(rows).toEqual(refQ1(events));
  });
});

describe('Q2 selection', () => {
  it('auction ids that are multiples of 123, in input order', async () => {
    const input = [bid(0, 0, { price: 1 }), bid(122, 0), bid(123, 1, { price: 2 }), bid(124, 1), bid(246, 2, { price: 3 }), auction(123, 2), bid(123, 3, { price: 4 })];
    const { rows } = await runQuery(q2(), input);
    expect(rows).toEqual([
      { auction: 0, price: 1 },
      { auction: 123, price: 2 },
      { auction: 246, price: 3 },
      { auction: 123, price: 4 },
    ]);
  });

  it('equals the batch definition on generated events (with a smaller modulus, so there is more to compare)', async () => {
    const { rows } = await runQuery(q2(), events);
    expect(rows).toEqual(refQ2(events));
    const { rows: more } = await runQuery(q2({ auctionSkip: 7 }), events);
    expect(more.length).toBeGreaterThan(100);
    expect(more).toEqual(refQ2(events, 7));
  });
});
