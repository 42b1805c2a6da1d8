/**
 * The in-memory store's cells (memory.ts): an entity's committed fields, and a stage's cells
 * by key group and entity.
 *
 * A stage's index by entity is brought up to date only when something looks an entity up
 * or lists the stage (a snapshot, a restore, an overlay that cannot tell a key is absent).
 * Until then a cell attached by a commit is only listed (an array push, no hashing), and
 * a listed cell that loses its last field is unlisted by its slot. A windowed job's keys
 * mostly come and go between two checkpoints (Nexmark Q5's auctions live for a few
 * slides): such a key never enters the index, where an insert and a delete by entity
 * string cost about a tenth of Q5's CPU (cache misses in the stage's maps).
 */
import { FieldTable } from './fields.ts';
import type { TrackedLog } from './tracked-log.ts';

/**
 * An entity's committed fields (StateCell), the first two inline (FieldTable). The stage
 * holds the cells of entities with fields (attached); commits update them in place, so an
 * overlay that keeps a cell needs no look-up per batch, and a commit applies an entity's
 * writes without finding it.
 */
export class Cell extends FieldTable {
  attached = false;
  /**
   * A detached cell: the store's change count when cellOf() made it. While no commit or
   * install has happened since, the entity is still absent from the store: its commit
   * attaches this cell without looking the entity up again.
   */
  born = -1;
  /** The tracked interval this entity last joined (saves the interval's map look-up per commit). */
  tracked: TrackedLog | undefined = undefined;
  /** Its slot among the stage's listed cells (attached, not yet indexed); -1: not listed. */
  listed = -1;
}

/** One stage's attached cells: key group -> entity -> cell, and the cells not yet indexed. */
export class StageCells {
  private readonly groups = new Map<number, Map<string, Cell>>();
  /** Attached cells not yet in `groups`, with their entities and key groups (parallel arrays; Cell.listed is the slot). */
  private readonly cells: Cell[] = [];
  private readonly entities: string[] = [];
  private readonly kgs: number[] = [];

  /** Every attached cell by key group and entity (the listed ones indexed first). */
  index(): ReadonlyMap<number, Map<string, Cell>> {
    if (this.cells.length > 0) this.indexListed();
    return this.groups;
  }

  /** The entity's attached cell, if any. */
  find(kg: number, entity: string): Cell | undefined {
    return this.index().get(kg)?.get(entity);
  }

  /** Attach a cell that has fields now (the entity had none: no attached cell of it is in the stage). */
  attach(cell: Cell, kg: number, entity: string): void {
    cell.attached = true;
    cell.born = -1;
    cell.listed = this.cells.length;
    this.cells.push(cell);
    this.entities.push(entity);
    this.kgs.push(kg);
  }

  /** Attach a cell into the index at once (restores, writes-form commits). */
  attachIndexed(cell: Cell, kg: number, entity: string): void {
    cell.attached = true;
    cell.born = -1;
    this.groupOf(kg).set(entity, cell);
  }

  /** The attached cell of an entity lost its last field: out of the stage, its fields cleared. */
  detach(cell: Cell, kg: number, entity: string): void {
    const i = cell.listed;
    if (i >= 0) this.unlist(i);
    else this.groups.get(kg)?.delete(entity);
    detach(cell);
  }

  /** Drop every cell of a key group (detached: an overlay that still holds one sees no fields). */
  dropGroup(kg: number): void {
    const groups = this.index().get(kg);
    if (groups === undefined) return;
    for (const cell of groups.values()) detach(cell);
    this.groups.delete(kg);
  }

  private groupOf(kg: number): Map<string, Cell> {
    let g = this.groups.get(kg);
    if (g === undefined) this.groups.set(kg, (g = new Map()));
    return g;
  }

  private indexListed(): void {
    const { cells, entities, kgs } = this;
    for (let i = 0; i < cells.length; i++) {
      cells[i].listed = -1;
      this.groupOf(kgs[i]).set(entities[i], cells[i]);
    }
    cells.length = 0;
    entities.length = 0;
    kgs.length = 0;
  }

  /** Remove listed slot i: the last listed cell moves into it. */
  private unlist(i: number): void {
    const { cells, entities, kgs } = this;
    cells[i].listed = -1;
    const cell = cells.pop()!;
    const entity = entities.pop()!;
    const kg = kgs.pop()!;
    if (i < cells.length) {
      cells[i] = cell;
      entities[i] = entity;
      kgs[i] = kg;
      cell.listed = i;
    }
  }
}

/** A cell out of the store: no fields, not attached. */
function detach(cell: Cell): void {
  cell.attached = false;
  cell.clearFields();
}
