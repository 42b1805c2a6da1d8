/**
 * An entity's fields with the first two inline: most keyed operators keep one or two
 * fields per key (window panes `P`, a join's two sides of a window, a process
 * function's value), so most entities need no Map of their own (a Map with one entry
 * costs ~170 bytes and a hash per access). Further fields go to an overflow Map.
 * Values are never undefined (absent fields are not stored). It reads as a ReadonlyMap, so
 * a store can hand it out as an entity's fields (peek, entitiesOf) without copying.
 */
export class FieldTable implements ReadonlyMap<string, unknown> {
  /** Inline slots (f0/f1 undefined: the slot is free). */
  private f0: string | undefined = undefined;
  private v0: unknown = undefined;
  private f1: string | undefined = undefined;
  private v1: unknown = undefined;
  private more: Map<string, unknown> | undefined = undefined;
  /**
   * Inline slots whose list is the table's alone (setOwned: bit 1 for f0, 2 for f1), which
   * extend() may push onto; overflow fields so marked are in `moreOwned`.
   */
  private owned = 0;
  private moreOwned: Set<string> | undefined = undefined;

  /** The field's value (undefined: absent). */
  get(field: string): unknown {
    if (field === this.f0) return this.v0;
    if (field === this.f1) return this.v1;
    return this.more === undefined ? undefined : this.more.get(field);
  }

  set(field: string, value: unknown): void {
    this.place(field, value, false);
  }

  setOwned(field: string, list: unknown[]): void {
    this.place(field, list, true);
  }

  extensible(field: string): boolean {
    if (field === this.f0) return (this.owned & 1) !== 0;
    if (field === this.f1) return (this.owned & 2) !== 0;
    return this.moreOwned !== undefined && this.moreOwned.has(field);
  }

  extend(field: string, items: readonly unknown[]): void {
    const list = this.get(field) as unknown[];
    for (let i = 0; i < items.length; i++) list.push(items[i]);
  }

  /** Set the field; `owned`: mark its inline slot as holding the table's own list. */
  private place(field: string, value: unknown, owned: boolean): void {
    let bit = 0;
    if (field === this.f0) {
      this.v0 = value;
      bit = 1;
    } else if (field === this.f1) {
      this.v1 = value;
      bit = 2;
    }
    // A free slot takes the field unless the overflow has it already (a field lives in one place).
    else if (this.more !== undefined && this.more.has(field)) this.placeMore(field, value, owned);
    else if (this.f0 === undefined) {
      this.f0 = field;
      this.v0 = value;
      bit = 1;
    } else if (this.f1 === undefined) {
      this.f1 = field;
      this.v1 = value;
      bit = 2;
    } else this.placeMore(field, value, owned);
    if (bit !== 0) this.owned = owned ? this.owned | bit : this.owned & ~bit;
  }

  private placeMore(field: string, value: unknown, owned: boolean): void {
    (this.more ??= new Map()).set(field, value);
    if (owned) (this.moreOwned ??= new Set()).add(field);
    else this.moreOwned?.delete(field);
  }

  delete(field: string): void {
    if (field === this.f0) {
      this.f0 = undefined;
      this.v0 = undefined;
      this.owned &= ~1;
    } else if (field === this.f1) {
      this.f1 = undefined;
      this.v1 = undefined;
      this.owned &= ~2;
    } else if (this.more !== undefined) {
      this.more.delete(field);
      this.moreOwned?.delete(field);
      if (this.more.size === 0) {
        this.more = undefined;
        this.moreOwned = undefined;
      }
    }
  }

  has(field: string): boolean {
    return field === this.f0 || field === this.f1 || (this.more !== undefined && this.more.has(field));
  }

  get size(): number {
    return (this.f0 === undefined ? 0 : 1) + (this.f1 === undefined ? 0 : 1) + (this.more === undefined ? 0 : this.more.size);
  }

  forEach(fn: (value: unknown, field: string, map: ReadonlyMap<string, unknown>) => void): void {
    if (this.f0 !== undefined) fn(this.v0, this.f0, this);
    if (this.f1 !== undefined) fn(this.v1, this.f1, this);
    if (this.more !== undefined) for (const [f, v] of this.more) fn(v, f, this);
  }

  *entries(): MapIterator<[string, unknown]> {
    if (this.f0 !== undefined) yield [this.f0, this.v0];
    if (this.f1 !== undefined) yield [this.f1, this.v1];
    if (this.more !== undefined) yield* this.more;
  }

  *keys(): MapIterator<string> {
    for (const [f] of this.entries()) yield f;
  }

  *values(): MapIterator<unknown> {
    for (const [, v] of this.entries()) yield v;
  }

  [Symbol.iterator](): MapIterator<[string, unknown]> {
    return this.entries();
  }

  /** Drop every field. */
  clearFields(): void {
    this.owned = 0;
    this.moreOwned = undefined;
    this.f0 = undefined;
    this.v0 = undefined;
    this.f1 = undefined;
    this.v1 = undefined;
    this.more = undefined;
  }

  /** A copy of the fields as a Map. */
  toMap(): Map<string, unknown> {
    const out = new Map<string, unknown>();
    this.forEach((v, f) => out.set(f, v));
    return out;
  }
}
