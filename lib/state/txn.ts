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
import { InvariantError } from '../errors.ts';
import type { EntityChanges, PartitionScope, StateBackend, StateCell, StateWrite, WritableFields } from './backend.ts';

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
  // Spread copies the own properties in one step (about twice as fast as assigning them one
  // by one); then only object-valued properties need deepening.
  const out: Record<string, unknown> = { ...(v as Record<string, unknown>) };
  for (const k in out) {
    const x = out[k];
    if (x !== null && typeof x === 'object') out[k] = cloneValue(x);
  }
  return out as T;
}

export function entityId(operator: string, keyString: string): string {
  return `${operator}\u0001${keyString}`;
}

/** Slot flags: written in this batch. */
const DIRTY = 1;
/** The value is a list the overlay made (append): nothing outside holds it, so append pushes in place. */
const OWN = 2;
/** The list's elements are the committed list's (append copied it shallowly): deep-copied before it is handed out. */
const SHARED = 4;

/** A field of the overlay past the two inline slots. */
interface Overflow {
  v: unknown;
  flags: number;
}

/**
 * One key of one operator. Entries live as long as the operator's overlay keeps them
 * (see OperatorOverlay), so a key's entity string is built and hashed once, not per
 * batch; what a batch read or wrote is cleared when the batch ends (`batch` says which
 * batch touched it last). Its first two fields are inline (`f0`, `f1`); further fields
 * go to `more`. With an in-memory store the entry keeps the store's cell of the entity
 * across batches (StateBackend.cellOf), and the commit applies the entry's writes to it directly.
 *
 * Copy discipline: committed values are never changed by the overlay. get() answers a
 * copy the caller may change; append() copies a committed list shallowly (its elements
 * are shared with the committed list, marked SHARED) and deep-copies them only if the
 * list is handed out in the same batch, so an aborted batch leaves committed state as it was.
 */
export class EntityEntry implements EntityChanges {
  /** The batch that touched this entry last (-1: none). */
  batch = -1;
  /** The entity's committed fields: the store's cell, kept while attached, or this batch's view (null: not looked up). */
  private committed: StateCell | null = null;
  private f0: string | undefined = undefined;
  private v0: unknown = undefined;
  private s0 = 0;
  private f1: string | undefined = undefined;
  private v1: unknown = undefined;
  private s1 = 0;
  private more: Map<string, Overflow> | undefined = undefined;
  private anyDirty = false;
  /** find()'s answer: the slot's value and flags (no object per look-up). */
  private hitV: unknown = undefined;
  private hitFlags = 0;

  constructor(
    private readonly txn: StateTxn,
    readonly kg: number,
    readonly entity: string,
  ) {}

  /** A committed field's value (not a copy). */
  private committedValue(field: string): unknown {
    // Nothing commits during a batch, so one look-up per entity serves all its fields.
    let c = this.committed;
    if (c === null) c = this.committed = this.txn.cellOf(this.kg, this.entity);
    return c.get(field);
  }

  /** The entity's cell (EntityChanges): looked up now if this batch has not read the entity. */
  get cell(): StateCell {
    let c = this.committed;
    if (c === null) c = this.committed = this.txn.cellOf(this.kg, this.entity);
    return c;
  }

  /** Has this batch a value (or a deletion) for the field? Sets hitV and hitFlags when it has. */
  private find(field: string): boolean {
    if (field === this.f0) {
      this.hitV = this.v0;
      this.hitFlags = this.s0;
      return true;
    }
    if (field === this.f1) {
      this.hitV = this.v1;
      this.hitFlags = this.s1;
      return true;
    }
    const o = this.more === undefined ? undefined : this.more.get(field);
    if (o === undefined) return false;
    this.hitV = o.v;
    this.hitFlags = o.flags;
    return true;
  }

  /** Store the batch's value of a field (slots fill in order and are freed together, at clear()). */
  private put(field: string, v: unknown, flags: number): void {
    if (field === this.f0 || this.f0 === undefined) {
      this.f0 = field;
      this.v0 = v;
      this.s0 = flags;
    } else if (field === this.f1 || this.f1 === undefined) {
      this.f1 = field;
      this.v1 = v;
      this.s1 = flags;
    } else {
      const more = (this.more ??= new Map());
      const o = more.get(field);
      if (o === undefined) more.set(field, { v, flags });
      else {
        o.v = v;
        o.flags = flags;
      }
    }
    if ((flags & DIRTY) !== 0) this.anyDirty = true;
  }

  /** A value of the overlay about to be handed out: no longer the overlay's own, and deep-copied if shared. */
  private handOut(field: string, v: unknown, flags: number): unknown {
    const out = (flags & SHARED) !== 0 ? cloneValue(v) : v;
    this.put(field, out, flags & DIRTY);
    return out;
  }

  get(field: string): unknown {
    if (this.find(field)) {
      const v = this.hitV;
      if (v === DELETED) return undefined;
      const flags = this.hitFlags;
      return (flags & (OWN | SHARED)) === 0 ? v : this.handOut(field, v, flags);
    }
    const copy = cloneValue(this.committedValue(field));
    this.put(field, copy === undefined ? DELETED : copy, 0);
    return copy;
  }

  set(field: string, value: unknown): void {
    this.put(field, value === undefined ? DELETED : value, DIRTY);
  }

  /**
   * Add `value` at the end of the list in `field` (absent: an empty list), as
   * set(field, [...(get(field) ?? []), value]) would, without copying the list per call:
   * the first append of a batch copies the list shallowly, later ones push to that copy.
   * The value is kept as given (as set keeps it). Returns the list's new length.
   */
  append(field: string, value: unknown): number {
    let base: unknown;
    let shared = false;
    if (this.find(field)) {
      const v = this.hitV;
      if ((this.hitFlags & OWN) !== 0) {
        const own = v as unknown[];
        own.push(value);
        return own.length;
      }
      base = v === DELETED ? undefined : v;
    } else {
      base = this.committedValue(field);
      shared = base !== undefined;
    }
    let list: unknown[];
    if (base === undefined) list = [value];
    else if (Array.isArray(base)) {
      list = base.slice();
      list.push(value);
    } else {
      throw new InvariantError(`state field "${field}" of ${JSON.stringify(this.entity)}: append expects a list, found ${typeof base}`);
    }
    this.put(field, list, DIRTY | OWN | (shared ? SHARED : 0));
    return list.length;
  }

  /** Written in this batch? */
  get written(): boolean {
    return this.anyDirty;
  }

  /** Every live field whose name starts with prefix (committed merged with the overlay), sorted by name. */
  fields(prefix: string): [string, unknown][] {
    const out = new Map<string, unknown>();
    const committed = this.cell;
    committed.forEach((v, f) => {
      if (f.startsWith(prefix) && !this.find(f)) out.set(f, cloneValue(v));
    });
    if (this.f0 !== undefined && this.v0 !== DELETED && this.f0.startsWith(prefix)) out.set(this.f0, this.handOut(this.f0, this.v0, this.s0));
    if (this.f1 !== undefined && this.v1 !== DELETED && this.f1.startsWith(prefix)) out.set(this.f1, this.handOut(this.f1, this.v1, this.s1));
    if (this.more) {
      for (const [f, o] of this.more) if (f.startsWith(prefix) && o.v !== DELETED) out.set(f, this.handOut(f, o.v, o.flags));
    }
    return [...out].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  }

  /** @internal Append this entry's dirty fields, with their final values. */
  writesTo(out: StateWrite[]): void {
    if (!this.anyDirty) return;
    if ((this.s0 & DIRTY) !== 0) out.push({ kg: this.kg, entity: this.entity, field: this.f0!, value: this.v0 === DELETED ? undefined : this.v0 });
    if ((this.s1 & DIRTY) !== 0) out.push({ kg: this.kg, entity: this.entity, field: this.f1!, value: this.v1 === DELETED ? undefined : this.v1 });
    if (this.more !== undefined) {
      for (const [field, o] of this.more) {
        if ((o.flags & DIRTY) !== 0) out.push({ kg: this.kg, entity: this.entity, field, value: o.v === DELETED ? undefined : o.v });
      }
    }
  }

  /** Apply this batch's writes to `fields` (EntityChanges). Returns whether any field is left. */
  applyTo(fields: WritableFields): boolean {
    if ((this.s0 & DIRTY) !== 0) applyField(fields, this.f0!, this.v0);
    if ((this.s1 & DIRTY) !== 0) applyField(fields, this.f1!, this.v1);
    if (this.more !== undefined) {
      for (const [field, o] of this.more) if ((o.flags & DIRTY) !== 0) applyField(fields, field, o.v);
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
    this.s0 = 0;
    this.f1 = undefined;
    this.v1 = undefined;
    this.s1 = 0;
    this.more = undefined;
    this.anyDirty = false;
    this.hitV = undefined;
  }

  /** @internal Between batches: the entry keeps the store's cell of its entity (the entity has fields). */
  get keepsCell(): boolean {
    return this.committed !== null;
  }
}

function applyField(fields: WritableFields, field: string, v: unknown): void {
  if (v === DELETED) fields.delete(field);
  else fields.set(field, v);
}

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

/** One operator's entries, by key string. */
export class OperatorOverlay {
  /** The current batch (StateTxn.reset starts a new one). */
  batch = 0;
  private entries = new Map<string, EntityEntry>();

  constructor(
    private readonly txn: StateTxn,
    readonly operator: string,
    private readonly maxKeys: number,
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
    // Between batches no entry is in use. Past the bound, drop the entries that keep no cell
    // (their entities have no fields: short-lived keys such as a window join's persons), so
    // the live keys keep theirs; a key that comes back makes a new entry. Kept until then, a
    // key whose state dies and comes back soon (a window's auction) reuses its entry. When
    // mostly live keys fill the map, start over (each sweep frees at least half the bound).
    if (this.entries.size > this.maxKeys) {
      for (const [k, e] of this.entries) if (!e.keepsCell) this.entries.delete(k);
      if (this.entries.size > this.maxKeys >> 1) this.entries = new Map();
    }
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
    /** Keys an operator's overlay remembers across batches before it sweeps (tests set it low). */
    private readonly maxKeys = MAX_REMEMBERED_KEYS,
  ) {
    this.cells = backend.cellOf !== undefined;
  }

  /** An operator's overlay: long-lived (one per operator and partition), its entries per batch. */
  overlay(operator: string): OperatorOverlay {
    let o = this.overlays.get(operator);
    if (o === undefined) {
      o = new OperatorOverlay(this, operator, this.maxKeys);
      o.batch = this.batch;
      this.overlays.set(operator, o);
    }
    return o;
  }

  /** @internal The entity's committed fields: the store's cell, or a view for this batch. */
  cellOf(kg: number, entity: string): StateCell {
    if (this.cells) return this.backend.cellOf!(this.scope, kg, entity);
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
    // Entries first: an overlay's sweep asks which of them keep a cell.
    for (let i = 0; i < this.touchedCount; i++) this.touched[i].clear();
    for (const o of this.overlays.values()) o.reset(this.batch);
    this.touchedCount = 0;
    // Past the overlays' bound, start over rather than keep entries they have forgotten.
    if (this.touched.length > this.maxKeys) this.touched.length = 0;
  }
}
