/** FieldTable (two fields inline, more in a Map) against a plain Map. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FieldTable } from '../../lib/state/fields.ts';

describe('FieldTable', () => {
  it('behaves like a Map of fields, whichever slots the fields land in (property)', () => {
    const field = fc.constantFrom('a', 'b', 'c', 'd');
    const op = fc.oneof(
      fc.record({ kind: fc.constant('set' as const), field, v: fc.integer() }),
      fc.record({ kind: fc.constant('setOwned' as const), field, v: fc.integer() }),
      fc.record({ kind: fc.constant('delete' as const), field }),
      fc.record({ kind: fc.constant('clear' as const) }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 40 }), (ops) => {
        const t = new FieldTable();
        const model = new Map<string, unknown>();
        /** Fields whose value is the list setOwned gave (and nothing replaced since). */
        const owned = new Set<string>();
        for (const o of ops) {
          if (o.kind === 'set') {
            t.set(o.field, o.v);
            model.set(o.field, o.v);
            owned.delete(o.field);
          } else if (o.kind === 'setOwned') {
            const list = [o.v];
            t.setOwned(o.field, list);
            model.set(o.field, list);
            owned.add(o.field);
          } else if (o.kind === 'delete') {
            t.delete(o.field);
            model.delete(o.field);
            owned.delete(o.field);
          } else {
            t.clearFields();
            model.clear();
            owned.clear();
          }
          expect(t.size).toBe(model.size);
          for (const f of ['a', 'b', 'c', 'd']) expect(t.get(f)).toBe(model.get(f));
          // A list set by setOwned, and still there, may be extended in place; nothing else.
          for (const f of ['a', 'b', 'c', 'd']) expect(t.extensible(f)).toBe(owned.has(f));
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

  it('extends an owned list in place, in an inline slot or the overflow', () => {
    const t = new FieldTable();
    const a = [1];
    const b = [2];
    const c = [3];
    t.setOwned('a', a);
    t.setOwned('b', b);
    t.setOwned('c', c);
    expect([t.extensible('a'), t.extensible('b'), t.extensible('c'), t.extensible('d')]).toEqual([true, true, true, false]);
    t.extend('a', [4, 5]);
    t.extend('b', [6]);
    t.extend('c', [7]);
    expect(t.get('a')).toBe(a);
    expect(a).toEqual([1, 4, 5]);
    expect(b).toEqual([2, 6]);
    expect(c).toEqual([3, 7]);
    // An overflow field set plainly, or deleted and set again, is no longer the table's own.
    t.set('c', [8]);
    expect(t.extensible('c')).toBe(false);
    t.setOwned('c', [9]);
    t.delete('c');
    t.set('c', [10]);
    expect(t.extensible('c')).toBe(false);
    // A plain set of the same field (a caller's list) is no longer the table's own.
    t.set('a', [7]);
    expect(t.extensible('a')).toBe(false);
    expect(t.extensible('b')).toBe(true);
    // A freed slot taken by another field starts unmarked.
    t.delete('b');
    t.set('d', [8]);
    expect(t.extensible('d')).toBe(false);
  });
});
