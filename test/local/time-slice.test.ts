/** TimeSlicer: batch sizes from measured costs (the measurements are given, not timed). */
import { describe, expect, it } from 'vitest';
import { FIRST_RECORDS, TimeSlicer } from '../../lib/local/time-slice.ts';

describe('time slicing', () => {
  it('starts small and doubles per batch measured while batches are cheap', () => {
    const t = new TimeSlicer(20);
    expect(t.records(16_384)).toBe(FIRST_RECORDS);
    const seen: number[] = [];
    for (let i = 0; i < 12; i++) {
      const n = t.records(16_384);
      seen.push(n);
      t.observe(0, n, n * 0.0005); // 0.5 µs a record
    }
    expect(seen.slice(0, 4)).toEqual([32, 64, 128, 256]);
    expect(t.records(16_384)).toBe(16_384);
  });

  it('a slow stage limits every batch to one slice of its cost; it rises at once and falls slowly', () => {
    const t = new TimeSlicer(20);
    t.observe(0, 32, 64); // 2 ms a record
    expect(t.records(4096)).toBe(10);
    t.observe(1, 256, 1); // a fast stage does not raise the limit
    expect(t.records(4096)).toBe(10);
    t.observe(0, 10, 40); // 4 ms a record: at once
    expect(t.records(4096)).toBe(5);
    t.observe(0, 5, 10); // 2 ms again: a fifth of the way back
    expect(t.records(4096)).toBe(Math.floor(20 / 3.6));
    expect(t.recordsPerSecond()).toBeCloseTo(1000 / 3.6);
  });

  it('a small, short batch (mostly the fixed cost of a commit) does not count as a cost per record', () => {
    const t = new TimeSlicer(20);
    for (let i = 0; i < 12; i++) t.observe(0, 1, 0.03); // 30 µs for one record
    expect(t.records(16_384)).toBe(16_384);
    expect(t.recordsPerSecond()).toBeUndefined();
  });

  it('never asks for less than one record', () => {
    const t = new TimeSlicer(20);
    t.observe(0, 1, 500);
    expect(t.records(4096)).toBe(1);
  });
});
