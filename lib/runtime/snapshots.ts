/**
 * Incremental snapshots in the runtime core. A partition tracks which entities and
 * timers each commit changed, per barrier interval, durably with its state (the backend
 * keeps CommitBatch.tracking), so a delta for barrier `e` with base `b` is the union of
 * the intervals that started at or after `b`, plus the current batch: its size follows
 * the keys changed since the last completed checkpoint, not the size of the state.
 */
import { partitionOfKeyGroup } from '../graph/keygroups.ts';
import { type PartitionProgress, type PartitionScope, type StateBackend, type StateWrite, type TimerEntry, timerId, type TrackedInterval, type TrackingUpdate } from '../state/backend.ts';
import type { StateTxn } from '../state/txn.ts';
import { type SnapshotObject, sortedEntries } from '../checkpoint/snapshot.ts';

interface Interval {
  readonly after: number;
  readonly entities: Map<string, number>;
  readonly timers: Map<string, TimerEntry | null>;
}

/** The in-memory mirror of the backend's tracked intervals (recovered, then updated like the backend). */
export class ChangeTracker {
  private intervals: Interval[];

  constructor(recovered: readonly TrackedInterval[] | undefined, lastBarrier: number) {
    this.intervals = (recovered ?? []).map((t) => ({ after: t.after, entities: new Map(t.entities), timers: new Map(t.timers) }));
    if (this.intervals.length === 0) this.intervals.push({ after: lastBarrier, entities: new Map(), timers: new Map() });
  }

  /** The tracking part of a commit: what this batch wrote. */
  static updateOf(writes: readonly StateWrite[], timerAdds: readonly TimerEntry[], timerDeletes: readonly TimerEntry[], next?: TrackingUpdate['next']): TrackingUpdate {
    const entities = new Map<string, number>();
    for (const w of writes) entities.set(w.entity, w.kg);
    const timers = new Map<string, TimerEntry | null>();
    for (const t of timerDeletes) timers.set(timerId(t), null);
    for (const t of timerAdds) timers.set(timerId(t), t);
    return { entities, timers, next };
  }

  /** Mirrors what the backend does with the same update (InMemoryStateBackend.commit). */
  apply(u: TrackingUpdate): void {
    const cur = this.intervals[this.intervals.length - 1];
    for (const [e, kg] of u.entities) cur.entities.set(e, kg);
    for (const [id, t] of u.timers) cur.timers.set(id, t);
    if (u.next) {
      const { after, dropBefore } = u.next;
      this.intervals = this.intervals.filter((t) => t.after >= dropBefore);
      this.intervals.push({ after, entities: new Map(), timers: new Map() });
    }
  }

  /** Entities and timers changed since barrier `base` (committed batches only). */
  since(base: number): { entities: Map<string, number>; timers: Map<string, TimerEntry | null> } {
    const entities = new Map<string, number>();
    const timers = new Map<string, TimerEntry | null>();
    for (const t of this.intervals) {
      if (t.after < base) continue;
      for (const [e, kg] of t.entities) entities.set(e, kg);
      for (const [id, x] of t.timers) timers.set(id, x);
    }
    return { entities, timers };
  }

  get trackedEntities(): number {
    return this.intervals.reduce((n, t) => n + t.entities.size, 0);
  }
}

/** The key groups a partition owns (contiguous ranges, as the router computes them). */
export function keyGroupsOf(partition: number, parallelism: number, maxParallelism: number): number[] {
  const out: number[] = [];
  for (let kg = 0; kg < maxParallelism; kg++) if (partitionOfKeyGroup(kg, parallelism, maxParallelism) === partition) out.push(kg);
  return out;
}

export interface SnapshotInput {
  readonly job: string;
  readonly scope: PartitionScope;
  readonly epoch: number;
  readonly baseEpoch: number;
  readonly full: boolean;
  readonly progress: PartitionProgress;
  readonly backend: StateBackend;
  readonly txn: StateTxn;
  readonly tracker: ChangeTracker;
  readonly keyGroups: readonly number[];
  /** This batch's uncommitted writes and timer changes (they precede the barrier). */
  readonly writes: readonly StateWrite[];
  readonly timerAdds: readonly TimerEntry[];
  readonly timerDeletes: readonly TimerEntry[];
  /** Full snapshots: every live timer, including this batch's. */
  readonly liveTimers: () => TimerEntry[];
}

/** Builds the snapshot object of one barrier: state as of the barrier, committed merged with the batch. */
export async function buildSnapshot(s: SnapshotInput): Promise<SnapshotObject> {
  let entities: Map<string, number>;
  let timers: Map<string, TimerEntry | null>;
  if (s.full) {
    if (!s.backend.entitiesOf) throw new Error('full snapshot: the state backend cannot list entities (entitiesOf)');
    entities = new Map();
    for (const e of s.backend.entitiesOf(s.scope, s.keyGroups)) entities.set(e.entity, e.kg);
    timers = new Map(s.liveTimers().map((t) => [timerId(t), t]));
  } else {
    ({ entities, timers } = s.tracker.since(s.baseEpoch));
    for (const t of s.timerDeletes) timers.set(timerId(t), null);
    for (const t of s.timerAdds) timers.set(timerId(t), t);
  }
  for (const w of s.writes) entities.set(w.entity, w.kg);
  const written = new Set(s.writes.map((w) => w.entity));
  if (s.backend.needsPrefetch) {
    const missing = [...entities].filter(([e]) => !written.has(e)).map(([entity, kg]) => ({ kg, entity }));
    if (missing.length) await s.backend.prefetch(s.scope, missing);
  }
  const rows: [number, string, [string, unknown][] | null][] = [];
  for (const [entity, kg] of sortedEntries(entities)) {
    let fields: [string, unknown][];
    if (written.has(entity)) fields = s.txn.fields(kg, entity, '');
    else fields = sortedEntries(s.backend.peek(s.scope, kg, entity) ?? new Map());
    if (fields.length === 0 && s.full) continue;
    rows.push([kg, entity, fields.length ? fields : null]);
  }
  return {
    format: 1,
    job: s.job,
    stage: s.scope.stage,
    partition: s.scope.partition,
    epoch: s.epoch,
    baseEpoch: s.baseEpoch,
    full: s.full,
    progress: s.progress,
    entities: rows,
    timers: sortedEntries(timers).filter(([, t]) => t !== null || !s.full),
  };
}

