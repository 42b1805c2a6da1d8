/**
 * The per-batch view of keyed state: reads fall through to the backend's committed
 * values, writes stay in an overlay until the batch commits. Values read are copied,
 * so a change counts only when written back (as with DynamoDB or RocksDB), and a
 * crash before the commit leaves committed state untouched; appends to a list copy it
 * once per batch, shallowly (see EntityEntry).
 *
 * Hot path: an operator switches keys once per record. The overlay is kept per operator
 * and found by the key's string form, so no entity string (`${operator}\u0001${key}`) is
 * built per switch: it is built once, when a key's entry is created. Most operators keep
 * one or two fields per key (window panes: `P`; a join: a window's two sides), so an
 * entry holds two fields inline and needs a map only for further ones. The operator
 * context keeps the current key's entry, so its reads and writes skip every lookup.
 */
import type { EntityChanges, PartitionScope, StateBackend, StateCell, StateWrite } from './backend.ts';
import { type CellSource, EntityEntry, entityId } from './entry.ts';
import type { Cell } from './memory-cells.ts';

export { cloneValue, EntityEntry, entityId } from './entry.ts';

/** A remote store's committed fields of one entity, for one batch. */
class PeekedCell implements StateCell {
  readonly attached = false;
  constructor(private readonly fields: ReadonlyMap<string, unknown> | undefined) {}
  get(field: string): unknown {
    return this.fields === undefined ? undefined : this.fields.get(field);
  }
  forEach(fn: (value: unknown, field: string) => void): void {
    if (this.fields !== undefined) for (const [f, v] of this.fields) fn(v, f);
  }
}

/** Keys an operator's overlay remembers across batches before it sweeps (bounds memory). */
const MAX_REMEMBERED_KEYS = 1 << 16;

/** Forgotten entries an overlay keeps for new keys (a batch's new keys take about as many as it forgets). */
const SPARE_ENTRIES = 4096;

/**
 * The overlay's map key of a key: a number key as the number (its string form is 'n' + the
 * number, api/types.ts keyToString), anything else as its string form. A map by number
 * hashes and compares without reading a string: the set, look-ups and delete of each key
 * were about a tenth of Nexmark Q5's profile by key string. `key`: the key itself, when
 * the caller has it (a record's context), which spares parsing the string.
 */
function mapKeyOf(keyString: string, key?: unknown): number | string {
  if (typeof key === 'number') return key;
  return keyString.charCodeAt(0) === 110 /* n */ ? Number(keyString.slice(1)) : keyString;
}

/** One operator's entries, by key (mapKeyOf). */
export class OperatorOverlay {
  /** The current batch (StateTxn.reset starts a new one). */
  batch = 0;
  private entries = new Map<number | string, EntityEntry>();
  /**
   * Every entity of this operator with fields in the store has an entry here (see
   * StateTxn.knowsAll): a new entry's entity is absent, no look-up needed. Lost for good
   * when the sweep forgets live keys.
   */
  private complete: boolean;
  /** Entries past which reset() sweeps (maxKeys, or more while entries that file timers fill the map). */
  private sweepAt: number;
  /**
   * Forgotten entries, reused for new keys: a window's keys come and go by the thousand, and an
   * entry lives long enough (its key's windows) to be copied by the young-generation GC, which
   * a reused one (already in the old generation) is not.
   */
  private readonly spare: EntityEntry[] = [];

  constructor(
    private readonly txn: StateTxn,
    readonly operator: string,
    private readonly maxKeys: number,
    complete: boolean,
  ) {
    this.complete = complete;
    this.sweepAt = maxKeys;
  }

  /**
   * The key's entry, touched by this batch (created on first use: the only place its entity
   * string is built). `key`: the key itself when the caller has it (see mapKeyOf).
   */
  entry(keyString: string, kg: number, key?: unknown): EntityEntry {
    const mk = mapKeyOf(keyString, key);
    let e = this.entries.get(mk);
    if (e === undefined) {
      e = this.newEntry(keyString, kg, mk);
      this.resume(e);
      if (this.complete && (this.complete = this.txn.knowsAll())) e.absent(this.txn.freshCell(kg, e.entity, e));
      return e;
    }
    return e.batch === this.batch ? e : this.resume(e);
  }

  /** A live entry of this overlay first used in this batch (entry(), or a caller that held on to it: NodeContext): begun and touched. */
  resume(e: EntityEntry): EntityEntry {
    e.begin(this.batch);
    this.txn.touch(e);
    return e;
  }

  /** The key's entity string (the remembered one when there is one: its hash is already computed). */
  entityOf(keyString: string): string {
    return this.entries.get(mapKeyOf(keyString))?.entity ?? entityId(this.operator, keyString);
  }

  /** @internal A key whose entity has no committed fields left (StateTxn.reset, stores with cells); the entry is cleared. */
  forget(entry: EntityEntry): void {
    this.entries.delete(mapKeyOf(entry.key, entry.keyValue));
    entry.live = false;
    // Whoever still holds it (a context, a timer's hint) checks `live` and the key: see renew.
    if (this.spare.length < SPARE_ENTRIES) this.spare.push(entry);
  }

  /** Keys remembered (tests). */
  get size(): number {
    return this.entries.size;
  }

  /** @internal */
  reset(batch: number): void {
    this.batch = batch;
    // Between batches no entry is in use. Past the bound, drop the entries that keep no cell
    // (their entities have no fields: short-lived keys such as a window join's persons), so
    // the live keys keep theirs; a key that comes back makes a new entry. Kept until then, a
    // key whose state dies and comes back soon (a window's auction) reuses its entry. When
    // mostly live keys fill the map, start over (each sweep frees at least half the bound).
    // Entries that file timers (the runtime's homes of them) are kept either way: they are
    // the keys' timers until those go. If they alone fill the map, the bound grows with them
    // (a sweep per batch would cost a pass over every key).
    if (this.entries.size > this.sweepAt) {
      for (const [k, e] of this.entries) {
        if (!e.keepsCell && !e.holdsTimers) {
          this.entries.delete(k);
          e.live = false;
        }
      }
      if (this.entries.size > this.maxKeys >> 1) {
        const kept = new Map<number | string, EntityEntry>();
        for (const [k, e] of this.entries) {
          if (e.holdsTimers) kept.set(k, e);
          else e.live = false;
        }
        this.entries = kept;
        this.complete = false;
      }
      this.sweepAt = Math.max(this.maxKeys, 2 * this.entries.size);
    }
  }

  /**
   * @internal The key's entry as the home of its timers (runtime/timer-nodes.ts TimerHome),
   * made if `create` and absent; not touched by the batch (its first state use begins it).
   */
  timerHome(keyString: string, kg: number, create: boolean): EntityEntry | undefined {
    const mk = mapKeyOf(keyString);
    let e = this.entries.get(mk);
    if (e === undefined && create) e = this.newEntry(keyString, kg, mk);
    return e;
  }

  /** A key's entry, remembered by key: a spare one renewed, or a new one. */
  private newEntry(keyString: string, kg: number, mk: number | string): EntityEntry {
    const entity = entityId(this.operator, keyString);
    const spare = this.spare.pop();
    const e = spare !== undefined ? spare.renew(kg, entity, keyString) : new EntityEntry(this.txn, kg, entity, keyString, this);
    this.entries.set(mk, e);
    return e;
  }
}

/** A batch's state writes, as the commit carries them (CommitBatch.writes and .entities). */
export interface StateChanges {
  readonly writes: readonly StateWrite[];
  /** Stores with cellOf: the written entities (undefined: none, or a store without cellOf). */
  readonly entities: readonly EntityChanges[] | undefined;
}

const NO_WRITES: readonly StateWrite[] = [];

export class StateTxn implements CellSource {
  private readonly overlays = new Map<string, OperatorOverlay>();
  /**
   * Entries touched in this batch, in the order of their first use: the first `touchedCount`.
   * The array is reused (`length = 0` would free its storage, and every batch grow it again).
   */
  private readonly touched: EntityEntry[] = [];
  private touchedCount = 0;
  private batch = 0;

  /** The store keeps entities in cells (StateBackend.cellOf): entries keep them across batches, commits take entities. */
  readonly cells: boolean;
  /**
   * The stage had no entity with fields when this txn began (StateBackend.hasCells), and no
   * change since came other than through entries (StateBackend.untrackedChanges): every entity of the partition with fields was made through
   * this txn's overlays, so an overlay that has no entry for a key knows it is absent.
   */
  private complete: boolean;
  private readonly changesAtStart: number;

  constructor(
    private readonly backend: StateBackend,
    private readonly scope: PartitionScope,
    /** Keys an operator's overlay remembers across batches before it sweeps (tests set it low). */
    private readonly maxKeys = MAX_REMEMBERED_KEYS,
  ) {
    this.cells = backend.cellOf !== undefined;
    this.changesAtStart = backend.untrackedChanges ?? 0;
    this.complete = this.cells && backend.freshCell !== undefined && backend.hasCells !== undefined && !backend.hasCells(scope);
  }

  /** @internal Does every entity of the partition with fields have an entry (see `complete`)? */
  knowsAll(): boolean {
    if (this.complete && this.backend.untrackedChanges !== this.changesAtStart) this.complete = false;
    return this.complete;
  }

  /** @internal A cell for an entity known to be absent (knowsAll). */
  freshCell(kg: number, entity: string, reuse: EntityEntry): StateCell {
    return this.backend.freshCell!(this.scope, kg, entity, reuse);
  }

  /** An operator's overlay: long-lived (one per operator and partition), its entries per batch. */
  overlay(operator: string): OperatorOverlay {
    let o = this.overlays.get(operator);
    if (o === undefined) {
      // No entry of the operator exists yet, so none of its entities has fields if the txn knows all.
      o = new OperatorOverlay(this, operator, this.maxKeys, this.knowsAll());
      o.batch = this.batch;
      this.overlays.set(operator, o);
    }
    return o;
  }

  /** @internal The entity's committed fields: the store's cell, or a view for this batch. */
  cellOf(kg: number, entity: string, reuse: Cell): StateCell {
    if (this.cells) return this.backend.cellOf!(this.scope, kg, entity, reuse);
    return new PeekedCell(this.backend.peek(this.scope, kg, entity));
  }

  /** @internal */
  touch(e: EntityEntry): void {
    this.touched[this.touchedCount++] = e;
  }

  // By entity string (snapshots, tests): the operator is the part before the first U+0001.

  private entryOf(kg: number, entity: string): EntityEntry {
    const i = entity.indexOf('\u0001');
    if (i < 0) throw new RangeError(`entity "${entity}": expected "<operator>\\u0001<key>"`);
    return this.overlay(entity.slice(0, i)).entry(entity.slice(i + 1), kg);
  }

  get(kg: number, entity: string, field: string): unknown {
    return this.entryOf(kg, entity).read(field);
  }

  set(kg: number, entity: string, field: string, value: unknown): void {
    this.entryOf(kg, entity).write(field, value);
  }

  delete(kg: number, entity: string, field: string): void {
    this.entryOf(kg, entity).write(field, undefined);
  }

  /** Every live field of an entity whose name starts with prefix (committed merged with the overlay). */
  fields(kg: number, entity: string, prefix: string): [string, unknown][] {
    return this.entryOf(kg, entity).fields(prefix);
  }

  /** The writes to commit: every dirty field once, with its final value. */
  writes(): StateWrite[] {
    const out: StateWrite[] = [];
    for (let i = 0; i < this.touchedCount; i++) this.touched[i].writesTo(out);
    return out;
  }

  /** The writes to commit, in the form the store takes (per entity for stores with cellOf). */
  changes(): StateChanges {
    if (!this.cells) return { writes: this.writes(), entities: undefined };
    let entities: EntityEntry[] | undefined;
    for (let i = 0; i < this.touchedCount; i++) {
      const e = this.touched[i];
      if (e.written) (entities ??= []).push(e);
    }
    return { writes: NO_WRITES, entities };
  }

  /** Entities touched (read or written) in this batch. */
  touchedEntities(): number {
    return this.touchedCount;
  }

  /** Forget the batch's overlay (after its commit, or to abandon it). */
  reset(): void {
    this.batch++;
    // Entries first: an overlay's sweep asks which of them keep a cell. With a store of cells,
    // an entry whose entity has no fields left (a window's key after its firing, a join's
    // person) is forgotten now: remembering it would save only its entity string if the key
    // came back, while every remembered key makes the overlay's map larger, so each look-up
    // costs more cache misses (a join's map held every key ever seen, most of them dead).
    const forget = this.cells;
    for (let i = 0; i < this.touchedCount; i++) {
      const e = this.touched[i];
      e.clear();
      if (forget && !e.keepsCell && !e.holdsTimers) e.owner.forget(e);
    }
    for (const o of this.overlays.values()) o.reset(this.batch);
    this.touchedCount = 0;
    // Past the overlays' bound, start over rather than keep entries they have forgotten.
    if (this.touched.length > this.maxKeys) this.touched.length = 0;
  }
}
