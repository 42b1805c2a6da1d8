/**
 * The state log of the DynamoDB backend: a commit writes its state and timer changes as
 * one compressed log item beside the version item, not as one item per field and per
 * timer; now and then the log is compacted into those items (dynamodb-state.ts).
 *
 * Why: DynamoDB bills every item of a transaction at 2 write units per started KB, and a
 * keyed window touches hundreds of small items per commit (one per key, one per timer,
 * put and later deleted). The log turns that into one item of a few KB per commit;
 * compaction writes only the net change of many commits (a key created and dropped
 * between two compactions costs nothing there).
 *
 * This file is the bookkeeping (pure): the net change since the last compaction
 * (`overlay`), which the backend applies to what it reads from the base items, so every
 * reader that goes through recover() and prefetch() sees exactly the committed state.
 * Timer ids of the base items are known from recover(), field names of the base items
 * from prefetch(): compaction deletes only items that exist.
 */
import type { StateWrite, TimerEntry } from '../../state/backend.ts';
import { timerId } from '../../state/backend.ts';

/** One commit's changes as logged: writes [kg, entity, field, value] (value undefined: deleted), timer adds and deletes. */
export interface LogDelta {
  readonly w: readonly (readonly [number, string, string, unknown])[];
  readonly ta: readonly TimerEntry[];
  readonly td: readonly TimerEntry[];
}

export function deltaOf(writes: readonly StateWrite[], timerAdds: readonly TimerEntry[], timerDeletes: readonly TimerEntry[]): LogDelta | undefined {
  if (!writes.length && !timerAdds.length && !timerDeletes.length) return undefined;
  return { w: writes.map((w) => [w.kg, w.entity, w.field, w.value] as const), ta: timerAdds, td: timerDeletes };
}

/** Entity changes since the last compaction: field -> value, undefined for a deleted field. */
export interface EntityOverlay {
  readonly kg: number;
  readonly entity: string;
  readonly fields: Map<string, unknown>;
}

export function entityId(kg: number, entity: string): string {
  return `${kg}/${entity}`;
}

export class PartitionLog {
  /** Log versions above `compactedThrough`, in order, and the sort keys of their items. */
  readonly versions: number[] = [];
  readonly sortKeys: string[] = [];
  /** The partition's version as this process last saw it commit (compact() fences on it). */
  committedVersion = 0;
  /** Stored bytes of those log items. */
  bytes = 0;
  readonly overlay = new Map<string, EntityOverlay>();
  /** Net timer changes against the base items. */
  readonly timerAdds = new Map<string, TimerEntry>();
  readonly timerDeletes = new Map<string, TimerEntry>();
  /** Field names the base items hold, per entity read since the last compaction. */
  private readonly baseFields = new Map<string, Set<string>>();

  constructor(
    /** Log items at or below this version are already in the base items (leftovers of an interrupted cleanup). */
    public compactedThrough: number,
    private readonly baseTimerIds: Set<string>,
  ) {}

  /** Apply one committed (or recovered) log entry, in version order. */
  apply(version: number, delta: LogDelta, bytes: number, sortKeys: readonly string[]): void {
    this.versions.push(version);
    this.sortKeys.push(...sortKeys);
    this.bytes += bytes;
    for (const [kg, entity, field, value] of delta.w) {
      const id = entityId(kg, entity);
      let e = this.overlay.get(id);
      if (!e) this.overlay.set(id, (e = { kg, entity, fields: new Map() }));
      e.fields.set(field, value);
    }
    // As in memory: deletes first, then adds.
    for (const t of delta.td) {
      const id = timerId(t);
      this.timerAdds.delete(id);
      if (this.baseTimerIds.has(id)) this.timerDeletes.set(id, t);
    }
    for (const t of delta.ta) {
      const id = timerId(t);
      this.timerDeletes.delete(id);
      this.timerAdds.set(id, t);
    }
  }

  /** Base fields as read by prefetch, with the logged changes applied; remembers which fields the base holds. */
  merge(kg: number, entity: string, base: Map<string, unknown>): Map<string, unknown> {
    const id = entityId(kg, entity);
    this.baseFields.set(id, new Set(base.keys()));
    const e = this.overlay.get(id);
    if (!e) return base;
    for (const [field, value] of e.fields) {
      if (value === undefined) base.delete(field);
      else base.set(field, value);
    }
    return base;
  }

  /** The partition's live timers: the base items' plus the logged changes. */
  timers(base: readonly TimerEntry[]): TimerEntry[] {
    const out = new Map(base.map((t) => [timerId(t), t]));
    for (const id of this.timerDeletes.keys()) out.delete(id);
    for (const [id, t] of this.timerAdds) out.set(id, t);
    return [...out.values()];
  }

  /**
   * What compaction must write: every changed field (deletes only where the base item
   * exists or might: an entity not read since the last compaction), and the timer changes.
   */
  compaction(): { writes: StateWrite[]; timerAdds: TimerEntry[]; timerDeletes: TimerEntry[] } {
    const writes: StateWrite[] = [];
    for (const [id, e] of this.overlay) {
      const base = this.baseFields.get(id);
      for (const [field, value] of e.fields) {
        if (value === undefined && base && !base.has(field)) continue;
        writes.push({ kg: e.kg, entity: e.entity, field, value });
      }
    }
    return { writes, timerAdds: [...this.timerAdds.values()], timerDeletes: [...this.timerDeletes.values()] };
  }

  /** After a compaction through `version`: the base items now hold everything. */
  compacted(version: number): void {
    for (const id of this.timerDeletes.keys()) this.baseTimerIds.delete(id);
    for (const id of this.timerAdds.keys()) this.baseTimerIds.add(id);
    // Entities read from now on are learnt afresh; the others are deleted conservatively.
    this.baseFields.clear();
    this.overlay.clear();
    this.timerAdds.clear();
    this.timerDeletes.clear();
    this.versions.length = 0;
    this.sortKeys.length = 0;
    this.bytes = 0;
    this.compactedThrough = version;
  }
}
