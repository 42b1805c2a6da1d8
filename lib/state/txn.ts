/**
 * The per-batch view of keyed state: reads fall through to the backend's committed
 * values, writes stay in an overlay until the batch commits. Values read are copied,
 * so a change counts only when written back (as with DynamoDB or RocksDB), and a
 * crash before the commit leaves committed state untouched.
 *
 * Hot path: an operator switches keys once per record. The overlay is kept per operator
 * and found by the key's string form, so no entity string (`${operator}\u0001${key}`) is
 * built per switch: it is built once, when a key's entry is created in a batch. Most
 * operators keep one field per key (window panes: `P`), so an entry holds its first
 * field inline and needs a map only for further ones. The operator context keeps the
 * current key's entry, so its reads and writes skip every lookup.
 */
import type { EntityChanges, PartitionScope, StateBackend, StateCell, StateWrite } from './backend.ts';

/** An absent value in the overlay (read as absent, or deleted in this batch). */
const DELETED: unique symbol = Symbol('deleted');

/** Copies JSON-like values (state must be JSON-serialisable to live in DynamoDB). */
export function cloneValue<T>(v: T): T {
  if (v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) {
    // Window state is mostly flat arrays of numbers: copy in one go, then deepen where needed.
    const out = v.slice();
    for (let i = 0; i < out.length; i++) {
      const x = out[i];
      if (x !== null && typeof x === 'object') out[i] = cloneValue(x);
    }
    return out as T;
  }
  const out: Record<string, unknown> = {};
  for (const k in v) out[k] = cloneValue((v as Record<string, unknown>)[k]);
  return out as T;
}

export function entityId(operator: string, keyString: string): string {
  return `${operator}\u0001${keyString}`;
}

/**
 * One key of one operator. Entries live as long as the operator's overlay keeps them
 * (see OperatorOverlay), so a key's entity string is built and hashed once, not per
 * batch; what a batch read or wrote is cleared when the batch ends (`batch` says which
 * batch touched it last). Its first field is inline (`f0`, `v0`); further fields go to `more`.
 * With an in-memory store the entry keeps the store's cell of the entity across batches
 * (StateBackend.cellOf), and the commit applies the entry's writes to it directly.
 */
export class EntityEntry implements EntityChanges {
  /** The batch that touched this entry last (-1: none). */
  batch = -1;
  /** The entity's committed fields: the store's cell, kept while attached, or this batch's view (null: not looked up). */
  private committed: StateCell | null = null;
  private f0: string | undefined = undefined;
  private v0: unknown = undefined;
  private dirty0 = false;
  private more: Map<string, unknown> | undefined = undefined;
  private dirtyMore: Set<string> | undefined = undefined;

  constructor(
    private readonly txn: StateTxn,
    readonly kg: number,
    readonly entity: string,
  ) {}

  private peek(): ReadonlyMap<string, unknown> | undefined {
    // Nothing commits during a batch, so one look-up per entity serves all its fields.
    let c = this.committed;
    if (c === null) c = this.committed = this.txn.cellOf(this.kg, this.entity);
    return c.fields;
  }

  /** The entity's cell (EntityChanges): looked up now if this batch has not read the entity. */
  get cell(): StateCell {
    let c = this.committed;
    if (c === null) c = this.committed = this.txn.cellOf(this.kg, this.entity);
    return c;
  }

  get(field: string): unknown {
    if (field === this.f0) {
      const v = this.v0;
      return v === DELETED ? undefined : v;
    }
    if (this.f0 === undefined) {
      const copy = cloneValue(this.peek()?.get(field));
      this.f0 = field;
      this.v0 = copy === undefined ? DELETED : copy;
      return copy;
    }
    let more = this.more;
    if (more === undefined) more = this.more = new Map();
    // The overlay never holds undefined (absent is DELETED): one lookup answers.
    const v = more.get(field);
    if (v !== undefined) return v === DELETED ? undefined : v;
    const copy = cloneValue(this.peek()?.get(field));
    more.set(field, copy === undefined ? DELETED : copy);
    return copy;
  }

  set(field: string, value: unknown): void {
    const v = value === undefined ? DELETED : value;
    if (field === this.f0 || this.f0 === undefined) {
      this.f0 = field;
      this.v0 = v;
      this.dirty0 = true;
    } else {
      (this.more ??= new Map()).set(field, v);
      (this.dirtyMore ??= new Set()).add(field);
    }
  }

  /** Has this batch a value (or a deletion) for the field? */
  private has(field: string): boolean {
    return field === this.f0 || (this.more !== undefined && this.more.has(field));
  }

  /** Written in this batch? */
  get written(): boolean {
    return this.dirty0 || this.dirtyMore !== undefined;
  }

  /** Every live field whose name starts with prefix (committed merged with the overlay), sorted by name. */
  fields(prefix: string): [string, unknown][] {
    const out = new Map<string, unknown>();
    const committed = this.peek();
    if (committed) {
      for (const [f, v] of committed) if (f.startsWith(prefix) && !this.has(f)) out.set(f, cloneValue(v));
    }
    if (this.f0 !== undefined && this.v0 !== DELETED && this.f0.startsWith(prefix)) out.set(this.f0, this.v0);
    if (this.more) for (const [f, v] of this.more) if (f.startsWith(prefix) && v !== DELETED) out.set(f, v);
    return [...out].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  }

  /** @internal Append this entry's dirty fields, with their final values. */
  writesTo(out: StateWrite[]): void {
    if (this.dirty0) out.push({ kg: this.kg, entity: this.entity, field: this.f0!, value: this.v0 === DELETED ? undefined : this.v0 });
    if (this.dirtyMore) {
      for (const field of this.dirtyMore) {
        const v = this.more!.get(field);
        out.push({ kg: this.kg, entity: this.entity, field, value: v === DELETED ? undefined : v });
      }
    }
  }

  /**
   * Apply this batch's writes to `fields` (EntityChanges). Returns whether any field is left;
   * when none is, `fields` may be left as it was.
   */
  applyTo(fields: Map<string, unknown>): boolean {
    const f0 = this.f0!;
    if (this.dirty0) {
      const v = this.v0;
      if (v !== DELETED) fields.set(f0, v);
      // Deleting a map's only entry makes V8 shrink its table (an allocation); the map is dropped instead.
      else if (this.dirtyMore === undefined && fields.size === 1 && fields.has(f0)) return false;
      else fields.delete(f0);
    }
    if (this.dirtyMore !== undefined) {
      for (const field of this.dirtyMore) {
        const v = this.more!.get(field);
        if (v === DELETED) fields.delete(field);
        else fields.set(field, v);
      }
    }
    return fields.size > 0;
  }

  /**
   * @internal First use in a batch: an attached cell still answers (commits update it in
   * place); a detached one (a view of a past batch, or a cell the store dropped) is looked up again.
   */
  begin(batch: number): void {
    this.batch = batch;
    const c = this.committed;
    if (c !== null && !c.attached) this.committed = null;
  }

  /**
   * @internal The batch is over: drop what it read and wrote (no copy of state outlives its
   * batch), and a detached cell (a remote store's view is not kept past its batch).
   */
  clear(): void {
    const c = this.committed;
    if (c !== null && !c.attached) this.committed = null;
    this.f0 = undefined;
    this.v0 = undefined;
    this.dirty0 = false;
    this.more = undefined;
    this.dirtyMore = undefined;
  }
}

/** Keys an operator's overlay remembers across batches before it starts over (bounds memory). */
const MAX_REMEMBERED_KEYS = 1 << 16;

/** One operator's entries, by key string. */
export class OperatorOverlay {
  /** The current batch (StateTxn.reset starts a new one). */
  batch = 0;
  private entries = new Map<string, EntityEntry>();

  constructor(
    private readonly txn: StateTxn,
    readonly operator: string,
  ) {}

  /** The key's entry, touched by this batch (created on first use: the only place its entity string is built). */
  entry(keyString: string, kg: number): EntityEntry {
    let e = this.entries.get(keyString);
    if (e === undefined) {
      e = new EntityEntry(this.txn, kg, entityId(this.operator, keyString));
      this.entries.set(keyString, e);
    }
    if (e.batch !== this.batch) {
      e.begin(this.batch);
      this.txn.touch(e);
    }
    return e;
  }

  /** The key's entity string (the remembered one when there is one: its hash is already computed). */
  entityOf(keyString: string): string {
    return this.entries.get(keyString)?.entity ?? entityId(this.operator, keyString);
  }

  /** @internal */
  reset(batch: number): void {
    this.batch = batch;
    // Between batches no entry is in use: a full map starts over rather than grow with every key ever seen.
    if (this.entries.size > MAX_REMEMBERED_KEYS) this.entries = new Map();
  }
}

/** A batch's state writes, as the commit carries them (CommitBatch.writes and .entities). */
export interface StateChanges {
  readonly writes: readonly StateWrite[];
  /** Stores with cellOf: the written entities (undefined: none, or a store without cellOf). */
  readonly entities: readonly EntityChanges[] | undefined;
}

const NO_WRITES: readonly StateWrite[] = [];

export class StateTxn {
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

  constructor(
    private readonly backend: StateBackend,
    private readonly scope: PartitionScope,
  ) {
    this.cells = backend.cellOf !== undefined;
  }

  /** An operator's overlay: long-lived (one per operator and partition), its entries per batch. */
  overlay(operator: string): OperatorOverlay {
    let o = this.overlays.get(operator);
    if (o === undefined) {
      o = new OperatorOverlay(this, operator);
      o.batch = this.batch;
      this.overlays.set(operator, o);
    }
    return o;
  }

  /** @internal The entity's committed fields: the store's cell, or a view for this batch. */
  cellOf(kg: number, entity: string): StateCell {
    if (this.cells) return this.backend.cellOf!(this.scope, kg, entity);
    return { fields: this.backend.peek(this.scope, kg, entity), attached: false };
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
    return this.entryOf(kg, entity).get(field);
  }

  set(kg: number, entity: string, field: string, value: unknown): void {
    this.entryOf(kg, entity).set(field, value);
  }

  delete(kg: number, entity: string, field: string): void {
    this.entryOf(kg, entity).set(field, undefined);
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
    for (const o of this.overlays.values()) o.reset(this.batch);
    for (let i = 0; i < this.touchedCount; i++) this.touched[i].clear();
    this.touchedCount = 0;
    // Past the overlays' bound, start over rather than keep entries they have forgotten.
    if (this.touched.length > MAX_REMEMBERED_KEYS) this.touched.length = 0;
  }
}
