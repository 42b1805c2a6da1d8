/**
 * Incremental snapshots in the runtime core. Each commit marks the entities whose state
 * or timers it changed, per barrier interval, durably with the partition (the backend
 * keeps CommitBatch.tracking), so a delta for barrier `e` with base `b` is the union of
 * the intervals that started at or after `b`, plus the current batch: its size follows
 * the keys changed since the last completed checkpoint, not the size of the state.
 * A changed entity travels whole: its fields and all its live timers.
 */
import { stateIdOf } from '../api/logical.ts';
import { partitionOfKeyGroup } from '../graph/keygroups.ts';
import type { PartitionProgress, PartitionScope, StateBackend, StateWrite, TimerEntry } from '../state/backend.ts';
import type { StateTxn } from '../state/txn.ts';
import { type SnapshotObject, type SnapshotRow, sortedEntries, toSnapshotTimer } from '../checkpoint/snapshot.ts';
import { entityId, type NodeRuntime } from './context.ts';
import type { ChangeLists } from './timers.ts';

/** The key groups a partition owns (contiguous ranges, as the router computes them). */
export function keyGroupsOf(partition: number, parallelism: number, maxParallelism: number): number[] {
  const out: number[] = [];
  for (let kg = 0; kg < maxParallelism; kg++) if (partitionOfKeyGroup(kg, parallelism, maxParallelism) === partition) out.push(kg);
  return out;
}

export interface DirtyEntity {
  readonly entity: string;
  readonly kg: number;
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
  readonly keyGroups: readonly number[];
  /** This batch's uncommitted writes (they precede the barrier). */
  readonly writes: readonly StateWrite[];
  /** Entities whose timers this batch changed. */
  readonly timerEntities: readonly DirtyEntity[];
  /** Live timers of an entity, this batch's changes included. */
  timersOf(entity: string): TimerEntry[];
  /** Full snapshots: the entity of every live timer. */
  allTimerEntities(): DirtyEntity[];
  /** Deltas: the entities present at the base epoch, when known (the rows of others that are gone are left out). */
  readonly aliveAtBase?: ReadonlySet<string>;
}

/** No fields, or no timers: one empty list for every such row (rows are only read and encoded). */
const NONE: readonly never[] = Object.freeze([]);

/**
 * Builds the snapshot object of one barrier: state as of the barrier, committed merged with the batch.
 *
 * A delta lists every entity changed since its base, and most of those in a windowed job
 * are gone again by the barrier (a window's keys live for one window): a row without
 * fields or timers only matters when the entity was there at the base. With
 * `s.aliveAtBase` (the entities present at the base, when the caller knows them) the
 * others are left out: restoring the chain gives the same state either way.
 */
export async function buildSnapshot(s: SnapshotInput): Promise<SnapshotObject> {
  const entities = new Map<string, number>();
  if (s.full) {
    if (!s.backend.entitiesOf) throw new Error('full snapshot: the state backend cannot list entities (entitiesOf)');
    for await (const e of s.backend.entitiesOf(s.scope, s.keyGroups)) entities.set(e.entity, e.kg);
    for (const e of s.allTimerEntities()) entities.set(e.entity, e.kg);
  } else {
    for (const t of s.backend.tracked!(s.scope)) {
      if (t.after < s.baseEpoch) continue;
      // forEach: no [entity, kg] pair per entry (a delta lists every key changed since the base);
      // forEachChanged, where the store has it, spares it building a map of the interval's entities.
      if (t.forEachChanged) t.forEachChanged((kg, e) => entities.set(e, kg));
      else t.entities.forEach((kg, e) => entities.set(e, kg));
    }
    for (const e of s.timerEntities) entities.set(e.entity, e.kg);
  }
  const written = new Set<string>();
  for (const w of s.writes) {
    entities.set(w.entity, w.kg);
    written.add(w.entity);
  }
  if (s.backend.needsPrefetch) {
    const missing = [...entities].filter(([e]) => !written.has(e)).map(([entity, kg]) => ({ kg, entity }));
    if (missing.length) await s.backend.prefetch(s.scope, missing);
  }
  // Gone entities are dropped before the sort: a full snapshot holds only present ones, a
  // delta those that were present at its base.
  const dropGone = s.full ? undefined : s.aliveAtBase;
  const rows: SnapshotRow[] = [];
  entities.forEach((kg, entity) => {
    let fields: readonly (readonly [string, unknown])[] = NONE;
    if (written.has(entity)) fields = s.txn.fields(kg, entity, '');
    else {
      const committed = s.backend.peek(s.scope, kg, entity);
      if (committed !== undefined) fields = sortedEntries(committed);
    }
    const timers = s.timersOf(entity);
    if (fields.length === 0 && timers.length === 0 && (s.full || (dropGone !== undefined && !dropGone.has(entity)))) return;
    rows.push([kg, entity, fields.length ? fields : null, timers.length ? timers.map(toSnapshotTimer) : NONE]);
  });
  // Sorted by entity (UTF-16 code units, as `<` compares; entities are unique).
  rows.sort(byEntity);
  return { format: 1, job: s.job, stage: s.scope.stage, partition: s.scope.partition, epoch: s.epoch, baseEpoch: s.baseEpoch, full: s.full, progress: s.progress, entities: rows };
}

const byEntity = (a: SnapshotRow, b: SnapshotRow) => (a[1] < b[1] ? -1 : 1);

/**
 * The entities present in a partition's snapshots, kept by its barrier aligner from one
 * snapshot to the next, so that a delta can leave out the rows of entities that came and
 * went since its base (buildSnapshot). Known only for the epochs this runtime snapshotted
 * since its last full snapshot (a recovered partition starts without it), and given up
 * past `limit` entities (the memory is the state's key count).
 */
export class PresentEntities {
  private present: Set<string> | undefined;
  private epoch = -1;

  constructor(private readonly limit = 262_144) {}

  /** The entities present at snapshot `epoch`, if known. */
  at(epoch: number): ReadonlySet<string> | undefined {
    return this.epoch === epoch ? this.present : undefined;
  }

  /** After the snapshot of `epoch` with base `base`: its rows are the state at `epoch` of every entity changed since `base`. */
  update(object: SnapshotObject): void {
    const rows = object.entities;
    if (object.full) this.present = new Set();
    else if (this.present === undefined || object.baseEpoch > this.epoch) {
      // Changes between the last snapshot and the base are not in these rows.
      this.present = undefined;
      this.epoch = object.epoch;
      return;
    }
    const present = this.present;
    for (let i = 0; i < rows.length; i++) {
      const row = rows[i];
      if (row[2] !== null || row[3].length > 0) present.add(row[1]);
      else present.delete(row[1]);
    }
    this.present = present.size > this.limit ? undefined : present;
    this.epoch = object.epoch;
  }
}

/**
 * The entities whose timers changed since the last commit (their timers go into the next
 * delta). `interval`: the tracked interval the commit adds them to (its `after`); keys an
 * earlier commit reported for it are left out. Without it: all of them.
 */
export function changedTimerEntities(order: readonly NodeRuntime[], interval?: number): DirtyEntity[] {
  const out: DirtyEntity[] = [];
  for (const n of order) {
    n.timers.event.changedEntities(out, interval);
    n.timers.processing.changedEntities(out, interval);
  }
  return out;
}

/** Live timers of an entity (`${operator uid}\u0001${key}`) of this partition; `byStateId`: the nodes by stateIdOf. */
export function timersOfEntity(byStateId: ReadonlyMap<string, NodeRuntime>, entity: string): TimerEntry[] {
  const i = entity.indexOf('\u0001');
  const n = byStateId.get(entity.slice(0, i));
  if (!n) return [];
  const key = entity.slice(i + 1);
  const out = n.timers.event.liveOf(key);
  n.timers.processing.liveInto(key, out);
  return out;
}

/** The entity of every live timer (full snapshots). */
export function allTimerEntities(order: readonly NodeRuntime[]): DirtyEntity[] {
  return order.flatMap((n) => [...n.timers.event.liveUpTo(Infinity), ...n.timers.processing.liveUpTo(Infinity)].map((t) => ({ entity: entityId(stateIdOf(n.node), t.key), kg: t.kg })));
}

/**
 * Timer adds and deletes of all nodes since the last commit; with `entities`, the entities
 * whose timers changed appended to it, as changedTimerEntities(order, interval) lists them
 * (one pass over the changes for both).
 */
export function timerChanges(order: readonly NodeRuntime[], entities?: DirtyEntity[], interval?: number): { adds: TimerEntry[]; deletes: TimerEntry[] } {
  // Sized first: a commit's lists are short and many, and a list grown from empty allocates
  // room for 17 on its first push.
  const counts = { adds: 0, deletes: 0 };
  for (const n of order) {
    const { event, processing } = n.timers;
    if (event.hasChanges) event.countChanges(counts);
    if (processing.hasChanges) processing.countChanges(counts);
  }
  const lists: ChangeLists = { adds: counts.adds ? new Array<TimerEntry>(counts.adds) : [], deletes: counts.deletes ? new Array<TimerEntry>(counts.deletes) : [], added: 0, deleted: 0 };
  if (counts.adds + counts.deletes > 0) {
    for (const n of order) {
      const { event, processing } = n.timers;
      if (event.hasChanges) event.collect(lists, entities, interval);
      if (processing.hasChanges) processing.collect(lists, entities, interval);
    }
  }
  return { adds: lists.adds, deletes: lists.deletes };
}
