/**
 * Snapshot objects' encoding: encodeSnapshot writes the same bytes as the generic tagged
 * JSON (toBytes), whatever the rows hold: removed entities (null fields), values JSON
 * cannot write (non-finite numbers, undefined array slots), keys that look like tags,
 * strings that read "null" or start with "$".
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { toBytes } from '../../lib/checkpoint/codec.ts';
import { decodeSnapshot, encodeSnapshot, type SnapshotObject, type SnapshotRow } from '../../lib/checkpoint/snapshot.ts';
import { emptyProgress } from '../../lib/state/backend.ts';

const text = fc.oneof(fc.string({ maxLength: 6 }), fc.constantFrom('null', '$n', '$u', '$o', 'a\u0001null', '$'));
const leaf = fc.oneof(
  fc.integer(),
  fc.double({ noNaN: false }),
  fc.constantFrom(Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, Number.NaN, null, true),
  text,
);
const value: fc.Arbitrary<unknown> = fc.letrec<{ v: unknown }>((tie) => ({
  v: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    leaf,
    fc.array(fc.oneof(tie('v'), fc.constant(undefined)), { maxLength: 4 }),
    fc.dictionary(text, tie('v'), { maxKeys: 3 }),
  ),
})).v;
const row: fc.Arbitrary<SnapshotRow> = fc.tuple(
  fc.nat({ max: 127 }),
  text.map((k) => `op\u0001${k}`),
  fc.option(fc.array(fc.tuple(text, value), { maxLength: 3 }), { nil: null }),
  fc.array(fc.tuple(fc.nat(), fc.constantFrom(0 as const, 1 as const), fc.oneof(fc.integer(), fc.constant(Number.POSITIVE_INFINITY)), text), { maxLength: 2 }),
);

function snapshot(entities: SnapshotRow[]): SnapshotObject {
  return { format: 1, job: 'j', stage: 1, partition: 0, epoch: 3, baseEpoch: 2, full: false, progress: emptyProgress(), entities };
}

describe('encodeSnapshot', () => {
  it('writes the bytes of the tagged JSON encoding, and reads back as written (property)', () => {
    fc.assert(
      fc.property(fc.array(row, { maxLength: 8 }), (rows) => {
        const s = snapshot(rows);
        const bytes = encodeSnapshot(s);
        expect(Buffer.from(bytes).toString()).toBe(Buffer.from(toBytes(s)).toString());
        expect(decodeSnapshot(bytes)).toEqual(decodeSnapshot(toBytes(s)));
      }),
      { seed: 77, numRuns: 500 },
    );
  });

  it('rows that need no tags, removed entities among them, and rows that do', () => {
    const plain = snapshot([
      [1, 'op\u0001a', [['P', [1, 2]]], [[1, 0, 9, '']]],
      [2, 'op\u0001b', null, []],
    ]);
    expect(Buffer.from(encodeSnapshot(plain)).toString()).toBe(Buffer.from(toBytes(plain)).toString());
    const tagged = snapshot([
      [2, 'op\u0001b', null, []],
      [3, 'op\u0001c', [['x', [Number.NEGATIVE_INFINITY, undefined]]], [[1, 0, Number.POSITIVE_INFINITY, '']]],
    ]);
    expect(Buffer.from(encodeSnapshot(tagged)).toString()).toBe(Buffer.from(toBytes(tagged)).toString());
    expect(decodeSnapshot(encodeSnapshot(tagged)).entities[1]).toEqual([3, 'op\u0001c', [['x', [Number.NEGATIVE_INFINITY, undefined]]], [[1, 0, Number.POSITIVE_INFINITY, '']]]);
  });
});
