import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { KeyTimers, Node } from '../../lib/runtime/timer-nodes.ts';
import { emptyProgress, type TimerEntry } from '../../lib/state/backend.ts';
import { InMemoryStateBackend } from '../../lib/state/memory.ts';
import { StateTxn } from '../../lib/state/txn.ts';
import { backendConformance, batch, freshScope } from './backend-conformance.ts';

backendConformance('InMemoryStateBackend', () => {
  const backend = new InMemoryStateBackend();
  return { open: () => backend };
});

describe('InMemoryStateBackend', () => {
  const timer = (key: string, time: number): TimerEntry => ({ node: 1, domain: 'event', time, kg: 3, key, ns: '' });

  it("a key's only timer deleted and its next one added in one commit (a window firing), then none left", async () => {
    const b = new InMemoryStateBackend();
    const scope = freshScope();
    await b.recover(scope);
    await b.commit(batch(scope, 0, { timerAdds: [timer('a', 10), timer('b', 10)] }));
    await b.commit(batch(scope, 1, { timerDeletes: [timer('a', 10)], timerAdds: [timer('a', 20)] }));
    // The store promises no order of its timers (the runtime orders them itself).
    const byKey = (ts: readonly TimerEntry[]) => [...ts].sort((x, y) => (x.key < y.key ? -1 : x.key > y.key ? 1 : x.time - y.time));
    expect(byKey((await b.recover(scope)).timers)).toEqual([timer('a', 20), timer('b', 10)]);
    await b.commit(batch(scope, 2, { timerDeletes: [timer('a', 20), timer('b', 10)] }));
    expect((await b.recover(scope)).timers).toEqual([]);
    await b.commit(batch(scope, 3, { timerAdds: [timer('a', 30)] }));
    expect((await b.recover(scope)).timers).toEqual([timer('a', 30)]);
  });

  it('timers deleted by the object added, by a copy, and after recover() handed them out', async () => {
    const b = new InMemoryStateBackend();
    const scope = freshScope();
    await b.recover(scope);
    const [a, c, d] = [timer('a', 10), timer('c', 10), timer('d', 10)];
    await b.commit(batch(scope, 0, { timerAdds: [a, c, d, timer('e', 5)] }));
    // The object itself (the runtime's way), and a copy of another.
    await b.commit(batch(scope, 1, { timerDeletes: [a, timer('c', 10)] }));
    const handed = (await b.recover(scope)).timers;
    expect(handed.map((t) => t.key).sort()).toEqual(['d', 'e']);
    // A recovered runtime deletes copies of what it was handed, and adds the same timer again.
    await b.commit(batch(scope, 2, { timerDeletes: [{ ...d }], timerAdds: [timer('e', 5), timer('f', 1)] }));
    const left = (await b.recover(scope)).timers;
    expect(left.map((t) => `${t.key}${t.time}`).sort()).toEqual(['e5', 'f1']);
    await b.commit(batch(scope, 3, { timerDeletes: left.map((t) => ({ ...t })) }));
    expect((await b.recover(scope)).timers).toEqual([]);
  });

  it("the runtime's timer nodes (slotted entries): any sequence of adds and deletes, by the object or a copy, leaves exactly the live set", async () => {
    const node = (key: string, time: number) => new Node(1, 'event', time, 3, key, '', new KeyTimers());
    const op = fc.record({ add: fc.boolean(), i: fc.nat(11), copy: fc.boolean(), recover: fc.boolean() });
    await fc.assert(
      fc.asyncProperty(fc.array(fc.array(op, { maxLength: 6 }), { maxLength: 12 }), async (commits) => {
        const b = new InMemoryStateBackend();
        const scope = freshScope();
        await b.recover(scope);
        const pool = Array.from({ length: 12 }, (_, i) => node(`k${i % 4}`, i));
        const live = new Set<number>();
        let version = 0;
        for (const ops of commits) {
          const adds: TimerEntry[] = [];
          const deletes: TimerEntry[] = [];
          const touched = new Set<number>();
          for (const { add, i, copy } of ops) {
            // A commit changes a timer once (the queue's change list holds a node once).
            if (touched.has(i)) continue;
            touched.add(i);
            if (add && !live.has(i)) {
              adds.push(pool[i]);
              live.add(i);
            } else if (!add && live.has(i)) {
              deletes.push(copy ? { ...pool[i] } : pool[i]);
              live.delete(i);
            }
          }
          await b.commit(batch(scope, version++, { timerAdds: adds, timerDeletes: deletes }));
          if (ops[0]?.recover) {
            const ids = (await b.recover(scope)).timers.map((t) => t.time).sort((x, y) => x - y);
            expect(ids).toEqual([...live].sort((x, y) => x - y));
          }
        }
        const ids = (await b.recover(scope)).timers.map((t) => t.time).sort((x, y) => x - y);
        expect(ids).toEqual([...live].sort((x, y) => x - y));
      }),
      { seed: 42, numRuns: 300 },
    );
  });

  it("a timer node's store slot is not part of the entry (JSON, spreads)", () => {
    const n = new Node(1, 'event', 10, 3, 'a', '', new KeyTimers());
    n.storeSlot = 7;
    expect(JSON.parse(JSON.stringify(n))).toEqual({ node: 1, domain: 'event', time: 10, kg: 3, key: 'a', ns: '' });
    expect({ ...n }).toEqual({ node: 1, domain: 'event', time: 10, kg: 3, key: 'a', ns: '' });
  });

  it('install() replaces the cells an overlay keeps: its next batch reads the installed state', async () => {
    const b = new InMemoryStateBackend();
    const scope = freshScope();
    await b.recover(scope);
    const txn = new StateTxn(b, scope);
    const entry = () => txn.overlay('op').entry('k', 2);
    entry().write('P', 1);
    const { entities } = txn.changes();
    b.commitSync({ ...batch(scope, 0), entities });
    txn.reset();
    expect(entry().read('P')).toBe(1);
    txn.reset();
    b.install(scope, { progress: emptyProgress(), timers: [], entities: [{ kg: 2, entity: 'op\u0001k', fields: new Map([['P', 2]]) }] }, [2]);
    expect(entry().read('P')).toBe(2);
    txn.reset();
    b.install(scope, { progress: emptyProgress(), timers: [], entities: [] }, [2]);
    expect(entry().read('P')).toBeUndefined();
    expect(b.entityCount(scope.job, scope.stage)).toBe(0);
  });
});
