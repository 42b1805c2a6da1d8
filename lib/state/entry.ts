/**
 * One key's view of keyed state in a batch (EntityEntry): its fields read or written in
 * the batch over the entity's committed fields, and the copy discipline that keeps
 * committed state unchanged by an uncommitted batch. StateTxn (txn.ts) keeps the entries.
 */
import { InvariantError } from '../errors.ts';
import type { EntityChanges, StateCell, StateWrite, WritableFields } from './backend.ts';
import { Cell } from './memory-cells.ts';

/** Where an entry finds its entity's committed fields (StateTxn). */
export interface CellSource {
  /** `reuse`: the entry itself, which an in-memory store may take as the entity's new cell (see EntityEntry). */
  cellOf(kg: number, entity: string, reuse: Cell): StateCell;
}

/** What keeps entries by key (OperatorOverlay). */
export interface EntryOwner {
  /** The entry's entity has no fields left: drop it (its `live` turns false). */
  forget(entry: EntityEntry): void;
}

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
/**
 * The value is a tail: what this batch appended to a committed list that is the store's
 * alone (StateCell.extensible). The commit pushes the tail onto that list in place, so a
 * list that grows over many batches (a window's records) is not copied by each of them.
 */
const TAIL = 8;

/** find()'s answer: the slot's value and flags (module state, not fields: nothing runs between a find and its read). */
let hitV: unknown;
let hitFlags = 0;

/** TimerHome.timersReported of a key never reported (a small integer, so the field holds no boxed number). */
const NOT_REPORTED = -0x80000000;

/** A field of the overlay past the two inline slots. */
interface Overflow {
  v: unknown;
  flags: number;
}

/**
 * One key of one operator. Entries live as long as the operator's overlay keeps them
 * (see OperatorOverlay), so a key's entity string is built and hashed once, not per
 * batch; what a batch read or wrote is cleared when the batch ends (`batch` says which
 * batch touched it last). Its first two fields are inline (`bf0`, `bf1`); further fields
 * go to `bmore`. With an in-memory store the entry keeps the store's cell of the entity
 * across batches (StateBackend.cellOf), and the commit applies the entry's writes to it directly.
 *
 * An entry is built on the in-memory store's cell (it extends Cell): for an entity that had
 * no fields, the store takes the entry itself as the entity's cell (StateBackend.freshCell,
 * cellOf with `reuse`), so a key is one object, not an entry and a cell (fewer objects for
 * the young-generation GC to copy, one cache miss per batch instead of two). So the Map-like
 * get/set/forEach it inherits are the cell's: the committed fields, as the store sees them.
 * The batch's view is read()/peek()/write()/append()/fields(). An entry whose entity has a
 * cell already (made by an earlier entry, a restore) uses that one; other stores' entries
 * leave their cell part empty.
 *
 * Copy discipline: committed values are never changed by the overlay. read() answers a
 * copy the caller may change; append() copies a committed list shallowly (its elements
 * are shared with the committed list, marked SHARED) and deep-copies them only if the
 * list is handed out in the same batch, so an aborted batch leaves committed state as it was.
 * A committed list that is the store's alone (StateCell.extensible) is not copied: the
 * batch keeps only what it appended (TAIL), and its commit pushes that onto the list.
 */
export class EntityEntry extends Cell implements EntityChanges {
  /** The batch that touched this entry last (-1: none). */
  batch = -1;
  /**
   * The key itself when it is a number or a string, as a record's context last saw it: a
   * timer of the key then needs no parse of the key string (NodeContext.currentKey).
   */
  keyValue: number | string | undefined = undefined;
  /** Its overlay keeps it by key (false once forgotten or swept: a holder, such as a timer's hint, must look the key up again). */
  live = true;
  /** The entity's committed fields: the store's cell, kept while attached, or this batch's view (null: not looked up). */
  private committed: StateCell | null = null;
  private bf0: string | undefined = undefined;
  private bv0: unknown = undefined;
  private bs0 = 0;
  private bf1: string | undefined = undefined;
  private bv1: unknown = undefined;
  private bs1 = 0;
  private bmore: Map<string, Overflow> | undefined = undefined;
  private anyDirty = false;
  /**
   * The key's timers, filed here by the runtime (runtime/timer-nodes.ts TimerHome): one object
   * per key for its state and its timers. The overlay keeps an entry that files timers.
   */
  timerOne: unknown = undefined;
  timerList: unknown[] | undefined = undefined;
  timerMap: Map<string, unknown> | undefined = undefined;
  timersReported = NOT_REPORTED;

  constructor(
    private readonly txn: CellSource,
    /** The key's group, entity and string form: set again when the overlay reuses the entry for another key (renew). */
    public kg: number,
    public entity: string,
    /** The key's string form, and the overlay that keeps the entry by it (StateTxn.reset may forget it). */
    public key: string,
    readonly owner: EntryOwner,
  ) {
    super();
  }

  /**
   * @internal A forgotten entry as a new key's (OperatorOverlay reuses them: one fewer object
   * for the young-generation GC to copy per key). Forgotten means cleared, with no fields in
   * the store (its cell part detached and empty) and no timers, so only what names the key
   * and what marks it is reset here.
   */
  renew(kg: number, entity: string, key: string): this {
    this.kg = kg;
    this.entity = entity;
    this.key = key;
    this.batch = -1;
    this.keyValue = undefined;
    this.live = true;
    this.committed = null;
    this.timersReported = NOT_REPORTED;
    this.tracked = undefined;
    this.born = -1;
    return this;
  }

  /** A committed field's value (not a copy). */
  private committedValue(field: string): unknown {
    // Nothing commits during a batch, so one look-up per entity serves all its fields.
    let c = this.committed;
    if (c === null) c = this.committed = this.txn.cellOf(this.kg, this.entity, this);
    return c.get(field);
  }

  /** The entity's cell (EntityChanges): looked up now if this batch has not read the entity. */
  get cell(): StateCell {
    let c = this.committed;
    if (c === null) c = this.committed = this.txn.cellOf(this.kg, this.entity, this);
    return c;
  }

  /** Has this batch a value (or a deletion) for the field? Sets hitV and hitFlags when it has. */
  private find(field: string): boolean {
    if (field === this.bf0) {
      hitV = this.bv0;
      hitFlags = this.bs0;
      return true;
    }
    if (field === this.bf1) {
      hitV = this.bv1;
      hitFlags = this.bs1;
      return true;
    }
    const o = this.bmore === undefined ? undefined : this.bmore.get(field);
    if (o === undefined) return false;
    hitV = o.v;
    hitFlags = o.flags;
    return true;
  }

  /** Store the batch's value of a field (slots fill in order and are freed together, at clear()). */
  private put(field: string, v: unknown, flags: number): void {
    if (field === this.bf0 || this.bf0 === undefined) {
      this.bf0 = field;
      this.bv0 = v;
      this.bs0 = flags;
    } else if (field === this.bf1 || this.bf1 === undefined) {
      this.bf1 = field;
      this.bv1 = v;
      this.bs1 = flags;
    } else {
      const more = (this.bmore ??= new Map());
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

  /** The field's value in this batch: a copy the caller may change (write() it back for the change to count). */
  read(field: string): unknown {
    if (this.find(field)) {
      const v = hitV;
      if (v === DELETED) return undefined;
      const flags = hitFlags;
      if ((flags & TAIL) !== 0) return this.handOut(field, this.withTail(field, v as unknown[]), DIRTY | OWN | SHARED);
      return (flags & (OWN | SHARED)) === 0 ? v : this.handOut(field, v, flags);
    }
    const copy = cloneValue(this.committedValue(field));
    this.put(field, copy === undefined ? DELETED : copy, 0);
    return copy;
  }

  /** The field's value as read() would see it, without a copy: the caller must not change it. */
  peek(field: string): unknown {
    if (this.find(field)) {
      const v = hitV;
      if ((hitFlags & TAIL) !== 0) return this.withTail(field, v as unknown[]);
      return v === DELETED ? undefined : v;
    }
    return this.committedValue(field);
  }

  /**
   * A tail's field as a whole list from now on (the committed list's elements, shared, then
   * the tail's): the batch's own copy, as append() without a tail would have made it.
   */
  private withTail(field: string, tail: unknown[]): unknown[] {
    const list = (this.committedValue(field) as unknown[]).concat(tail);
    this.put(field, list, DIRTY | OWN | SHARED);
    return list;
  }

  /** Set the field in this batch (undefined deletes it). */
  write(field: string, value: unknown): void {
    this.put(field, value === undefined ? DELETED : value, DIRTY);
  }

  /**
   * Add `value` at the end of the list in `field` (absent: an empty list), as
   * write(field, [...(read(field) ?? []), value]) would, without copying the list per call:
   * the first append of a batch copies the list shallowly, later ones push to that copy;
   * to a list the store owns, the batch's appends go to a tail instead (no copy at all).
   * The value is kept as given (as set keeps it). Returns the list's new length.
   */
  append(field: string, value: unknown): number {
    let base: unknown;
    let shared = false;
    if (this.find(field)) {
      const v = hitV;
      if ((hitFlags & (OWN | TAIL)) !== 0) {
        const own = v as unknown[];
        own.push(value);
        return (hitFlags & TAIL) !== 0 ? (this.committedValue(field) as unknown[]).length + own.length : own.length;
      }
      base = v === DELETED ? undefined : v;
    } else {
      base = this.committedValue(field);
      shared = base !== undefined;
      // The store's own list: this batch's appends become a tail its commit pushes on.
      if (shared && this.committed!.extensible?.(field) === true) {
        this.put(field, [value], DIRTY | TAIL);
        return (base as unknown[]).length + 1;
      }
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
    const f0 = this.bf0;
    if (f0 !== undefined && this.bv0 !== DELETED && f0.startsWith(prefix)) out.set(f0, this.read(f0));
    const f1 = this.bf1;
    if (f1 !== undefined && this.bv1 !== DELETED && f1.startsWith(prefix)) out.set(f1, this.read(f1));
    if (this.bmore) {
      for (const [f, o] of this.bmore) if (f.startsWith(prefix) && o.v !== DELETED) out.set(f, this.read(f));
    }
    return [...out].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  }

  /** @internal Append this entry's dirty fields, with their final values. */
  writesTo(out: StateWrite[]): void {
    if (!this.anyDirty) return;
    if ((this.bs0 & DIRTY) !== 0) out.push({ kg: this.kg, entity: this.entity, field: this.bf0!, value: this.finalValue(this.bf0!, this.bv0, this.bs0) });
    if ((this.bs1 & DIRTY) !== 0) out.push({ kg: this.kg, entity: this.entity, field: this.bf1!, value: this.finalValue(this.bf1!, this.bv1, this.bs1) });
    if (this.bmore !== undefined) {
      for (const [field, o] of this.bmore) {
        if ((o.flags & DIRTY) !== 0) out.push({ kg: this.kg, entity: this.entity, field, value: this.finalValue(field, o.v, o.flags) });
      }
    }
  }

  /** A written field's value as the commit leaves it (a tail after its committed list). */
  private finalValue(field: string, v: unknown, flags: number): unknown {
    if (v === DELETED) return undefined;
    return (flags & TAIL) !== 0 ? (this.committedValue(field) as unknown[]).concat(v as unknown[]) : v;
  }

  /** Apply this batch's writes to `fields` (EntityChanges). Returns whether any field is left. */
  applyTo(fields: WritableFields): boolean {
    if ((this.bs0 & DIRTY) !== 0) this.applyField(fields, this.bf0!, this.bv0, this.bs0);
    if ((this.bs1 & DIRTY) !== 0) this.applyField(fields, this.bf1!, this.bv1, this.bs1);
    if (this.bmore !== undefined) {
      for (const [field, o] of this.bmore) if ((o.flags & DIRTY) !== 0) this.applyField(fields, field, o.v, o.flags);
    }
    return fields.size > 0;
  }

  private applyField(fields: WritableFields, field: string, v: unknown, flags: number): void {
    if (v === DELETED) fields.delete(field);
    else if ((flags & TAIL) !== 0) {
      // The tail's list is the one this batch read (nothing commits during a batch), still the store's own.
      if ((fields as unknown) === this.committed && fields.extensible(field)) fields.extend(field, v as unknown[]);
      else fields.setOwned(field, this.finalValue(field, v, flags) as unknown[]);
    }
    // A list append() made and no one was handed: the store's alone from now on.
    else if ((flags & OWN) !== 0) fields.setOwned(field, v as unknown[]);
    else fields.set(field, v);
  }

  /** @internal A new entry whose entity the overlay knows is absent: its cell, without a look-up. */
  absent(cell: StateCell): void {
    this.committed = cell;
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
    this.bf0 = undefined;
    this.bv0 = undefined;
    this.bs0 = 0;
    this.bf1 = undefined;
    this.bv1 = undefined;
    this.bs1 = 0;
    this.bmore = undefined;
    this.anyDirty = false;
    hitV = undefined;
  }

  /** @internal Between batches: the entry keeps the store's cell of its entity (the entity has fields). */
  get keepsCell(): boolean {
    return this.committed !== null;
  }

  /** @internal The runtime files timers of the key here (see timerOne). */
  get holdsTimers(): boolean {
    if (this.timerOne !== undefined) return true;
    return this.timerMap !== undefined ? this.timerMap.size > 0 : this.timerList !== undefined && this.timerList.length > 0;
  }
}
