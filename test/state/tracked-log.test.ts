/**
 * TrackedLog, the in-memory store's tracked interval: reports are logged as they come (an
 * entity may repeat), `entities` answers each entity once and follows later reports, and
 * forEachChanged covers every entity of `entities`.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { TrackedLog } from '../../lib/state/tracked-log.ts';

const kgOf = (entity: string) => entity.length % 7;

describe('TrackedLog', () => {
  it('answers the distinct reported entities, with their key groups, after any sequence of reports and reads', () => {
    const step = fc.oneof(fc.record({ add: fc.constantFrom('op\u0001a', 'op\u0001bb', 'other\u0001a', 'op\u0001ccc') }), fc.constant({ read: true as const }));
    fc.assert(
      fc.property(fc.array(step, { maxLength: 30 }), (steps) => {
        const log = new TrackedLog(3);
        const model = new Map<string, number>();
        for (const s of steps) {
          if ('add' in s) {
            log.add(s.add, kgOf(s.add));
            model.set(s.add, kgOf(s.add));
          } else expect(new Map(log.entities)).toEqual(model);
        }
        expect(log.after).toBe(3);
        expect(new Map(log.entities)).toEqual(model);
        const seen = new Map<string, number>();
        log.forEachChanged((kg, entity) => seen.set(entity, kg));
        expect(seen).toEqual(model);
      }),
      { seed: 11, numRuns: 200 },
    );
  });
});
