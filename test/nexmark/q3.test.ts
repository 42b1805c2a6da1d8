/** Nexmark Q3 (unbounded join of sellers in OR/ID/CA with category-10 auctions). */
import { describe, expect, it } from 'vitest';
import q3, { type Q3Row } from '../../examples/nexmark/q3.ts';
import { refQ3 } from './reference.ts';
import { auction, generated, person, runQuery, sortBy } from './support.ts';

describe('Q3 local item suggestion', () => {
  it('joins whichever side comes first, filters both sides, one row per auction', async () => {
    const input = [
      person(1, 0, { name: 'Ann', city: 'Bend', state: 'OR' }),
      auction(10, 1, { seller: 1 }), // seller already known
      auction(11, 2, { seller: 2 }), // seller arrives later
      auction(12, 2, { seller: 2 }),
      auction(13, 3, { seller: 1, category: 11 }), // wrong category
      person(2, 4, { name: 'Bob', city: 'Boise', state: 'ID' }),
      auction(14, 5, { seller: 2 }),
      person(3, 5, { name: 'Cy', city: 'Kent', state: 'WA' }), // wrong state
      auction(15, 6, { seller: 3 }),
      auction(16, 6, { seller: 4 }), // seller never appears
      person(5, 7, { name: 'Di', city: 'Los Angeles', state: 'CA' }),
      auction(17, 60_000, { seller: 5 }), // much later: state is kept forever
    ];
    for (const parallelism of [1, 3]) {
      const { rows } = await runQuery<Q3Row>(q3({ parallelism }), input);
      expect(sortBy(rows, 'id')).toEqual([
        { name: 'Ann', city: 'Bend', state: 'OR', id: 10 },
        { name: 'Bob', city: 'Boise', state: 'ID', id: 11 },
        { name: 'Bob', city: 'Boise', state: 'ID', id: 12 },
        { name: 'Bob', city: 'Boise', state: 'ID', id: 14 },
        { name: 'Di', city: 'Los Angeles', state: 'CA', id: 17 },
      ]);
    }
  });

  it('equals the batch definition on generated events', async () => {
    const events = generated(6000, 300);
    const expected = sortBy(refQ3(events), 'id');
    expect(expected.length).toBeGreaterThan(10);
    for (const parallelism of [2, 3]) {
      const { rows } = await runQuery<Q3Row>(q3({ parallelism }), events);
      expect(sortBy(rows, 'id')).toEqual(expected);
    }
    const { rows } = await runQuery<Q3Row>(q3(), events);
    expect(Object.keys(rows[0])).toEqual(['name', 'city', 'state', 'id']);
  });
});
