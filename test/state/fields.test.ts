/** FieldTable (two fields inline, more in a Map) against a plain Map. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FieldTable } from '../../lib/state/fields.ts';

describe('FieldTable', () => {
  it('behaves like a Map of fields, whichever slots the fields land in (property)', () => {
    const field = fc.constantFrom('a', 'b', 'c', 'd');
    const op = fc.oneof(
      fc.record({ kind: fc.constant('set' as const), field, v: fc.integer() }),
      fc.record({ kind: fc.constant('delete' as const), field }),
      fc.record({ kind: fc.constant('clear' as const) }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 40 }), (ops) => {
        const t = new FieldTable();
        const model = new Map<string, number>();
        for (const o of ops) {
          if (o.kind === 'set') {
            t.set(o.field, o.v);
            model.set(o.field, o.v);
          } else if (o.kind === 'delete') {
            t.delete(o.field);
            model.delete(o.field);
          } else {
            t.clearFields();
            model.clear();
          }
          expect(t.size).toBe(model.size);
          for (const f of ['a', 'b', 'c', 'd']) expect(t.get(f)).toBe(model.get(f));
          const seen: [string, unknown][] = [];
          t.forEach((v, f) => seen.push([f, v]));
          expect(new Map(seen)).toEqual(model);
          expect(seen).toHaveLength(model.size);
          expect(t.toMap()).toEqual(model);
          // A ReadonlyMap: iteration, keys, values, has.
          expect(new Map(t)).toEqual(model);
          expect(new Set(t.keys())).toEqual(new Set(model.keys()));
          expect([...t.values()].sort()).toEqual([...model.values()].sort());
          for (const f of ['a', 'b', 'c', 'd']) expect(t.has(f)).toBe(model.has(f));
        }
      }),
      { seed: 17, numRuns: 300 },
    );
  });
});
