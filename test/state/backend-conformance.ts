/**
 * The StateBackend contract, run against every implementation (in-memory, DynamoDB):
 * what the partition runtime relies on, so a job behaves the same on both.
 */
import { describe, expect, it } from 'vitest';
import { CommitConflictError } from '../../lib/errors.ts';
import { type CommitBatch, emptyProgress, type PartitionProgress, type PartitionScope, type StateBackend, type StateWrite, type TimerEntry, type TrackedInterval } from '../../lib/state/backend.ts';
import type { OutboxEntry } from '../../lib/transport/envelope.ts';

export interface BackendStore {
  /**
   * A backend over the store's durable data. Backends that cache return a fresh
   * instance (what a new process would see); in-memory ones return the same one.
   */
  open(): StateBackend;
  /**
   * Make a partition's committed state readable by the other partitions of its stage,
   * as before moving key groups (rescaling). A backend that keeps recent changes per
   * partition (the DynamoDB state log) writes them out here; others need nothing.
   */
  settle?(backend: StateBackend, scope: PartitionScope): Promise<void>;
}

let jobs = 0;
/** A scope no other test touches (the DynamoDB suite shares one table). */
export function freshScope(partition = 0, stage = 1): PartitionScope {
  return { job: `conf-${process.pid}-${++jobs}-${Math.random().toString(36).slice(2, 8)}`, stage, partition };
}

export function batch(scope: PartitionScope, expectedVersion: number, parts: Partial<Omit<CommitBatch, 'scope' | 'expectedVersion'>> = {}): CommitBatch {
  return { scope, expectedVersion, writes: [], timerAdds: [], timerDeletes: [], progress: emptyProgress(), outbox: [], ...parts };
}

/** The committed fields of an entity as a plain object (undefined: none), read as the runtime reads. */
export async function read(backend: StateBackend, scope: PartitionScope, kg: number, entity: string): Promise<Record<string, unknown> | undefined> {
  if (backend.needsPrefetch) await backend.prefetch(scope, [{ kg, entity }]);
  const fields = backend.peek(scope, kg, entity);
  return fields ? Object.fromEntries(fields) : undefined;
}

function timer(key: string, time: number, ns = ''): TimerEntry {
  return { node: 2, domain: 'event', time, kg: 7, key, ns };
}

function sortTimers(ts: readonly TimerEntry[]): TimerEntry[] {
  return [...ts].sort((a, b) => a.time - b.time || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

function sinkEntry(seq: number, records: unknown[]): OutboxEntry {
  return { kind: 'sink', delivery: { sink: 'out', producer: '1:0', seq, records } };
}

const progress: PartitionProgress = {
  inputs: { '0:0': { seq: 3, watermark: Number.NEGATIVE_INFINITY, idle: false }, '0:1': { seq: 9, watermark: 1_700_000_000_123, idle: true } },
  outputs: { '1>0': 2, 'sink:out': 1 },
  outputWatermark: Number.NEGATIVE_INFINITY,
  outputIdle: false,
};

/** Tracked intervals as plain data (entities sorted). */
function intervals(ts: readonly TrackedInterval[] | undefined): { after: number; entities: Record<string, number> }[] {
  return (ts ?? []).map((t) => ({ after: t.after, entities: Object.fromEntries([...t.entities].sort(([a], [b]) => (a < b ? -1 : 1))) }));
}

export function backendConformance(name: string, makeStore: () => BackendStore | Promise<BackendStore>): void {
  describe(`StateBackend conformance: ${name}`, () => {
    it('a fresh partition recovers at version 0 with nothing', async () => {
      const b = (await makeStore()).open();
      const scope = freshScope();
      const rec = await b.recover(scope);
      expect(rec).toEqual({ version: 0, progress: emptyProgress(), timers: [], outbox: [] });
      expect(await read(b, scope, 3, 'op\u0001sk')).toBeUndefined();
    });

    it('round-trips state, progress, timers and outbox exactly, in this view and a fresh one', async () => {
      const store = await makeStore();
      const b = store.open();
      const scope = freshScope();
      await b.recover(scope);
      const values: Record<string, unknown> = {
        count: 42,
        neg0: -0,
        inf: Number.NEGATIVE_INFINITY,
        nan: Number.NaN,
        text: 'h\u00e9llo \u{1f600} \u0000 \u0001 \u0002',
        nested: { a: [1, 'two', null, { b: true }], empty: {}, list: [], tagLike: { '\u0000': 'u' } },
        'map\u0002"k\u0001ey"': { v: 1, x: 99 },
      };
      const writes: StateWrite[] = Object.entries(values).map(([field, value]) => ({ kg: 3, entity: 'op\u0001sk\u0001y', field, value }));
      const timers = [timer('sk1', 100), timer('sk2', 50, 'w:0-100'), { ...timer('n5', 7), domain: 'processing' as const }];
      const outbox: OutboxEntry[] = [
        { kind: 'channel', envelope: { channel: '1:0', edge: 1, toPartition: 0, seq: 2, records: [{ value: { id: 1 }, timestamp: 5, key: ['a', 1] }], watermark: Number.NEGATIVE_INFINITY, idle: undefined } },
        sinkEntry(1, [{ total: 3 }, 'x']),
      ];
      await b.commit(batch(scope, 0, { writes, timerAdds: timers, progress, outbox }));

      expect(await read(b, scope, 3, 'op\u0001sk\u0001y')).toEqual(values);
      const rec = await b.recover(scope);
      expect(rec.version).toBe(1);
      expect(rec.progress).toEqual(progress);
      expect(sortTimers(rec.timers)).toEqual(sortTimers(timers));
      expect(rec.outbox).toEqual(outbox);

      const fresh = store.open();
      const again = await fresh.recover(scope);
      expect(again).toEqual(rec);
      expect(await read(fresh, scope, 3, 'op\u0001sk\u0001y')).toEqual(values);
    });

    it('fences on the version: a stale or early commit throws CommitConflictError and changes nothing', async () => {
      const store = await makeStore();
      const b = store.open();
      const scope = freshScope();
      await b.recover(scope);
      await b.commit(batch(scope, 0, { writes: [{ kg: 1, entity: 'e', field: 'f', value: 'first' }], progress }));
      const stale = batch(scope, 0, {
        writes: [
          { kg: 1, entity: 'e', field: 'f', value: 'stale' },
          { kg: 1, entity: 'e2', field: 'g', value: 'stale' },
        ],
        timerAdds: [timer('k', 1)],
        outbox: [sinkEntry(9, ['stale'])],
      });
      await expect(b.commit(stale)).rejects.toBeInstanceOf(CommitConflictError);
      await expect(b.commit({ ...stale, expectedVersion: 2 })).rejects.toThrow(/stored version is 1/);
      const fresh = store.open();
      const rec = await fresh.recover(scope);
      expect(rec).toEqual({ version: 1, progress, timers: [], outbox: [] });
      expect(await read(fresh, scope, 1, 'e')).toEqual({ f: 'first' });
      expect(await read(fresh, scope, 1, 'e2')).toBeUndefined();
      // The conflict did not poison the writer's own view either.
      expect(await read(b, scope, 1, 'e')).toEqual({ f: 'first' });
    });

    it('deletes fields, an entity disappears with its last field, the last write of a field wins', async () => {
      const store = await makeStore();
      const b = store.open();
      const scope = freshScope();
      await b.recover(scope);
      await b.commit(batch(scope, 0, { writes: ['a', 'b', 'c'].map((field) => ({ kg: 2, entity: 'e', field, value: field })) }));
      expect(await read(b, scope, 2, 'e')).toEqual({ a: 'a', b: 'b', c: 'c' });
      await b.commit(
        batch(scope, 1, {
          writes: [
            { kg: 2, entity: 'e', field: 'a', value: undefined },
            { kg: 2, entity: 'e', field: 'b', value: 'b1' },
            { kg: 2, entity: 'e', field: 'b', value: 'b2' },
            { kg: 2, entity: 'never', field: 'x', value: undefined },
          ],
        }),
      );
      expect(await read(b, scope, 2, 'e')).toEqual({ b: 'b2', c: 'c' });
      expect(await read(store.open(), scope, 2, 'e')).toEqual({ b: 'b2', c: 'c' });
      await b.commit(batch(scope, 2, { writes: ['b', 'c'].map((field) => ({ kg: 2, entity: 'e', field, value: undefined })) }));
      expect(await read(b, scope, 2, 'e')).toBeUndefined();
      expect(await read(store.open(), scope, 2, 'e')).toBeUndefined();
    });

    it('keeps entities apart even when one name is a prefix of another', async () => {
      const store = await makeStore();
      const b = store.open();
      const scope = freshScope();
      await b.recover(scope);
      const names = ['op\u0001sa', 'op\u0001sab', 'op\u0001sa\u0001', 'op\u0001sa\u0002', 'op', 'op\u0002\u0003sa'];
      await b.commit(batch(scope, 0, { writes: names.map((entity, i) => ({ kg: 5, entity, field: 'v', value: i })) }));
      const fresh = store.open();
      for (const [i, entity] of names.entries()) {
        expect(await read(fresh, scope, 5, entity)).toEqual({ v: i });
        expect(await read(fresh, scope, 6, entity)).toBeUndefined();
      }
    });

    it('stores state per stage: other partitions of the stage see it, other stages and jobs do not', async () => {
      const store = await makeStore();
      const b = store.open();
      const p0 = freshScope(0);
      await b.recover(p0);
      await b.commit(batch(p0, 0, { writes: [{ kg: 9, entity: 'e', field: 'f', value: 1 }] }));
      await store.settle?.(b, p0);
      const p1 = { ...p0, partition: 1 };
      const fresh = store.open();
      expect((await fresh.recover(p1)).version).toBe(0);
      expect(await read(fresh, p1, 9, 'e')).toEqual({ f: 1 });
      expect(await read(fresh, { ...p0, stage: 2 }, 9, 'e')).toBeUndefined();
      expect(await read(fresh, { ...p0, job: p0.job + 'x' }, 9, 'e')).toBeUndefined();
    });

    it('adds and deletes timers; a delete and an add of the same timer in one batch leaves it', async () => {
      const store = await makeStore();
      const b = store.open();
      const scope = freshScope();
      await b.recover(scope);
      const [t1, t2, t3] = [timer('a', 10), timer('b', 20), timer('a', 30, 'ns')];
      await b.commit(batch(scope, 0, { timerAdds: [t1, t2, t3] }));
      await b.commit(batch(scope, 1, { timerDeletes: [t1, t3, timer('zz', 1)], timerAdds: [t3] }));
      const rec = await store.open().recover(scope);
      expect(sortTimers(rec.timers)).toEqual([t2, t3]);
    });

    it('keeps the outbox of each version until clearOutbox covers it', async () => {
      const store = await makeStore();
      const b = store.open();
      const scope = freshScope();
      await b.recover(scope);
      await b.commit(batch(scope, 0, { outbox: [sinkEntry(1, ['a']), sinkEntry(2, ['b'])] }));
      await b.commit(batch(scope, 1, { writes: [{ kg: 0, entity: 'e', field: 'f', value: 1 }] }));
      await b.commit(batch(scope, 2, { outbox: [sinkEntry(3, ['c'])] }));
      expect((await store.open().recover(scope)).outbox).toEqual([sinkEntry(1, ['a']), sinkEntry(2, ['b']), sinkEntry(3, ['c'])]);
      await b.clearOutbox(scope, 2);
      expect((await store.open().recover(scope)).outbox).toEqual([sinkEntry(3, ['c'])]);
      await b.clearOutbox(scope, 3);
      const rec = await store.open().recover(scope);
      expect(rec.outbox).toEqual([]);
      expect(rec.version).toBe(3);
    });

    it('commits a 250-write batch atomically: all of it, and a stale one not at all', async () => {
      const store = await makeStore();
      const b = store.open();
      const scope = freshScope();
      await b.recover(scope);
      const entity = (i: number) => `op\u0001s${i % 50}`;
      const writes = (tag: string): StateWrite[] => Array.from({ length: 250 }, (_, i) => ({ kg: (i % 50) % 7, entity: entity(i), field: `f${i}`, value: { tag, i } }));
      const timers = Array.from({ length: 20 }, (_, i) => timer(`k${i}`, i));
      const outbox = [sinkEntry(1, Array.from({ length: 100 }, (_, i) => ({ i })))];
      await b.commit(batch(scope, 0, { writes: writes('one'), timerAdds: timers, progress, outbox }));
      await expect(b.commit(batch(scope, 0, { writes: writes('stale'), outbox: [sinkEntry(2, ['stale'])] }))).rejects.toBeInstanceOf(CommitConflictError);

      const fresh = store.open();
      const rec = await fresh.recover(scope);
      expect(rec.version).toBe(1);
      expect(rec.progress).toEqual(progress);
      expect(sortTimers(rec.timers)).toEqual(sortTimers(timers));
      expect(rec.outbox).toEqual(outbox);
      const seen: Record<string, unknown> = {};
      for (let e = 0; e < 50; e++) Object.assign(seen, await read(fresh, scope, e % 7, entity(e)));
      expect(Object.keys(seen)).toHaveLength(250);
      for (let i = 0; i < 250; i++) expect(seen[`f${i}`]).toEqual({ tag: 'one', i });

      // And 250 deletes, also in one commit.
      await b.commit(batch(scope, 1, { writes: writes('x').map((w) => ({ ...w, value: undefined })) }));
      const after = store.open();
      for (let e = 0; e < 50; e++) expect(await read(after, scope, e % 7, entity(e))).toBeUndefined();
      expect((await after.recover(scope)).version).toBe(2);
    });
    it('tracks changed entities per barrier interval, durably and atomically with the commit', async () => {
      const store = await makeStore();
      const b = store.open();
      if (!b.tracksChanges) return;
      const scope = freshScope();
      await b.recover(scope);
      const w = (entity: string, value: unknown, kg = 4): StateWrite => ({ kg, entity, field: 'f', value });
      // Interval after 0: written entities (deletes too) and entities whose timers changed.
      await b.commit(batch(scope, 0, { writes: [w('op\u0001a', 1), w('op\u0001b', 2)], tracking: { entities: [{ entity: 'op\u0001t', kg: 9 }] } }));
      await b.commit(batch(scope, 1, { writes: [w('op\u0001a', 3), w('op\u0001gone', undefined)], tracking: { entities: [] } }));
      expect(intervals(b.tracked!(scope))).toEqual([{ after: 0, entities: { 'op\u0001a': 4, 'op\u0001b': 4, 'op\u0001gone': 4, 'op\u0001t': 9 } }]);
      // The barrier's commit: its writes precede the barrier, then a new interval starts.
      await b.commit(batch(scope, 2, { writes: [w('op\u0001c', 1)], progress: { ...progress, lastBarrier: 1 }, tracking: { entities: [], next: { after: 1, dropBefore: 0 } } }));
      await b.commit(batch(scope, 3, { writes: [w('op\u0001a', 5)], progress: { ...progress, lastBarrier: 1 }, tracking: { entities: [] } }));
      const two = [
        { after: 0, entities: { 'op\u0001a': 4, 'op\u0001b': 4, 'op\u0001c': 4, 'op\u0001gone': 4, 'op\u0001t': 9 } },
        { after: 1, entities: { 'op\u0001a': 4 } },
      ];
      expect(intervals(b.tracked!(scope))).toEqual(two);
      const fresh = store.open();
      expect(intervals((await fresh.recover(scope)).tracking)).toEqual(two);
      expect(intervals(fresh.tracked!(scope))).toEqual(two);

      // A stale commit changes nothing, tracking included.
      await expect(fresh.commit(batch(scope, 1, { writes: [w('op\u0001stale', 1)], tracking: { entities: [] } }))).rejects.toBeInstanceOf(CommitConflictError);
      expect(intervals((await store.open().recover(scope)).tracking)).toEqual(two);

      // Barrier 2 with base 1 (checkpoint 1 completed): intervals before 1 are forgotten.
      await b.recover(scope);
      await b.commit(batch(scope, 4, { progress: { ...progress, lastBarrier: 2 }, tracking: { entities: [{ entity: 'op\u0001t', kg: 9 }], next: { after: 2, dropBefore: 1 } } }));
      const after2 = [
        { after: 1, entities: { 'op\u0001a': 4, 'op\u0001t': 9 } },
        { after: 2, entities: {} },
      ];
      expect(intervals(b.tracked!(scope))).toEqual(after2);
      expect(intervals((await store.open().recover(scope)).tracking)).toEqual(after2);
    });

    it('lists every committed entity of some key groups with its fields (full snapshots)', async () => {
      const store = await makeStore();
      const b = store.open();
      if (!b.entitiesOf) return;
      const scope = freshScope();
      await b.recover(scope);
      const names = ['op\u0001a', 'op\u0001a\u0001b', 'op\u0001\u0002x', 'op\u0001' + 'L'.repeat(2000)];
      await b.commit(batch(scope, 0, { writes: [...names.map((entity, i) => ({ kg: 1 + (i % 2), entity, field: `f${i}`, value: i })), { kg: 3, entity: 'op\u0001other', field: 'f', value: 0 }, { kg: 1, entity: 'op\u0001a', field: 'm\u0002"k"', value: { x: 1 } }] }));
      await b.commit(batch(scope, 1, { writes: [{ kg: 2, entity: names[1], field: 'f1', value: undefined }] }));
      const seen: Record<string, unknown> = {};
      for await (const e of store.open().entitiesOf!(scope, [1, 2])) seen[`${e.kg}/${e.entity}`] = Object.fromEntries(e.fields);
      expect(seen).toEqual({
        [`1/${names[0]}`]: { f0: 0, 'm\u0002"k"': { x: 1 } },
        [`1/${names[2]}`]: { f2: 2 },
        [`2/${names[3]}`]: { f3: 3 },
      });
    });
  });
}
