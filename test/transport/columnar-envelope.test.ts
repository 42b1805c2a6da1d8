import { inspect } from 'node:util';
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

  it('on hash channels, build records with their key (an own property, even when undefined)', () => {
    const keys = ['a', undefined as unknown as string, ['x', 1] as const];
    const env = columnarEnvelope(head, { values: [1, 2, 3], timestamps: [5, 6, 7], maxTimestamp: 7, keys, keyStrings: ['sa', 'u', 'j["x",1]'], keyGroups: [1, 2, 3] });
    const expectedKeyed = [
      { value: 1, timestamp: 5, key: 'a' },
      { value: 2, timestamp: 6, key: undefined },
      { value: 3, timestamp: 7, key: ['x', 1] },
    ];
    expect(env.records).toStrictEqual(expectedKeyed);
    expect(toPlainEnvelope(env)).toStrictEqual({ ...head, records: expectedKeyed });
    expect(JSON.parse(JSON.stringify(env))).toEqual(JSON.parse(JSON.stringify({ ...head, records: expectedKeyed })));
    expect(recordCount(env)).toBe(3);
    expect(inspect(env)).toBe(inspect({ channel: '0:1', edge: 0, toPartition: 1, seq: 7, records: expectedKeyed, watermark: 42, idle: undefined }));
  });
});
