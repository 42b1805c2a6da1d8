/**
 * StateTxn, the per-batch overlay, against a plain model: reads see committed values
 * merged with the batch's writes, values read are copies (a change counts only when
 * written back), nothing reaches the backend before the commit, an abandoned batch
 * leaves committed state as it was, and the commit carries every dirty field once.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { keyToString } from '../../lib/api/types.ts';
import { emptyProgress, type PartitionScope, type StateBackend } from '../../lib/state/backend.ts';
import { InMemoryStateBackend } from '../../lib/state/memory.ts';
import { cloneValue, entityId, StateTxn } from '../../lib/state/txn.ts';

const scope: PartitionScope = { job: 'txn', stage: 0, partition: 0 };
const OPERATORS = ['op', 'other'];
const KEYS = ['a', 'b', 'n1'];
const FIELDS = ['P', 'x', 'm\u0002"k"'];
const kgOf = (key: string) => key.charCodeAt(0) % 4;

type Model = Map<string, Map<string, unknown>>;

/**
 * `live`: the store keeps entities in cells (StateBackend.cellOf) that entries keep across
 * batches, else a view per batch. `byEntity`: commits carry the writes per entity
 * (CommitBatch.entities, as the runtime commits to such a store), else field by field.
 */
function open(live = true, byEntity = false, maxKeys?: number) {
  const backend = new InMemoryStateBackend();
  const view: StateBackend = live
    ? backend
    : {
        needsPrefetch: false,
        recover: (s) => backend.recover(s),
        prefetch: async () => {},
        peek: (s, kg, e) => {
          const f = backend.peek(s, kg, e);
          return f && new Map(f);
        },
        commit: (b) => backend.commit(b),
        clearOutbox: (s, v) => backend.clearOutbox(s, v),
      };
  const txn = new StateTxn(view, scope, maxKeys);
  let version = 0;
  const commit = () => {
    const { writes, entities } = byEntity ? txn.changes() : { writes: txn.writes(), entities: undefined };
    backend.commitSync({ scope, expectedVersion: version++, writes, ...(entities ? { entities } : {}), timerAdds: [], timerDeletes: [], progress: emptyProgress(), outbox: [] });
    txn.reset();
  };
  const committed = (): Model => {
    const out: Model = new Map();
    for (const op of OPERATORS) {
      for (const key of KEYS) {
        const e = entityId(op, key);
        const f = backend.peek(scope, kgOf(key), e);
        if (f && f.size) out.set(e, new Map([...f].map(([k, v]) => [k, structuredClone(v)])));
      }
    }
    return out;
  };
  return { backend, txn, commit, committed };
}

const value = fc.oneof(fc.integer({ min: 0, max: 9 }), fc.array(fc.integer({ min: 0, max: 9 }), { maxLength: 4 }), fc.record({ n: fc.integer({ min: 0, max: 9 }) }));
/** Operations on the given entities and fields. */
function opsOver(operators: readonly string[], keys: readonly string[], fields: readonly string[], v: fc.Arbitrary<unknown> = value) {
  const target = fc.record({ op: fc.constantFrom(...operators), key: fc.constantFrom(...keys), field: fc.constantFrom(...fields) });
  return fc.oneof(
    fc.record({ kind: fc.constant('get' as const), t: target, mutate: fc.boolean() }),
    fc.record({ kind: fc.constant('set' as const), t: target, v }),
    fc.record({ kind: fc.constant('delete' as const), t: target }),
    fc.record({ kind: fc.constant('append' as const), t: target, v }),
    fc.record({ kind: fc.constant('fields' as const), t: target, prefix: fc.constantFrom('', 'm\u0002', 'P') }),
    fc.record({ kind: fc.constant('commit' as const) }),
    fc.record({ kind: fc.constant('abandon' as const) }),
  );
}
const opArb = opsOver(OPERATORS, KEYS, FIELDS);
/** Few entities and fields: entities often lose their last field and come back (cells detached and attached again). */
const narrowOpArb = opsOver(['op'], ['a', 'b'], ['P', 'x']);
/** Lists of objects appended across batches: appends share the committed list's elements until the list is handed out. */
const listOpArb = opsOver(['op'], ['a'], ['L', 'x'], fc.oneof(fc.record({ n: fc.integer({ min: 0, max: 9 }) }), fc.array(fc.record({ n: fc.integer({ min: 0, max: 9 }) }), { maxLength: 2 })));

/** Change a value read, without writing it back (its elements too: a list's elements may be shared with committed state). */
function scribble(v: unknown): void {
  if (Array.isArray(v)) {
    for (const x of v) scribble(x);
    v.push(99);
  } else if (v !== null && typeof v === 'object') (v as { n: number }).n = 99;
}

describe('StateTxn', () => {
  it.each([
    ['cells kept across batches, commits by entity (in-memory store)', true, true, opArb],
    ['cells kept across batches, commits field by field', true, false, opArb],
    ['a view per batch (remote stores)', false, false, opArb],
    ['few entities, cells, commits by entity', true, true, narrowOpArb],
    ['few entities, cells, commits field by field', true, false, narrowOpArb],
    ['lists of objects, cells, commits by entity', true, true, listOpArb],
    ['lists of objects, a view per batch', false, false, listOpArb],
  ])('behaves like committed maps plus a batch overlay, %s (property)', (_name, live, byEntity, arb) => {
    fc.assert(
      fc.property(fc.array(arb, { maxLength: 60 }), (ops) => {
        const { txn, commit, committed } = open(live, byEntity);
        const model: Model = new Map();
        /** The batch's view of each field it touched: the copy read or the value written, and whether it is dirty. */
        const view = new Map<string, { e: string; f: string; v: unknown; dirty: boolean }>();
        for (const o of ops) {
          if (o.kind === 'commit') {
            for (const { e, f, v, dirty } of view.values()) {
              if (!dirty) continue;
              const m = model.get(e) ?? new Map<string, unknown>();
              if (v === undefined) m.delete(f);
              else m.set(f, structuredClone(v));
              if (m.size) model.set(e, m);
              else model.delete(e);
            }
            view.clear();
            commit();
          } else if (o.kind === 'abandon') {
            view.clear();
            txn.reset();
          } else {
            const { op, key, field } = o.t;
            const e = entityId(op, key);
            const id = `${e}|${field}`;
            const entry = txn.overlay(op).entry(key, kgOf(key));
            if (o.kind === 'get') {
              if (!view.has(id)) view.set(id, { e, f: field, v: structuredClone(model.get(e)?.get(field)), dirty: false });
              const got = entry.read(field);
              expect(got).toEqual(view.get(id)!.v);
              // A copy: changing it changes neither committed state nor, unless written back, the commit.
              if (o.mutate) {
                scribble(got);
                scribble(view.get(id)!.v);
              }
            } else if (o.kind === 'set') {
              entry.write(field, structuredClone(o.v));
              view.set(id, { e, f: field, v: structuredClone(o.v), dirty: true });
            } else if (o.kind === 'delete') {
              entry.write(field, undefined);
              view.set(id, { e, f: field, v: undefined, dirty: true });
            } else if (o.kind === 'append') {
              const cur = view.has(id) ? view.get(id)!.v : model.get(e)?.get(field);
              if (cur !== undefined && !Array.isArray(cur)) {
                // Only lists take appends: a clear error, and the field as it was.
                expect(() => entry.append(field, structuredClone(o.v))).toThrow(/append expects a list/);
              } else {
                const next = [...((structuredClone(cur) as unknown[] | undefined) ?? []), structuredClone(o.v)];
                expect(entry.append(field, structuredClone(o.v))).toBe(next.length);
                view.set(id, { e, f: field, v: next, dirty: true });
              }
            } else {
              const want = new Map<string, unknown>();
              for (const [f, v] of model.get(e) ?? []) want.set(f, v);
              for (const x of view.values()) if (x.e === e) want.set(x.f, x.v);
              const live = [...want].filter(([f, v]) => f.startsWith(o.prefix) && v !== undefined).sort((a, b) => (a[0] < b[0] ? -1 : 1));
              expect(entry.fields(o.prefix)).toEqual(live);
            }
          }
          // Nothing reaches the backend before the commit.
          expect(committed()).toEqual(model);
          // The write set: every field written in the batch once, with its final value.
          const writes = txn.writes().map((w) => [`${w.entity}|${w.field}`, w.value] as const);
          expect(new Set(writes.map(([k]) => k)).size).toBe(writes.length);
          expect(new Map(writes)).toEqual(new Map([...view].filter(([, x]) => x.dirty).map(([k, x]) => [k, x.v])));
        }
      }),
      { seed: 4242, numRuns: 300 },
    );
  });

  it('reads are copies: a changed value counts only when written back', () => {
    const { txn, commit, committed } = open();
    const e = txn.overlay('op').entry('a', kgOf('a'));
    e.write('P', [1, 2]);
    commit();
    const read = txn.overlay('op').entry('a', kgOf('a')).read('P') as number[];
    read.push(3);
    expect(txn.writes()).toEqual([]);
    commit();
    expect(committed().get(entityId('op', 'a'))?.get('P')).toEqual([1, 2]);
    const again = txn.overlay('op').entry('a', kgOf('a'));
    const v = again.read('P') as number[];
    v.push(3);
    again.write('P', v);
    commit();
    expect(committed().get(entityId('op', 'a'))?.get('P')).toEqual([1, 2, 3]);
  });

  it('an abandoned batch leaves committed state and the next batch clean', () => {
    const { txn, commit, committed } = open();
    txn.overlay('op').entry('a', kgOf('a')).write('P', 1);
    txn.overlay('op').entry('a', kgOf('a')).write('x', { n: 1 });
    commit();
    const before = committed();
    const e = txn.overlay('op').entry('a', kgOf('a'));
    e.write('P', 2);
    e.write('x', undefined);
    txn.overlay('other').entry('b', kgOf('b')).write('P', 5);
    txn.reset();
    expect(committed()).toEqual(before);
    expect(txn.writes()).toEqual([]);
    const next = txn.overlay('op').entry('a', kgOf('a'));
    expect(next.read('P')).toBe(1);
    expect(next.read('x')).toEqual({ n: 1 });
    expect(txn.overlay('other').entry('b', kgOf('b')).read('P')).toBeUndefined();
  });

  it('finds entries by entity string as by (operator, key), and keeps a key entry across batches', () => {
    // Commits by entity, as the runtime commits to a store with cells: the entry's cell is the one attached.
    const { txn, commit } = open(true, true);
    const e1 = txn.overlay('op').entry('n1', kgOf('n1'));
    e1.write('P', 7);
    expect(txn.get(kgOf('n1'), entityId('op', 'n1'), 'P')).toBe(7);
    expect(txn.fields(kgOf('n1'), entityId('op', 'n1'), '')).toEqual([['P', 7]]);
    commit();
    const e2 = txn.overlay('op').entry('n1', kgOf('n1'));
    expect(e2).toBe(e1);
    expect(e2.entity).toBe(entityId('op', 'n1'));
    expect(txn.overlay('op').entityOf('n1')).toBe(e1.entity);
    expect(e2.read('P')).toBe(7);
  });

  it('append never changes committed state before the commit, and shares no element a caller can change (abandon, then re-apply)', () => {
    const { txn, commit, committed } = open();
    const entry = () => txn.overlay('op').entry('a', kgOf('a'));
    expect(entry().append('L', { n: 1 })).toBe(1);
    commit();
    const run = () => {
      expect(entry().append('L', { n: 2 })).toBe(2);
      expect(entry().append('L', { n: 3 })).toBe(3);
      // Handed out in the batch that appended: a deep copy, whose changes reach nothing.
      const got = entry().read('L') as { n: number }[];
      expect(got).toEqual([{ n: 1 }, { n: 2 }, { n: 3 }]);
      got[0].n = 99;
      // The caller's list is its own: a later append makes a new one.
      expect(entry().append('L', { n: 4 })).toBe(4);
      expect(got).toHaveLength(3);
      expect(committed().get(entityId('op', 'a'))?.get('L')).toEqual([{ n: 1 }]);
    };
    run();
    // A failed batch is abandoned and re-applied: it sees committed state as it was.
    txn.reset();
    expect(committed().get(entityId('op', 'a'))?.get('L')).toEqual([{ n: 1 }]);
    run();
    commit();
    expect(committed().get(entityId('op', 'a'))?.get('L')).toEqual([{ n: 99 }, { n: 2 }, { n: 3 }, { n: 4 }]);
  });

  it("a list that only appends made grows in place: each commit extends the store's one array; an abandoned batch leaves it as it was", () => {
    // Cells, commits by entity: the runtime's way with the in-memory store.
    const { backend, txn, commit } = open(true, true);
    const entry = () => txn.overlay('op').entry('a', kgOf('a'));
    const stored = () => backend.peek(scope, kgOf('a'), entityId('op', 'a'))!.get('L') as number[];
    expect(entry().append('L', 1)).toBe(1);
    commit();
    const list = stored();
    const want = [1];
    for (let i = 2; i <= 50; i++) {
      // Some batches append twice: the second goes on the same tail.
      for (const v of i % 7 === 0 ? [i, -i] : [i]) {
        want.push(v);
        expect(entry().append('L', v)).toBe(want.length);
      }
      // Nothing reaches the store before the commit.
      expect(stored()).toHaveLength(want.length - (i % 7 === 0 ? 2 : 1));
      commit();
      expect(stored()).toBe(list);
      expect(stored()).toEqual(want);
    }
    // Looked at in the batch (peek): the whole list, which the commit then stores as it is.
    want.push(51);
    entry().append('L', 51);
    expect(entry().peek('L')).toEqual(want);
    commit();
    expect(stored()).toEqual(want);
    // Abandoned: the store's array as it was.
    entry().append('L', 100);
    expect(entry().peek('L')).toEqual([...want, 100]);
    txn.reset();
    expect(stored()).toEqual(want);
    // Read in the batch that appended: a copy; the list written back is the caller's from then on.
    entry().append('L', 101);
    const got = entry().read('L') as number[];
    expect(got).toEqual([...want, 101]);
    commit();
    expect(stored()).toEqual([...want, 101]);
    entry().append('L', 102);
    commit();
    expect(got).toEqual([...want, 101]);
    expect(stored()).toEqual([...want, 101, 102]);
  });

  it('never extends in place a list a caller holds: one handed out by the batch that made it, or one written', () => {
    const { txn, commit, committed } = open(true, true);
    const entry = () => txn.overlay('op').entry('a', kgOf('a'));
    entry().append('L', 1);
    const handed = entry().read('L') as number[];
    const mine = [1];
    entry().write('M', mine);
    commit();
    expect(entry().append('L', 2)).toBe(2);
    expect(entry().append('M', 2)).toBe(2);
    commit();
    expect(handed).toEqual([1]);
    expect(mine).toEqual([1]);
    expect(committed().get(entityId('op', 'a'))).toEqual(
      new Map<string, unknown>([
        ['L', [1, 2]],
        ['M', [1, 2]],
      ]),
    );
  });

  it('append to a field that holds no list is refused with the field and what it holds', () => {
    const { txn } = open();
    const entry = txn.overlay('op').entry('a', kgOf('a'));
    entry.write('P', 5);
    expect(() => entry.append('P', 1)).toThrow('state field "P" of "op\\u0001a": append expects a list, found number');
    expect(entry.read('P')).toBe(5);
  });

  it("with a store of cells, an overlay forgets a key once its state is gone, and keeps live keys' entries", () => {
    const { txn, commit, committed } = open(true, true);
    const overlay = txn.overlay('op');
    const entry = (k: string) => overlay.entry(k, kgOf(k));
    const a = entry('a');
    const b = entry('b');
    a.append('l', 1);
    b.write('P', 1);
    commit();
    expect(entry('a')).toBe(a);
    entry('a').write('l', undefined);
    // Keys only read (absent) keep no entry either.
    expect(entry('c').read('P')).toBeUndefined();
    commit();
    expect(overlay.size).toBe(1);
    expect(entry('b')).toBe(b);
    const a2 = entry('a');
    expect(a2).not.toBe(a);
    expect(a2.read('l')).toBeUndefined();
    expect(a2.append('l', 2)).toBe(1);
    commit();
    expect(committed().get(entityId('op', 'a'))?.get('l')).toEqual([2]);
    // A batch that is abandoned forgets nothing it should keep: its writes never happened.
    entry('a').write('l', undefined);
    txn.reset();
    expect(entry('a')).toBe(a2);
    expect(entry('a').read('l')).toEqual([2]);
  });

  it("an entry held across batches is live while its overlay keeps it; resumed, it reads as the key's looked-up entry would", () => {
    const { txn, commit, committed } = open(true, true);
    const overlay = txn.overlay('op');
    const entry = (k: string) => overlay.entry(k, kgOf(k));
    const a = entry('a');
    a.write('P', 1);
    commit();
    // Held (a context, a timer's hint) into the next batch: no look-up, the same entry and value.
    expect(a.live).toBe(true);
    expect(overlay.resume(a).read('P')).toBe(1);
    expect(entry('a')).toBe(a);
    a.write('P', 2);
    commit();
    expect(committed().get(entityId('op', 'a'))?.get('P')).toBe(2);
    overlay.resume(a).write('P', undefined);
    commit();
    // Its state gone, the overlay forgot it: a holder must look the key up again.
    expect(a.live).toBe(false);
    const a2 = entry('a');
    expect(a2.live).toBe(true);
    expect(a2.key).toBe('a');
    expect(a2.read('P')).toBeUndefined();
  });

  it('reuses a forgotten entry for a new key: renewed, it names the new key and reads and commits only its state', () => {
    const { txn, commit, committed } = open(true, true);
    const overlay = txn.overlay('op');
    const entry = (k: string) => overlay.entry(k, kgOf(k));
    entry('b').write('P', 'b');
    const a = entry('a');
    a.write('P', 1);
    commit();
    overlay.resume(a).write('P', undefined);
    commit();
    expect(a.live).toBe(false);
    // The next new key takes the spare entry: the same object, now the key's.
    const n1 = entry('n1');
    expect(n1).toBe(a);
    expect([n1.live, n1.key, n1.entity, n1.kg]).toEqual([true, 'n1', entityId('op', 'n1'), kgOf('n1')]);
    expect(n1.read('P')).toBeUndefined();
    n1.write('P', 3);
    commit();
    expect(committed().get(entityId('op', 'n1'))?.get('P')).toBe(3);
    expect(committed().has(entityId('op', 'a'))).toBe(false);
    expect(committed().get(entityId('op', 'b'))?.get('P')).toBe('b');
    // The old key comes back: a new entry, not the one 'n1' now holds.
    const a2 = entry('a');
    expect(a2).not.toBe(n1);
    expect(a2.read('P')).toBeUndefined();
    expect(entry('n1').read('P')).toBe(3);
  });

  it("finds a number key's entry by the number or by its string form, and a string key by its string form", () => {
    const { txn, commit } = open(true, true);
    const overlay = txn.overlay('op');
    const byNumber = overlay.entry(keyToString(42), kgOf(keyToString(42)), 42);
    byNumber.write('P', 1);
    expect(overlay.entry('n42', kgOf('n42'))).toBe(byNumber);
    expect(overlay.timerHome('n42', kgOf('n42'), false)).toBe(byNumber);
    // The string '42' is another key.
    const byString = overlay.entry(keyToString('42'), kgOf(keyToString('42')), '42');
    expect(byString).not.toBe(byNumber);
    expect(byString.read('P')).toBeUndefined();
    commit();
    expect(overlay.entry('n42', kgOf('n42')).read('P')).toBe(1);
    overlay.entry('n42', kgOf('n42')).write('P', undefined);
    commit();
    // Forgotten with its last field, under either form.
    expect(overlay.timerHome('n42', kgOf('n42'), false)).toBeUndefined();
    expect(overlay.size).toBe(0);
  });

  it('a txn begun on a stage without state takes new keys as absent until state appears other than through it (install, a commit field by field)', () => {
    const { backend, txn, commit } = open(true, true);
    const entry = (k: string) => txn.overlay('op').entry(k, kgOf(k));
    entry('a').write('P', 1);
    commit();
    expect(entry('b').read('P')).toBeUndefined();
    commit();
    // Installed under the txn: a key it never saw now has state, and it reads it.
    backend.install(scope, { progress: emptyProgress(), timers: [], entities: [{ kg: kgOf('n1'), entity: entityId('op', 'n1'), fields: new Map([['P', 7]]) }] }, [kgOf('n1')]);
    expect(entry('n1').read('P')).toBe(7);
    // A new txn over a stage with state looks keys up.
    const second = new StateTxn(backend, scope);
    expect(second.overlay('op').entry('n1', kgOf('n1')).read('P')).toBe(7);
    // Field by field: the cell that commit makes is found by a later batch's new entry.
    const third = open(true, false);
    const e3 = (k: string) => third.txn.overlay('op').entry(k, kgOf(k));
    e3('a').write('P', 3);
    third.commit();
    expect(e3('a').read('P')).toBe(3);
  });

  it('past its bound, an overlay drops the entries of keys whose state is gone, and starts over when live keys fill it', () => {
    // A view per batch (a remote store): entries are remembered without cells until the bound.
    const remote = open(false, false, 4);
    const rEntry = (k: string) => remote.txn.overlay('op').entry(k, kgOf(k));
    const ra = rEntry('a');
    ra.write('P', 1);
    remote.commit();
    expect(rEntry('a')).toBe(ra);
    for (const k of ['b', 'c', 'd', 'e']) expect(rEntry(k).read('P')).toBeUndefined();
    remote.commit();
    expect(rEntry('a')).not.toBe(ra);
    expect(rEntry('a').read('P')).toBe(1);
    // A store of cells: mostly live keys past the bound, the overlay starts over (their entries are made again, their state read again).
    const { txn, commit } = open(true, true, 4);
    const entry = (k: string) => txn.overlay('op').entry(k, kgOf(k));
    const b = entry('b');
    b.write('P', 1);
    commit();
    expect(entry('b')).toBe(b);
    for (const k of ['c', 'd', 'e', 'f']) entry(k).write('P', k);
    commit();
    expect(entry('b')).not.toBe(b);
    expect(entry('b').read('P')).toBe(1);
    expect(entry('c').read('P')).toBe('c');
  });

  it('cloneValue copies JSON-like values deeply: equal, and no object shared', () => {
    const json = fc.jsonValue({ maxDepth: 4 });
    fc.assert(
      fc.property(json, (v) => {
        const c = cloneValue(v);
        expect(c).toEqual(v);
        const objects = (x: unknown, out: Set<unknown>): Set<unknown> => {
          if (x !== null && typeof x === 'object') {
            out.add(x);
            for (const y of Object.values(x)) objects(y, out);
          }
          return out;
        };
        const mine = objects(v, new Set());
        for (const o of objects(c, new Set())) expect(mine.has(o)).toBe(false);
      }),
      { seed: 7, numRuns: 300 },
    );
  });
});
