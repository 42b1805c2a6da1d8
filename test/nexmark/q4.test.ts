/** Nexmark Q4 (average final price per category; BETWEEN inclusive; final results at the end of the input). */
import { describe, expect, it } from 'vitest';
import q4, { type Q4Row, truncDiv } from '../../examples/nexmark/q4.ts';
import { refQ4 } from './reference.ts';
import { auction, bid, generated, runQuery } from './support.ts';

describe('Q4 average selling price per category', () => {
  it('BETWEEN includes both ends, bids before their auction count, no-bid auctions do not, avg truncates', async () => {
    const input = [
      bid(1, 999, { price: 500 }), // before auction 1 opens: excluded
      auction(1, 1000, { category: 10, expires: 2000 }),
      bid(1, 1000, { price: 10 }), // at dateTime: included
      bid(2, 1500, { price: 71 }), // before auction 2 in the stream, same timestamp: included
      auction(2, 1500, { category: 10, expires: 1600 }),
      bid(2, 1600, { price: 5 }), // at expires: included, but not the max
      bid(1, 2000, { price: 20 }), // at expires: included, the max
      bid(1, 2001, { price: 1000 }), // after expires: excluded
      auction(3, 2001, { category: 11, expires: 3000 }), // no bids: no contribution
      auction(4, 2002, { category: 12, expires: 2100 }),
      bid(4, 2050, { price: 33 }),
      bid(2, 9000, { price: 9999 }), // long after auction 2 closed
      bid(4, 9000, { price: 9999 }),
    ];
    for (const parallelism of [1, 3]) {
      const { rows } = await runQuery<Q4Row>(q4({ parallelism }), input);
      expect([...rows].sort((a, b) => a.category - b.category)).toEqual([
        { category: 10, avg: 45, count: 2, sum: 91 }, // finals 20 and 71: 45.5 truncated
        { category: 12, avg: 33, count: 1, sum: 33 },
      ]);
    }
  });

  it('an auction that expires after the last event still counts (the end of input closes it)', async () => {
    const { rows } = await runQuery<Q4Row>(q4(), [auction(1, 0, { category: 14, expires: 1_000_000 }), bid(1, 5, { price: 7 }), bid(1, 6, { price: 8 })]);
    expect(rows).toEqual([{ category: 14, avg: 8, count: 1, sum: 8 }]);
  });

  it('equals the batch definition on generated events', async () => {
    const events = generated(6000, 300);
    const expected = refQ4(events);
    expect(expected).toHaveLength(5);
    for (const parallelism of [2, 3]) {
      const { rows } = await runQuery<Q4Row>(q4({ parallelism }), events);
      expect([...rows].sort((a, b) => a.category - b.category)).toEqual(expected);
      expect(Object.keys(rows[0])).toEqual(['category', 'avg', 'count', 'sum']);
    }
  });

  it('truncDiv is exact where the double quotient rounds up', () => {
    expect(truncDiv(91, 2)).toBe(45);
    expect(truncDiv(2 ** 53 - 1, 2 ** 30 + 1)).toBe(Number(BigInt(2 ** 53 - 1) / BigInt(2 ** 30 + 1)));
    expect(truncDiv(3 * 900_719_925_474 - 1, 3)).toBe(900_719_925_473);
  });
});
