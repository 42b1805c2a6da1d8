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
  type EntityChanges,
  type PartitionProgress,
  type PartitionScope,
  type RecoveredPartition,
  type StateBackend,
  type StateCell,
  type StateWrite,
  scopeId,
  type SlottedTimerEntry,
  type TimerEntry,
  timerId,
  type TrackedInterval,
  type TrackingUpdate,
} from './backend.ts';
import { Cell, StageCells } from './memory-cells.ts';
import { TrackedLog } from './tracked-log.ts';

/** Cell.born of a fresh cell (freshCell): the caller knows the entity is absent; its commit attaches it without a look-up. */
const KNOWN_ABSENT = -2;


interface PartitionRecord {
  version: number;
  progress: PartitionProgress;
  timers: CommittedTimers;
  outbox: { version: number; entries: readonly OutboxEntry[] }[];
  /** Dirty keys per barrier interval, for incremental snapshots (oldest first). */
  tracking: TrackedLog[];
}

/** A partition's committed state as restored from a checkpoint. */
export interface InstalledPartition {
  readonly progress: PartitionProgress;
  readonly timers: readonly TimerEntry[];
  readonly entities: Iterable<{ readonly kg: number; readonly entity: string; readonly fields: ReadonlyMap<string, unknown> }>;
}

export class InMemoryStateBackend implements StateBackend {
  readonly needsPrefetch = false;
  readonly tracksChanges = true;
  /** CommittedTimers drops deleted entries: the runtime may reuse their objects. */
  readonly releasesTimerEntries = true;
  /** Per stage: key group -> entity -> cell. State belongs to the stage (a rescale moves key groups between partitions). */
  private readonly state = new Map<string, StageCells>();
  private readonly partitions = new Map<string, PartitionRecord>();
  /** Scopes are long-lived objects (one per partition runtime): skip building their ids per call. */
  private readonly stageOfScope = new WeakMap<PartitionScope, StageCells>();
  private recordOfScope = new WeakMap<PartitionScope, PartitionRecord>();
  /** Commits applied (for tests and metrics). */
  commits = 0;
  /** Commits and installs applied, to every partition (Cell.born). */
  private changeCount = 0;
  /** Installs and commits in the writes form (StateBackend.untrackedChanges). */
  untrackedChanges = 0;

  /** The last scope asked for: a batch's peeks and its commit come from one partition in a row. */
  private lastScope: PartitionScope | undefined;
  private lastStage: StageCells | undefined;

  private stageState(scope: PartitionScope): StageCells {
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
    if (!s) this.state.set(id, (s = new StageCells()));
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
      timers: r.timers.handOut(),
      outbox: r.outbox.flatMap((o) => o.entries),
      // Absent until a checkpointed run tracked something (keeps the conformance shape of plain runs).
      tracking: r.tracking.length ? r.tracking.map((t): TrackedInterval => ({ after: t.after, entities: new Map(t.entities) })) : undefined,
    };
  }

  async prefetch(): Promise<void> {}

  /** The entity's cell (a ReadonlyMap of its fields, updated by later commits), undefined when it has none. */
  peek(scope: PartitionScope, kg: number, entity: string): ReadonlyMap<string, unknown> | undefined {
    return this.stageState(scope).find(kg, entity);
  }

  /**
   * The entity's cell; a detached one when it has no fields (a commit attaches it): `reuse`
   * when that is a cell of this store that is free (a state entry: see StateBackend.cellOf),
   * else a new one.
   */
  cellOf(scope: PartitionScope, kg: number, entity: string, reuse?: StateCell): Cell {
    const found = this.stageState(scope).find(kg, entity);
    if (found !== undefined) return found;
    const cell = freeCell(reuse);
    cell.born = this.changeCount;
    return cell;
  }

  /** A cell for an entity the caller knows is absent (StateBackend.freshCell): no look-up. */
  freshCell(_scope: PartitionScope, _kg: number, _entity: string, reuse?: StateCell): Cell {
    const cell = freeCell(reuse);
    cell.born = KNOWN_ABSENT;
    return cell;
  }

  hasCells(scope: PartitionScope): boolean {
    for (const groups of this.stageState(scope).index().values()) if (groups.size > 0) return true;
    return false;
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
    // Incremental snapshots: every written entity joins the newest tracked interval (once: the cell remembers).
    const cur = batch.tracking ? currentInterval(r) : undefined;
    if (batch.entities !== undefined) for (const e of batch.entities) applyEntity(stage, e, cur, this.changeCount);
    if (batch.writes.length > 0) {
      applyWrites(stage, batch.writes, cur);
      this.untrackedChanges++;
    }
    for (const t of batch.timerDeletes) r.timers.delete(t);
    for (const t of batch.timerAdds) r.timers.set(t);
    r.version++;
    r.progress = batch.progress;
    if (batch.outbox.length > 0) r.outbox.push({ version: r.version, entries: batch.outbox });
    if (batch.tracking) track(r, batch.tracking);
    this.commits++;
    this.changeCount++;
  }

  tracked(scope: PartitionScope): readonly TrackedInterval[] {
    return this.record(scope).tracking;
  }

  *entitiesOf(scope: PartitionScope, keyGroups: readonly number[]): Iterable<{ kg: number; entity: string; fields: ReadonlyMap<string, unknown> }> {
    const stage = this.stageState(scope);
    for (const kg of keyGroups) {
      const groups = stage.index().get(kg);
      if (groups) for (const [entity, cell] of groups) yield { kg, entity, fields: cell };
    }
  }

  /**
   * Restore: replace a partition's committed state by a checkpoint's (its key groups'
   * entities, timers, progress) at version 0, with one tracked interval after `lastBarrier`.
   * The caller installs every partition of a stage before any of them runs.
   */
  install(scope: PartitionScope, part: InstalledPartition, keyGroups: readonly number[]): void {
    const stage = this.stageState(scope);
    // Cells an overlay may still hold stop answering for the store.
    for (const kg of keyGroups) stage.dropGroup(kg);
    for (const { kg, entity, fields } of part.entities) {
      const cell = new Cell();
      for (const [f, v] of fields) cell.set(f, v);
      stage.attachIndexed(cell, kg, entity);
    }
    this.changeCount++;
    this.untrackedChanges++;
    const after = part.progress.lastBarrier ?? 0;
    // The partition's record is replaced below: forget cached ones.
    this.recordOfScope = new WeakMap();
    this.partitions.set(scopeId(scope), {
      version: 0,
      progress: structuredClone(part.progress),
      timers: CommittedTimers.of(part.timers),
      outbox: [],
      tracking: [new TrackedLog(after)],
    });
  }

  async clearOutbox(scope: PartitionScope, version: number): Promise<void> {
    const r = this.record(scope);
    // Versions are in commit order: drop the delivered ones from the front (usually all of them).
    let n = 0;
    while (n < r.outbox.length && r.outbox[n].version <= version) n++;
    if (n === r.outbox.length) r.outbox.length = 0;
    else if (n > 0) r.outbox.splice(0, n);
  }

  /** Tracked dirty entities of a partition, summed over its intervals (tests, metrics). */
  trackedEntities(scope: PartitionScope): number {
    return this.record(scope).tracking.reduce((n, t) => n + t.entities.size, 0);
  }

  /** Number of live entities of a stage (tests, metrics). */
  entityCount(job: string, stage: number): number {
    let n = 0;
    for (const groups of this.stageState({ job, stage, partition: 0 }).index().values()) n += groups.size;
    return n;
  }
}

/**
 * A partition's committed timers. The runtime deletes a timer with the very object it added
 * (its queue's node: StateBackend.releasesTimerEntries), so the entries added since the last
 * recover() are a list in which each entry knows its slot (SlottedTimerEntry): an add is a
 * push, a delete moves the last entry into the freed slot, no hashing (a window registers and
 * fires one timer per key and window; a set by identity cost ~150 ns per operation in Q5).
 * Entries that came from elsewhere (install, held when recover() handed copies to a runtime,
 * or without a slot) are found by content; so is an entry deleted through a copy of it (tests).
 */
class CommittedTimers {
  /** Entries added since the last recover(); own[e.storeSlot] === e. */
  private readonly own: SlottedTimerEntry[] = [];
  /** Entries a caller may know only by content, by timerId. */
  private readonly byId = new Map<string, TimerEntry>();

  static of(timers: readonly TimerEntry[]): CommittedTimers {
    const out = new CommittedTimers();
    for (const t of timers) out.byId.set(timerId(t), t);
    return out;
  }

  /** Add a timer; one with the same identity (domain, node, key, namespace, time) is replaced. */
  set(t: TimerEntry): void {
    if (this.byId.size > 0) this.byId.delete(timerId(t));
    if (!isSlotted(t)) this.byId.set(timerId(t), t);
    else if (!this.owns(t)) {
      t.storeSlot = this.own.length;
      this.own.push(t);
    }
  }

  delete(t: TimerEntry): void {
    if (isSlotted(t) && this.owns(t)) return this.removeAt(t.storeSlot);
    if (this.byId.size > 0 && this.byId.delete(timerId(t))) return;
    // A copy of an entry added since the last recover(): found by content (not the runtime's way).
    const i = this.own.findIndex((x) => sameTimer(x, t));
    if (i >= 0) this.removeAt(i);
  }

  /** Every entry; from now on callers know them by content (recover() hands them out to be copied). */
  handOut(): TimerEntry[] {
    for (const t of this.own) {
      this.byId.set(timerId(t), t);
      t.storeSlot = -1;
    }
    this.own.length = 0;
    return [...this.byId.values()];
  }

  all(): TimerEntry[] {
    return [...this.byId.values(), ...this.own];
  }

  /** Filed here (a slot of another store's, or a stale one, is not this list's). */
  private owns(t: SlottedTimerEntry): boolean {
    const i = t.storeSlot;
    return i >= 0 && i < this.own.length && this.own[i] === t;
  }

  private removeAt(i: number): void {
    const own = this.own;
    own[i].storeSlot = -1;
    const last = own.pop()!;
    if (i < own.length) {
      own[i] = last;
      last.storeSlot = i;
    }
  }
}

function isSlotted(t: TimerEntry): t is SlottedTimerEntry {
  return typeof (t as Partial<SlottedTimerEntry>).storeSlot === 'number';
}

function sameTimer(x: TimerEntry, t: TimerEntry): boolean {
  return x.time === t.time && x.key === t.key && x.node === t.node && x.domain === t.domain && x.ns === t.ns;
}

/** `reuse` when it is a cell of this store's kind that holds no entity's fields (not attached, no fields), else a new cell. */
function freeCell(reuse: StateCell | undefined): Cell {
  return reuse instanceof Cell && !reuse.attached && reuse.listed < 0 && reuse.size === 0 ? reuse : new Cell();
}

/** An entity's changes straight from the overlay: its cell, usually attached, is updated in place. */
function applyEntity(stage: StageCells, e: EntityChanges, cur: TrackedLog | undefined, changeCount: number): void {
  let cell = e.cell as Cell;
  if (!(cell instanceof Cell) || (!cell.attached && cell.born !== changeCount && cell.born !== KNOWN_ABSENT)) {
    // Looked up when the entity had no fields (or not this store's cell): a commit since may have given it some.
    const found = stage.find(e.kg, e.entity);
    cell = found ?? (cell instanceof Cell ? cell : new Cell());
  }
  if (cur !== undefined && cell.tracked !== cur) {
    cur.add(e.entity, e.kg);
    cell.tracked = cur;
  }
  if (cell.attached) {
    if (!e.applyTo(cell)) stage.detach(cell, e.kg, e.entity);
    return;
  }
  if (e.applyTo(cell)) stage.attach(cell, e.kg, e.entity);
  else cell.clearFields();
}

/** Field by field (the writes form of a commit). An entity's writes are consecutive: its cell is found once. */
function applyWrites(stage: StageCells, writes: readonly StateWrite[], cur: TrackedLog | undefined): void {
  let lastEntity: string | undefined;
  let lastKg = -1;
  let cell: Cell | undefined;
  for (const w of writes) {
    if (w.entity !== lastEntity || w.kg !== lastKg) {
      lastEntity = w.entity;
      lastKg = w.kg;
      cell = stage.find(w.kg, w.entity) ?? new Cell();
      if (cur !== undefined && cell.tracked !== cur) {
        cur.add(w.entity, w.kg);
        cell.tracked = cur;
      }
    }
    const c = cell!;
    if (w.value === undefined) {
      if (!c.attached) continue;
      c.delete(w.field);
      if (c.size === 0) stage.detach(c, w.kg, w.entity);
    } else {
      if (!c.attached) stage.attachIndexed(c, w.kg, w.entity);
      c.set(w.field, w.value);
    }
  }
}

/** The interval this commit's changes go to (the first one starts after the partition's last barrier). */
function currentInterval(r: PartitionRecord): TrackedLog {
  if (r.tracking.length === 0) r.tracking.push(new TrackedLog(r.progress.lastBarrier ?? 0));
  return r.tracking[r.tracking.length - 1];
}

/** After the writes (marked in commitSync): entities changed otherwise (timers), then maybe a new interval. */
function track(r: PartitionRecord, u: TrackingUpdate): void {
  const cur = r.tracking[r.tracking.length - 1];
  for (const e of u.entities) {
    // A state entry is its entity's cell (or was built on one): a key whose writes joined the
    // interval already is not listed again for its timers (any object of the entity may carry
    // the mark: it only says that the interval lists the entity).
    if (e instanceof Cell) {
      if (e.tracked === cur) continue;
      e.tracked = cur;
    }
    cur.add(e.entity, e.kg);
  }
  if (u.next) {
    r.tracking = r.tracking.filter((t) => t.after >= u.next!.dropBefore);
    r.tracking.push(new TrackedLog(u.next.after));
  }
}
