import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { assignWindows, windowCover, windowMaxTimestamp, Windows, windowStartFor, windowsTouch } from '../../lib/api/windows.ts';

describe('windowStartFor', () => {
  it('floors to the period, also for negative timestamps', () => {
    expect(windowStartFor(0, 10)).toBe(0);
    expect(windowStartFor(9, 10)).toBe(0);
    expect(windowStartFor(10, 10)).toBe(10);
    expect(windowStartFor(-1, 10)).toBe(-10);
    expect(windowStartFor(-10, 10)).toBe(-10);
    expect(windowStartFor(-11, 10)).toBe(-20);
  });

  it('honours the offset', () => {
    expect(windowStartFor(3, 10, 4)).toBe(-6);
    expect(windowStartFor(4, 10, 4)).toBe(4);
    expect(windowStartFor(13, 10, 4)).toBe(4);
    expect(windowStartFor(14, 10, 4)).toBe(14);
  });
});

describe('assignWindows', () => {
  it('tumbling: an event exactly at a window end belongs to the next window', () => {
    const a = Windows.tumbling(10);
    expect(assignWindows(a, 9)).toEqual([{ start: 0, end: 10 }]);
    expect(assignWindows(a, 10)).toEqual([{ start: 10, end: 20 }]);
    expect(assignWindows(a, -1)).toEqual([{ start: -10, end: 0 }]);
    expect(assignWindows(a, -10)).toEqual([{ start: -10, end: 0 }]);
  });

  it('sliding with a slide that does not divide the size (10 / 3)', () => {
    const a = Windows.sliding(10, 3);
    // starts are multiples of 3 with t - 10 < start <= t, latest first
    expect(assignWindows(a, 0)).toEqual([
      { start: 0, end: 10 },
      { start: -3, end: 7 },
      { start: -6, end: 4 },
      { start: -9, end: 1 },
    ]);
    expect(assignWindows(a, 10)).toEqual([
      { start: 9, end: 19 },
      { start: 6, end: 16 },
      { start: 3, end: 13 },
    ]);
    expect(assignWindows(a, 11).map((w) => w.start)).toEqual([9, 6, 3]);
    expect(assignWindows(a, 12).map((w) => w.start)).toEqual([12, 9, 6, 3]);
    expect(assignWindows(a, -5).map((w) => w.start)).toEqual([-6, -9, -12]);
  });

  it('sliding: every window contains t and has an aligned start (property)', () => {
    fc.assert(
      fc.property(fc.integer({ min: -1000, max: 1000 }), fc.integer({ min: 1, max: 30 }), fc.integer({ min: 1, max: 30 }), (t, size, slide) => {
        const got = assignWindows(Windows.sliding(size, slide), t).map((w) => w.start);
        const want: number[] = [];
        for (let s = t; s > t - size; s--) if (((s % slide) + slide) % slide === 0) want.push(s);
        expect(got).toEqual(want);
      }),
      { seed: 42 },
    );
  });

  it('session: the record opens its own proto-window', () => {
    expect(assignWindows(Windows.session(10), 5)).toEqual([{ start: 5, end: 15 }]);
  });
});

describe('window helpers', () => {
  it('windows that overlap or touch merge', () => {
    expect(windowsTouch({ start: 0, end: 10 }, { start: 10, end: 20 })).toBe(true);
    expect(windowsTouch({ start: 10, end: 20 }, { start: 0, end: 10 })).toBe(true);
    expect(windowsTouch({ start: 0, end: 10 }, { start: 11, end: 21 })).toBe(false);
    expect(windowsTouch({ start: 0, end: 30 }, { start: 5, end: 6 })).toBe(true);
    expect(windowCover({ start: 0, end: 10 }, { start: 5, end: 20 })).toEqual({ start: 0, end: 20 });
    expect(windowMaxTimestamp({ start: 0, end: 10 })).toBe(9);
  });

  it('assigners reject non-positive or fractional sizes', () => {
    expect(() => Windows.tumbling(0)).toThrow(RangeError);
    expect(() => Windows.sliding(10, 0)).toThrow(RangeError);
    expect(() => Windows.sliding(1.5, 1)).toThrow(RangeError);
    expect(() => Windows.session(-1)).toThrow(RangeError);
    expect(Windows.tumbling(10, { offsetMs: 3 })).toEqual({ kind: 'tumbling', size: 10, offset: 3 });
  });
});
