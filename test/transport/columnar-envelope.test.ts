import { describe, expect, it } from 'vitest';
import { columnarEnvelope, columnsOf, type Envelope, recordCount, toPlainEnvelope } from '../../lib/transport/envelope.ts';

const head = { channel: '0:1', edge: 0, toPartition: 1, seq: 7, watermark: 42, idle: undefined };
const make = () => columnarEnvelope(head, { values: [{ a: 1 }, 'b', 3], timestamps: [10, 30, 20], maxTimestamp: 30 });
const expected = [
  { value: { a: 1 }, timestamp: 10 },
  { value: 'b', timestamp: 30 },
  { value: 3, timestamp: 20 },
];

describe('columnar envelopes', () => {
  it('count their records without building them, and build them once when read', () => {
    const env = make();
    expect(recordCount(env)).toBe(3);
    expect(columnsOf(env)?.maxTimestamp).toBe(30);
    expect(env.records).toEqual(expected);
    expect(env.records).toBe(env.records);
  });

  it('serialise and copy to ordinary envelopes (the columns are not copied)', () => {
    const plain: Envelope = { ...head, records: expected };
    for (const copy of [structuredClone(toPlainEnvelope(make())), JSON.parse(JSON.stringify(make()))] as Envelope[]) {
      expect(copy).toEqual(JSON.parse(JSON.stringify(plain)));
      expect(columnsOf(copy)).toBeUndefined();
      expect(recordCount(copy)).toBe(3);
    }
  });

  it('is not counted as columnar when it is an ordinary envelope', () => {
    expect(columnsOf({ ...head, records: [] })).toBeUndefined();
  });
});
