/**
 * Window arithmetic (window-state.ts): floorMod against `%`, which it replaces on the hot
 * path, over epoch-millisecond magnitudes, negatives and the edges of its exact range; and
 * firstWindowStart against its definition (the earliest aligned start whose window holds t).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { firstWindowStart, floorMod } from '../../lib/operators/window-state.ts';

/** The remainder by `%`, in [0, m) (+ 0: `%` gives -0 for a negative multiple). */
const byPercent = (a: number, m: number) => {
  const r = a % m;
  return (r < 0 ? r + m : r) + 0;
};

describe('floorMod', () => {
  it('equals the remainder by % for any safe integer and positive divisor', () => {
    const near = (x: number) => fc.integer({ min: -4096, max: 4096 }).map((d) => x + d);
    const dividend = fc.oneof(
      fc.integer(),
      fc.maxSafeInteger(),
      fc.integer({ min: 1_400_000_000_000, max: 1_800_000_000_000 }),
      near(2 ** 52),
      near(-(2 ** 52)),
      near(Number.MAX_SAFE_INTEGER - 4096),
      near(Number.MIN_SAFE_INTEGER + 4096),
    );
    const divisor = fc.oneof(fc.integer({ min: 1, max: 100_000 }), fc.integer({ min: 1, max: 2 ** 31 }), fc.maxSafeNat().filter((m) => m > 0));
    fc.assert(
      fc.property(dividend, divisor, (a, m) => {
        const r = floorMod(a, m);
        expect(r).toBe(byPercent(a, m));
        expect(r >= 0 && r < m).toBe(true);
      }),
      { numRuns: 5000 },
    );
  });

  it('takes multiples of the divisor to 0 (no -0, no m)', () => {
    expect(Object.is(floorMod(-6000, 2000), 0)).toBe(true);
    expect(floorMod(1_436_918_000_000, 2000)).toBe(0);
    expect(floorMod(-1, 2000)).toBe(1999);
  });
});

describe('firstWindowStart', () => {
  it('is the earliest start, aligned to slide and offset, of a window that holds t', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: -(2 ** 45), max: 2 ** 45 }),
        fc.integer({ min: 1, max: 50_000 }),
        fc.integer({ min: 1, max: 50_000 }),
        fc.integer({ min: -50_000, max: 50_000 }),
        (t, size, slide, offset) => {
          const first = firstWindowStart(t, { size, slide, offset });
          expect(byPercent(first - offset, slide)).toBe(0);
          // Its window is the earliest that could hold t (the one a slide earlier ends at or before t).
          expect(first - slide + size <= t).toBe(true);
          // It holds t unless a slide longer than the size leaves t in no window.
          if (first <= t) expect(first + size > t).toBe(true);
          else expect(slide > size).toBe(true);
        },
      ),
      { numRuns: 2000 },
    );
  });
});
