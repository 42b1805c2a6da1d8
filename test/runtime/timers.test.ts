/**
 * TimerQueue against a plain model: firing order (time order; one key's timers of one time
 * by namespace; across keys, queue order), no-op re-registration, and the per-commit change sets.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type TimerHome, TimerQueue } from '../../lib/runtime/timers.ts';
import type { TimerEntry } from '../../lib/state/backend.ts';
import { InMemoryStateBackend } from '../../lib/state/memory.ts';
import { StateTxn } from '../../lib/state/txn.ts';

const entry = (time: number, key: string, ns: string): TimerEntry => ({ node: 0, domain: 'event', time, kg: 0, key, ns });
const id = (t: TimerEntry) => `${t.time}|${t.key}|${t.ns}`;
/** A changed entity as reported (the key's home: its entity and kg, plus the home's own fields). */
const ek = (xs: readonly { entity: string; kg: number }[]) => xs.map(({ entity, kg }) => ({ entity, kg }));

const KEYS = ['sa', 'sb', 'n1', 'n10'];
const timerArb = fc.record({ time: fc.integer({ min: 0, max: 6 }), key: fc.constantFrom(...KEYS), ns: fc.constantFrom('', 'x', 'L') });
const opArb = fc.oneof(
  fc.record({ op: fc.constant('register' as const), t: timerArb, at: fc.boolean(), hint: fc.boolean() }),
  fc.record({ op: fc.constant('delete' as const), t: timerArb }),
  fc.record({ op: fc.constant('poll' as const), upTo: fc.integer({ min: -1, max: 7 }) }),
  fc.record({ op: fc.constant('commit' as const) }),
);

/**
 * A queue whose keys' timers are filed on their state entries, as a partition's are
 * (context.ts), over an overlay that forgets entries at each batch's end and sweeps past
 * two keys: `endBatch` is a commit's end (timers first, then the state's reset).
 */
function queueOnEntries(reuse: boolean) {
  const txn = new StateTxn(new InMemoryStateBackend(), { job: 'j', stage: 0, partition: 0 }, 2);
  const overlay = txn.overlay('op');
  const q = new TimerQueue({ node: 0, domain: 'event', entityOf: (key) => overlay.entityOf(key), homeOf: (key, kg, create) => overlay.timerHome(key, kg, create) as unknown as TimerHome | undefined }, reuse);
  return {
    q,
    /** The key's entry as a context holds it once it used the key's state (touched: the batch's end may forget it). */
    hint: (key: string, kg: number) => overlay.entry(key, kg) as unknown as TimerHome,
    endBatch: () => {
      q.clearChanges();
      txn.reset();
    },
  };
}

describe('TimerQueue', () => {
  it.each([
    [false, 'its own'],
    [true, 'its own'],
    [false, 'state entries'],
    [true, 'state entries'],
  ])('behaves like a time-ordered set with a committed copy (property; reusing deleted nodes: %s; homes: %s)', (reuse, homes) => {
    fc.assert(
      fc.property(fc.uniqueArray(timerArb, { selector: (t) => `${t.time}|${t.key}|${t.ns}`, maxLength: 6 }), fc.array(opArb, { maxLength: 80 }), (initial, ops) => {
        const onEntries = homes === 'state entries' ? queueOnEntries(reuse) : undefined;
        const q = onEntries?.q ?? new TimerQueue(undefined, reuse);
        const endBatch = onEntries?.endBatch ?? (() => q.clearChanges());
        // What the backend was handed as added and not deleted since: reuse must never change it.
        const stored = new Map<string, TimerEntry>();
        const live = new Map<string, TimerEntry>();
        let committed = new Set<string>();
        for (const t of initial) {
          const e = entry(t.time, t.key, t.ns);
          q.load(e);
          live.set(id(e), e);
          committed.add(id(e));
        }
        for (const o of ops) {
          if (o.op === 'register') {
            const e = entry(o.t.time, o.t.key, o.t.ns);
            // registerAt: as a context does, also right after a poll of the same key (its timers are not looked up again).
            if (o.at) q.registerAt(e.time, e.key, e.kg, e.ns, o.hint ? onEntries?.hint(e.key, e.kg) : undefined);
            else q.register(e);
            if (!live.has(id(e))) live.set(id(e), e);
          } else if (o.op === 'delete') {
            const e = entry(o.t.time, o.t.key, o.t.ns);
            q.delete(e);
            live.delete(id(e));
          } else if (o.op === 'poll') {
            // Due: the earliest time's; of those, the queue picks the key (queue order, not
            // modelled), and then the key's least namespace.
            const due = [...live.values()].filter((t) => t.time <= o.upTo);
            const time = Math.min(...due.map((t) => t.time));
            const got = q.pollUpTo(o.upTo);
            if (due.length === 0) expect(got).toBeUndefined();
            else {
              expect(got && live.has(id(got))).toBe(true);
              expect(got!.time).toBe(time);
              const nss = due.filter((t) => t.time === time && t.key === got!.key).map((t) => t.ns);
              expect(got!.ns).toBe(nss.sort()[0]);
              live.delete(id(got!));
            }
          } else {
            const added = new Set([...q.added].map(id));
            const deleted = new Set([...q.deleted].map(id));
            // A timer both deleted and added: one object deleted, another of the same timer added
            // (a key's one deleted timer gives its place to a new one: stores that file timers by
            // object only). The commit applies deletes first. Stores by content (DynamoDB) never see it.
            const both = new Set([...added].filter((k) => deleted.has(k)));
            if (!reuse) expect(both.size).toBe(0);
            for (const k of both) expect(live.has(k) && committed.has(k)).toBe(true);
            expect(new Set([...added].filter((k) => !both.has(k)))).toEqual(new Set([...live.keys()].filter((k) => !committed.has(k))));
            expect(new Set([...deleted].filter((k) => !both.has(k)))).toEqual(new Set([...committed].filter((k) => !live.has(k))));
            // The counts a commit sizes its lists by, kept as the queue changes.
            const counts = { adds: 0, deletes: 0 };
            q.countChanges(counts);
            expect(counts).toEqual({ adds: q.added.length, deletes: q.deleted.length });
            for (const t of q.deleted) stored.delete(id(t));
            for (const t of q.added) stored.set(id(t), t);
            if (initial.length === 0) expect(new Set(stored.keys())).toEqual(new Set(live.keys()));
            endBatch();
            committed = new Set(live.keys());
          }
          expect(q.size).toBe(live.size);
          for (const [k, t] of stored) expect(id(t)).toBe(k);
          const min = Math.min(...[...live.values()].map((t) => t.time));
          expect(q.peekTime()).toBe(min);
          expect(new Set(q.liveUpTo(Infinity).map(id))).toEqual(new Set(live.keys()));
          // Found by key too (snapshots take a changed key's timers so): a key's home is never lost while it files timers.
          for (const key of KEYS) expect(new Set(q.liveOf(key).map(id))).toEqual(new Set([...live.values()].filter((t) => t.key === key).map(id)));
        }
      }),
      { seed: 31337, numRuns: 400 },
    );
  });

  it.each([true, false])('a key whose one timer fired files the next in its place (reusing deleted nodes: %s); registered again, the fired one comes back', (reuse) => {
    const q = new TimerQueue(undefined, reuse);
    q.register(entry(10, 'k', ''));
    q.clearChanges();
    expect(q.pollUpTo(10)?.time).toBe(10);
    q.register(entry(20, 'k', '')); // a window's next end
    q.register(entry(10, 'k', '')); // and the fired one again
    expect(q.liveOf('k').map((t) => t.time).sort()).toEqual([10, 20]);
    const ids = (ts: TimerEntry[]) => ts.map((t) => t.time).sort();
    // By object, the store deletes the fired node and adds a new one of the same timer; by
    // content (DynamoDB: one operation per item and transaction) the registration revives it.
    expect(ids(q.added)).toEqual(reuse ? [10, 20] : [20]);
    expect(ids(q.deleted)).toEqual(reuse ? [10] : []);
    q.clearChanges();
    expect(q.pollUpTo(30)?.time).toBe(10);
    expect(q.pollUpTo(30)?.time).toBe(20);
    expect(q.pollUpTo(30)).toBeUndefined();
  });

  it('fires thousands of timers of one time in the order they were queued, ones registered while firing included', () => {
    const q = new TimerQueue();
    const keys = Array.from({ length: 1000 }, (_, i) => `k${(i * 7919) % 1000}`);
    for (const k of keys) q.register(entry(5, k, ''));
    const fired: string[] = [];
    for (let t = q.pollUpTo(5); t; t = q.pollUpTo(5)) {
      fired.push(t.key);
      // Registered at the time being fired: queued after the rest, fired in this pass.
      if (t.key === keys[500]) q.register(entry(5, 'late', ''));
      if (t.key === keys[600]) q.register(entry(5, keys[0], '')); // fired already: again, last
    }
    expect(fired).toEqual([...keys, 'late', keys[0]]);
    expect(q.size).toBe(0);
  });

  it.each([false, true])('fires one key\'s timers of one time in namespace order, whatever their queue order (recovered: %s)', (recovered) => {
    const q = new TimerQueue(undefined, true);
    const add = (t: TimerEntry) => (recovered ? q.load(t) : q.register(t));
    add(entry(5, 'a', 'w2'));
    add(entry(5, 'b', ''));
    add(entry(5, 'a', 'w1'));
    add(entry(4, 'a', 'w3'));
    add(entry(5, 'a', 'w0'));
    q.clearChanges();
    const fired: string[] = [];
    for (let t = q.pollUpTo(5); t; t = q.pollUpTo(5)) {
      fired.push(id(t));
      if (id(t) === '5|a|w1') q.register(entry(5, 'a', 'v')); // less than w2, queued last
    }
    // Key a comes first (its first timer of 5 was queued first), its timers by namespace.
    expect(fired).toEqual(['4|a|w3', '5|a|w0', '5|a|w1', '5|a|v', '5|a|w2', '5|b|']);
    expect(q.size).toBe(0);
    expect(new Set(q.deleted.map(id))).toEqual(new Set(['4|a|w3', '5|a|w0', '5|b|', '5|a|w1', '5|a|w2']));
  });

  it('hands the backend entries with exactly the TimerEntry fields (JSON and spreads leave the bookkeeping out)', () => {
    const q = new TimerQueue({ node: 3, domain: 'processing', entityOf: (key) => `op\u0001${key}` });
    q.registerAt(10, 'k', 5, 'ns');
    q.registerAt(10, 'k', 5, 'ns'); // again: a no-op
    const [added] = q.added;
    expect(q.added).toHaveLength(1);
    expect(JSON.parse(JSON.stringify(added))).toEqual({ node: 3, domain: 'processing', time: 10, kg: 5, key: 'k', ns: 'ns' });
    expect({ ...added }).toEqual({ node: 3, domain: 'processing', time: 10, kg: 5, key: 'k', ns: 'ns' });
    expect(Object.keys(added)).toEqual(['node', 'domain', 'time', 'kg', 'key', 'ns']);
  });

  it('reports each key whose timers changed once per call, with its entity', () => {
    const q = new TimerQueue({ node: 0, domain: 'event', entityOf: (key) => `op\u0001${key}` });
    q.registerAt(1, 'a', 2, '');
    q.registerAt(2, 'a', 2, '');
    q.registerAt(1, 'b', 3, '');
    q.deleteAt(1, 'b', ''); // added and deleted in one batch: no change
    const out: { entity: string; kg: number }[] = [];
    q.changedEntities(out);
    expect(ek(out)).toEqual([{ entity: 'op\u0001a', kg: 2 }]);
    q.clearChanges();
    const none: { entity: string; kg: number }[] = [];
    q.changedEntities(none);
    expect(none).toEqual([]);
    expect(q.pollUpTo(1)?.key).toBe('a');
    q.changedEntities(none);
    expect(ek(none)).toEqual([{ entity: 'op\u0001a', kg: 2 }]);
    expect(q.deleted.map((t) => t.time)).toEqual([1]);
  });

  it('collects a commit\'s adds, deletes and changed entities in one pass, each entity once per interval', () => {
    const q = new TimerQueue({ node: 0, domain: 'event', entityOf: (key) => `op\u0001${key}` });
    q.registerAt(1, 'a', 2, '');
    q.registerAt(2, 'a', 2, '');
    q.registerAt(1, 'b', 3, '');
    q.clearChanges();
    expect(q.pollUpTo(1)?.key).toBe('a');
    q.registerAt(5, 'c', 4, '');
    const counts = { adds: 0, deletes: 0 };
    q.countChanges(counts);
    expect(counts).toEqual({ adds: 1, deletes: 1 });
    const lists = { adds: new Array<TimerEntry>(1), deletes: new Array<TimerEntry>(1), added: 0, deleted: 0 };
    const entities: { entity: string; kg: number }[] = [];
    q.collect(lists, entities, 7);
    expect(lists.adds.map(id)).toEqual(['5|c|']);
    expect(lists.deletes.map(id)).toEqual(['1|a|']);
    expect([lists.added, lists.deleted]).toEqual([1, 1]);
    expect(ek(entities)).toEqual([
      { entity: 'op\u0001a', kg: 2 },
      { entity: 'op\u0001c', kg: 4 },
    ]);
    q.clearChanges();
    // The same interval: a key reported already is left out; without entities, none are stamped.
    expect(q.pollUpTo(1)?.key).toBe('b');
    q.deleteAt(2, 'a', '');
    const later: { entity: string; kg: number }[] = [];
    q.collect({ adds: [], deletes: [], added: 0, deleted: 0 }, undefined, 7);
    q.collect({ adds: [], deletes: [], added: 0, deleted: 0 }, later, 7);
    expect(ek(later)).toEqual([{ entity: 'op\u0001b', kg: 3 }]);
  });
});

describe('TimerQueue reusing deleted nodes', () => {
  it('reuses the object of a timer whose delete was committed, never one the backend may still hold', () => {
    const q = new TimerQueue({ node: 0, domain: 'event', entityOf: (key) => key }, true);
    q.registerAt(1, 'a', 0, '');
    q.registerAt(1, 'b', 0, '');
    const [a, b] = q.added;
    q.clearChanges();
    // a fires: its delete is pending, so its object is still the backend's.
    expect(q.pollUpTo(1)).toBe(a);
    q.registerAt(3, 'a', 0, '');
    const [a3] = q.added;
    expect(a3).not.toBe(a);
    expect(q.deleted).toEqual([a]);
    q.clearChanges();
    // Committed: a's object is free, and the next new timer takes it, with its own fields.
    q.registerAt(5, 'c', 7, 'x');
    const [c] = q.added;
    expect(c).toBe(a);
    expect({ ...c }).toEqual({ node: 0, domain: 'event', time: 5, kg: 7, key: 'c', ns: 'x' });
    // The live ones were never touched.
    expect({ ...b }).toEqual({ node: 0, domain: 'event', time: 1, kg: 0, key: 'b', ns: '' });
    expect({ ...a3 }).toEqual({ node: 0, domain: 'event', time: 3, kg: 0, key: 'a', ns: '' });
  });

  it('does not reuse without the backend saying it forgets deleted entries', () => {
    const q = new TimerQueue({ node: 0, domain: 'event', entityOf: (key) => key });
    q.registerAt(1, 'a', 0, '');
    const [a] = q.added;
    q.clearChanges();
    q.pollUpTo(1);
    q.clearChanges();
    q.registerAt(2, 'b', 0, '');
    expect(q.added[0]).not.toBe(a);
    expect(a.time).toBe(1);
  });
});
