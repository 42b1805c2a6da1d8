import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Cell, StageCells } from '../../lib/state/memory-cells.ts';

/** A stage's cells against a map of what should be attached: listing must never change what a look-up or a listing of the stage answers. */
describe('StageCells', () => {
  it('answers every look-up and listing as an eager index would, whatever the order of attaches, detaches and look-ups', () => {
    const entity = fc.integer({ min: 0, max: 11 });
    const op = fc.oneof(
      fc.record({ kind: fc.constant('attach' as const), e: entity, indexed: fc.boolean() }),
      fc.record({ kind: fc.constant('detach' as const), e: entity }),
      fc.record({ kind: fc.constant('find' as const), e: entity }),
      fc.record({ kind: fc.constant('list' as const) }),
      fc.record({ kind: fc.constant('dropGroup' as const), kg: fc.integer({ min: 0, max: 2 }) }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
        const stage = new StageCells();
        const model = new Map<string, Cell>();
        const kgOf = (e: number) => e % 3;
        for (const o of ops) {
          if (o.kind === 'dropGroup') {
            const dropped = [...model].filter(([name]) => kgOf(Number(name.slice(1))) === o.kg);
            stage.dropGroup(o.kg);
            for (const [name, cell] of dropped) {
              model.delete(name);
              expect(cell.attached).toBe(false);
            }
            for (const cell of model.values()) expect(cell.attached).toBe(true);
            continue;
          }
          if (o.kind === 'list') {
            const seen = new Map<string, Cell>();
            for (const [kg, cells] of stage.index()) {
              for (const [name, cell] of cells) {
                expect(kgOf(Number(name.slice(1)))).toBe(kg);
                seen.set(name, cell);
              }
            }
            expect(seen).toEqual(model);
            continue;
          }
          const name = `e${o.e}`;
          const kg = kgOf(o.e);
          const cell = model.get(name);
          if (o.kind === 'find') expect(stage.find(kg, name)).toBe(cell);
          else if (o.kind === 'attach') {
            if (cell !== undefined) continue; // one attached cell per entity
            const fresh = new Cell();
            fresh.set('f', o.e);
            if (o.indexed) stage.attachIndexed(fresh, kg, name);
            else stage.attach(fresh, kg, name);
            expect(fresh.attached).toBe(true);
            model.set(name, fresh);
          } else if (cell !== undefined) {
            stage.detach(cell, kg, name);
            expect(cell.attached).toBe(false);
            expect(cell.size).toBe(0);
            model.delete(name);
          }
        }
        for (const [name, cell] of model) expect(stage.find(kgOf(Number(name.slice(1))), name)).toBe(cell);
      }),
      { seed: 20261201, numRuns: 300 },
    );
  });

  it('keeps a listed cell out of the index until something looks the stage up', () => {
    const stage = new StageCells();
    const a = new Cell();
    const b = new Cell();
    stage.attach(a, 0, 'a');
    stage.attach(b, 0, 'b');
    expect(a.listed).toBe(0);
    expect(b.listed).toBe(1);
    // Detaching the first moves the last into its slot.
    stage.detach(a, 0, 'a');
    expect(a.listed).toBe(-1);
    expect(b.listed).toBe(0);
    expect(stage.find(0, 'b')).toBe(b);
    expect(b.listed).toBe(-1);
    expect(stage.find(0, 'a')).toBeUndefined();
  });
});
