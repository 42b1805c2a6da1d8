import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { keyGroupOf, keyGroupRange, partitionOfKeyGroup } from '../../lib/graph/keygroups.ts';
import { keyFromString, keyToString } from '../../lib/api/types.ts';

describe('key groups', () => {
  it('every key group belongs to exactly the partition whose contiguous range holds it', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 512 }), fc.integer({ min: 1, max: 512 }), (maxP, pRaw) => {
        const p = Math.min(pRaw, maxP);
        let next = 0;
        for (let part = 0; part < p; part++) {
          const r = keyGroupRange(part, p, maxP);
          expect(r.start).toBe(next);
          for (let kg = r.start; kg < r.end; kg++) expect(partitionOfKeyGroup(kg, p, maxP)).toBe(part);
          next = r.end;
        }
        expect(next).toBe(maxP);
      }),
      { seed: 7, numRuns: 200 },
    );
  });

  it('is a pure function of the key, and spreads keys over groups', () => {
    expect(keyGroupOf('auction-1', 128)).toBe(keyGroupOf('auction-1', 128));
    const counts = new Array(128).fill(0);
    for (let i = 0; i < 128_000; i++) counts[keyGroupOf(i, 128)]++;
    expect(Math.min(...counts)).toBeGreaterThan(800);
    expect(Math.max(...counts)).toBeLessThan(1200);
  });

  it('keeps string, number and tuple keys apart and round-trips them', () => {
    expect(keyToString('1')).not.toBe(keyToString(1));
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.integer(), fc.array(fc.oneof(fc.string(), fc.integer()))), (k) => {
        expect(keyFromString(keyToString(k))).toEqual(k);
      }),
      { seed: 11 },
    );
  });
});
