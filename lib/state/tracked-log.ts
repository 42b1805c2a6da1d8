/**
 * One tracked interval of the in-memory store (incremental snapshots: the entities changed
 * after a barrier). A commit adds its changed entities to a log (two arrays, no hashing);
 * the map of distinct entities (TrackedInterval.entities) is built only when asked for (a
 * restart, tests), and a snapshot reads the log itself (forEachChanged), deduplicating
 * into its own map. So a changed entity costs an array push per report instead of an
 * insert into a map that holds every entity changed since the barrier (tens of thousands
 * for a window join between two checkpoints: an insert there costs cache misses).
 */
import type { TrackedInterval } from './backend.ts';

export class TrackedLog implements TrackedInterval {
  /** Entities in the order reported; an entity may repeat (reports are deduplicated where it is cheap: see memory.ts). */
  private readonly names: string[] = [];
  /** Key group of names[i]. */
  private readonly groups: number[] = [];
  /** The distinct entities, built on demand and dropped by the next report. */
  private map: Map<string, number> | undefined = undefined;

  constructor(readonly after: number) {}

  add(entity: string, kg: number): void {
    this.names.push(entity);
    this.groups.push(kg);
    this.map = undefined;
  }

  /** entity -> key group, each entity once. */
  get entities(): ReadonlyMap<string, number> {
    let m = this.map;
    if (m === undefined) {
      m = new Map();
      for (let i = 0; i < this.names.length; i++) m.set(this.names[i], this.groups[i]);
      this.map = m;
    }
    return m;
  }

  forEachChanged(fn: (kg: number, entity: string) => void): void {
    for (let i = 0; i < this.names.length; i++) fn(this.groups[i], this.names[i]);
  }
}
