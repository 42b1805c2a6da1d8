/**
 * The embedded runtime's state backend: committed state in process memory, with the
 * same commit semantics as the DynamoDB store (version-fenced, all-or-nothing, outbox
 * kept until delivered). A simulated crash drops a partition's uncommitted overlay
 * and runtime caches; what was committed here survives, as DynamoDB items would.
 */
import { CommitConflictError } from '../errors.ts';
import type { OutboxEntry } from '../transport/envelope.ts';
import {
  type CommitBatch,
  emptyProgress,
  type PartitionProgress,
  type PartitionScope,
  type RecoveredPartition,
  type StateBackend,
  scopeId,
  type TimerEntry,
  type TrackedInterval,
  type TrackingUpdate,
} from './backend.ts';

interface MutableInterval {
  readonly after: number;
  readonly entities: Map<string, number>;
}

interface PartitionRecord {
  version: number;
  progress: PartitionProgress;
  timers: CommittedTimers;
  outbox: { version: number; entries: readonly OutboxEntry[] }[];
  /** Dirty keys per barrier interval, for incremental snapshots (oldest first). */
  tracking: MutableInterval[];
}

/** A partition's committed state as restored from a checkpoint. */
export interface InstalledPartition {
  readonly progress: PartitionProgress;
  readonly timers: readonly TimerEntry[];
  readonly entities: Iterable<{ readonly kg: number; readonly entity: string; readonly fields: ReadonlyMap<string, unknown> }>;
}

export class InMemoryStateBackend implements StateBackend {
  readonly needsPrefetch = false;
  /** Field maps are updated in place; an entity's map is created or dropped only by a commit that writes it. */
  readonly livePeek = true;
  readonly tracksChanges = true;
  /** key group -> entity -> field -> value. Key groups are shared across stages' scopes by entity prefix. */
  private readonly state = new Map<string, Map<number, Map<string, Map<string, unknown>>>>();
  private readonly partitions = new Map<string, PartitionRecord>();
  /** Scopes are long-lived objects (one per partition runtime): skip building their ids per call. */
  private readonly stageOfScope = new WeakMap<PartitionScope, Map<number, Map<string, Map<string, unknown>>>>();
  private recordOfScope = new WeakMap<PartitionScope, PartitionRecord>();
  /** Commits applied (for tests and metrics). */
  commits = 0;

  /** The last scope asked for: a batch's peeks and its commit come from one partition in a row. */
  private lastScope: PartitionScope | undefined;
  private lastStage: Map<number, Map<string, Map<string, unknown>>> | undefined;

  private stageState(scope: PartitionScope): Map<number, Map<string, Map<string, unknown>>> {
    if (scope === this.lastScope) return this.lastStage!;
    let s = this.stageOfScope.get(scope);
    if (s) {
      this.lastScope = scope;
      this.lastStage = s;
      return s;
    }
    // State belongs to the stage, not the partition: a rescale reassigns key groups.
    const id = `${scope.job}/${scope.stage}`;
    s = this.state.get(id);
    if (!s) this.state.set(id, (s = new Map()));
    this.stageOfScope.set(scope, s);
    return s;
  }

  private record(scope: PartitionScope): PartitionRecord {
    const cached = this.recordOfScope.get(scope);
    if (cached) return cached;
    const id = scopeId(scope);
    let r = this.partitions.get(id);
    if (!r) this.partitions.set(id, (r = { version: 0, progress: emptyProgress(), timers: new CommittedTimers(), outbox: [], tracking: [] }));
    this.recordOfScope.set(scope, r);
    return r;
  }

  async recover(scope: PartitionScope): Promise<RecoveredPartition> {
    const r = this.record(scope);
    return {
      version: r.version,
      progress: structuredClone(r.progress),
      timers: r.timers.all(),
      outbox: r.outbox.flatMap((o) => o.entries),
      // Absent until a checkpointed run tracked something (keeps the conformance shape of plain runs).
      tracking: r.tracking.length ? r.tracking.map((t): TrackedInterval => ({ after: t.after, entities: new Map(t.entities) })) : undefined,
    };
  }

  async prefetch(): Promise<void> {}

  peek(scope: PartitionScope, kg: number, entity: string): ReadonlyMap<string, unknown> | undefined {
    return this.stageState(scope).get(kg)?.get(entity);
  }

  async commit(batch: CommitBatch): Promise<void> {
    this.commitSync(batch);
  }

  /** Synchronous so that the whole batch applies in one step: nothing can interleave. */
  commitSync(batch: CommitBatch): void {
    const r = this.record(batch.scope);
    if (r.version !== batch.expectedVersion) {
      throw new CommitConflictError(scopeId(batch.scope), batch.expectedVersion, `stored version is ${r.version}`);
    }
    const stage = this.stageState(batch.scope);
    // Incremental snapshots: every written entity joins the newest tracked interval. A stamp on
    // the entity's field map saves the interval lookup for its other fields and later batches.
    const cur = batch.tracking ? currentInterval(r) : undefined;
    // An entity's writes are consecutive (StateTxn emits them per entity): find its field map once.
    let lastEntity: string | undefined;
    let lastKg = -1;
    let groups: Map<string, Map<string, unknown>> | undefined;
    let fields: Stamped | undefined;
    for (const w of batch.writes) {
      if (w.entity !== lastEntity || w.kg !== lastKg) {
        lastEntity = w.entity;
        lastKg = w.kg;
        groups = stage.get(w.kg);
        if (!groups) stage.set(w.kg, (groups = new Map()));
        fields = groups.get(w.entity) as Stamped | undefined;
        if (cur && (!fields || fields[STAMP] !== cur)) {
          cur.entities.set(w.entity, w.kg);
          if (fields) fields[STAMP] = cur;
        }
      }
      if (w.value === undefined) {
        if (fields) {
          fields.delete(w.field);
          if (fields.size === 0) {
            groups!.delete(w.entity);
            fields = undefined;
          }
        }
      } else {
        if (!fields) {
          groups!.set(w.entity, (fields = new Map()));
          if (cur) fields[STAMP] = cur;
        }
        fields.set(w.field, w.value);
      }
    }
    for (const t of batch.timerDeletes) r.timers.delete(t);
    for (const t of batch.timerAdds) r.timers.set(t);
    r.version++;
    r.progress = batch.progress;
    if (batch.outbox.length > 0) r.outbox.push({ version: r.version, entries: batch.outbox });
    if (batch.tracking) track(r, batch.tracking);
    this.commits++;
  }

  tracked(scope: PartitionScope): readonly TrackedInterval[] {
    return this.record(scope).tracking;
  }

  *entitiesOf(scope: PartitionScope, keyGroups: readonly number[]): Iterable<{ kg: number; entity: string; fields: ReadonlyMap<string, unknown> }> {
    const stage = this.stageState(scope);
    for (const kg of keyGroups) {
      const groups = stage.get(kg);
      if (groups) for (const [entity, fields] of groups) yield { kg, entity, fields };
    }
  }

  /**
   * Restore: replace a partition's committed state by a checkpoint's (its key groups'
   * entities, timers, progress) at version 0, with one tracked interval after `lastBarrier`.
   * The caller installs every partition of a stage before any of them runs.
   */
  install(scope: PartitionScope, part: InstalledPartition, keyGroups: readonly number[]): void {
    const stage = this.stageState(scope);
    for (const kg of keyGroups) stage.delete(kg);
    for (const { kg, entity, fields } of part.entities) {
      let groups = stage.get(kg);
      if (!groups) stage.set(kg, (groups = new Map()));
      groups.set(entity, new Map(fields));
    }
    const after = part.progress.lastBarrier ?? 0;
    // The partition's record is replaced below: forget cached ones.
    this.recordOfScope = new WeakMap();
    this.partitions.set(scopeId(scope), {
      version: 0,
      progress: structuredClone(part.progress),
      timers: CommittedTimers.of(part.timers),
      outbox: [],
      tracking: [{ after, entities: new Map() }],
    });
  }

  async clearOutbox(scope: PartitionScope, version: number): Promise<void> {
    const r = this.record(scope);
    r.outbox = r.outbox.filter((o) => o.version > version);
  }

  /** Tracked dirty entities of a partition, summed over its intervals (tests, metrics). */
  trackedEntities(scope: PartitionScope): number {
    return this.record(scope).tracking.reduce((n, t) => n + t.entities.size, 0);
  }

  /** Number of live entities of a stage (tests, metrics). */
  entityCount(job: string, stage: number): number {
    let n = 0;
    for (const groups of this.stageState({ job, stage, partition: 0 }).values()) n += groups.size;
    return n;
  }
}

/**
 * A partition's committed timers, by key and then in the key's short list: no string id
 * per timer (an entry is identified by its domain, node, key, namespace and time).
 */
class CommittedTimers {
  private readonly byKey = new Map<string, TimerEntry[]>();

  static of(timers: readonly TimerEntry[]): CommittedTimers {
    const out = new CommittedTimers();
    for (const t of timers) out.set(t);
    return out;
  }

  set(t: TimerEntry): void {
    const list = this.byKey.get(t.key);
    if (!list) {
      this.byKey.set(t.key, [t]);
      return;
    }
    const i = indexOf(list, t);
    if (i >= 0) list[i] = t;
    else list.push(t);
  }

  delete(t: TimerEntry): void {
    const list = this.byKey.get(t.key);
    if (!list) return;
    const i = indexOf(list, t);
    if (i < 0) return;
    if (list.length === 1) this.byKey.delete(t.key);
    else {
      // In order, without splice's array of removed elements.
      for (let j = i + 1; j < list.length; j++) list[j - 1] = list[j];
      list.pop();
    }
  }

  all(): TimerEntry[] {
    const out: TimerEntry[] = [];
    for (const list of this.byKey.values()) for (const t of list) out.push(t);
    return out;
  }
}

function indexOf(list: readonly TimerEntry[], t: TimerEntry): number {
  for (let i = 0; i < list.length; i++) {
    const x = list[i];
    if (x === t || (x.time === t.time && x.node === t.node && x.domain === t.domain && x.ns === t.ns)) return i;
  }
  return -1;
}

const STAMP: unique symbol = Symbol('tracked-in');
type Stamped = Map<string, unknown> & { [STAMP]?: MutableInterval };

/** The interval this commit's changes go to (the first one starts after the partition's last barrier). */
function currentInterval(r: PartitionRecord): MutableInterval {
  if (r.tracking.length === 0) r.tracking.push({ after: r.progress.lastBarrier ?? 0, entities: new Map() });
  return r.tracking[r.tracking.length - 1];
}

/** After the writes (marked in commitSync): entities changed otherwise (timers), then maybe a new interval. */
function track(r: PartitionRecord, u: TrackingUpdate): void {
  const cur = r.tracking[r.tracking.length - 1].entities;
  for (const e of u.entities) cur.set(e.entity, e.kg);
  if (u.next) {
    r.tracking = r.tracking.filter((t) => t.after >= u.next!.dropBefore);
    r.tracking.push({ after: u.next.after, entities: new Map() });
  }
}
