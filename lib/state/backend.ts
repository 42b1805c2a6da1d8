/**
 * Where working state lives (the state backend), separate from where snapshots go
 * (checkpoint storage, lib/checkpoint). A backend provides a few primitives; the
 * policy (overlay per batch, TTL, one commit per batch) is shared in StateTxn and
 * the partition runtime, so the in-memory and DynamoDB stores differ only here.
 *
 * Layout: state is addressed by (key group, entity, field). An entity is one key of
 * one operator (`${operator}\u0001${keyString}`); fields are its named states and
 * map entries. Keeping key groups explicit is what lets rescaling move state.
 */
import type { Barrier, Envelope, OutboxEntry } from '../transport/envelope.ts';
import type { StreamRecord } from '../api/types.ts';

export interface PartitionScope {
  readonly job: string;
  readonly stage: number;
  readonly partition: number;
}

export function scopeId(scope: PartitionScope): string {
  return `${scope.job}/${scope.stage}/${scope.partition}`;
}

export interface StateWrite {
  readonly kg: number;
  readonly entity: string;
  readonly field: string;
  /** undefined deletes the field. */
  readonly value: unknown;
}

export interface TimerEntry {
  readonly node: number;
  readonly domain: 'event' | 'processing';
  readonly time: number;
  readonly kg: number;
  readonly key: string;
  /** Operator-defined namespace (for example a window), '' for user timers. */
  readonly ns: string;
}

/**
 * A timer entry that a store may file by position: `storeSlot` is the store's to set (the
 * entry's index in the store's own list, -1: none). The runtime's queue nodes are such
 * entries, so a store that is handed the very object to delete finds it without hashing.
 * Not part of the entry's content (an accessor: JSON and object spreads leave it out).
 */
export interface SlottedTimerEntry extends TimerEntry {
  storeSlot: number;
}

export function timerId(t: TimerEntry): string {
  return `${t.domain}\u0001${t.node}\u0001${t.key}\u0001${t.ns}\u0001${t.time}`;
}

export interface ChannelProgress {
  /** Highest sequence number applied. */
  seq: number;
  /** Highest log position applied, for source channels that carry offsets. */
  offset?: string;
  /** Offset channels: records consumed so far (a barrier's source position: the records before it). */
  records?: number;
  watermark: number;
  idle: boolean;
  /** Source channels on AWS: arrival time of the last data, for idle probes (runtime/idleness.ts). */
  lastDataAt?: number;
  /** Idle source channels whose source advances while idle: arrival time of the latest probe (runtime/idleness.ts). */
  idleAt?: number;
}

/** The partition's position, committed atomically with its state and outputs. */
export interface PartitionProgress {
  readonly inputs: Record<string, ChannelProgress>;
  /** Last sequence number used per output channel (`${edge}:${self}>${target}`) and per sink. */
  readonly outputs: Record<string, number>;
  /** The watermark this partition last forwarded. */
  readonly outputWatermark: number;
  readonly outputIdle: boolean;
  /** Checkpoints: the last barrier epoch this partition aligned and snapshotted (0 or absent: none). */
  readonly lastBarrier?: number;
  /** Checkpoints: a barrier seen on some input channels but not yet on all of them. */
  readonly aligning?: AlignmentProgress;
  /**
   * Checkpoints: envelopes that arrived on a channel after its barrier, while other channels
   * still owed theirs. Committed here (their seq is already consumed), replayed in arrival
   * order once the barrier is aligned: never reordered within a channel, never dropped.
   */
  readonly held?: readonly Envelope[];
  /**
   * In-place restore on AWS (lib/aws/restore/restore.ts): per source channel, the record count the
   * input log's replay must reach before the channel's queue continues (records
   * `inputs[c].records` .. `replay[c] - 1` are in the log). Cleared as they are consumed.
   */
  readonly replay?: Readonly<Record<string, number>>;
}

export interface AlignmentProgress {
  readonly barrier: Barrier;
  /** Channels that delivered the barrier, with the barrier's position on each (the snapshot's cut). */
  readonly arrived: Readonly<Record<string, { readonly seq: number; readonly offset?: string; readonly records?: number }>>;
  /** When the first copy arrived (processing time). */
  readonly startedAt: number;
  /** Source positions carried by the barrier on source channels. */
  readonly positions: Readonly<Record<string, number>>;
}

/**
 * Incremental snapshots: the entities changed after one barrier (their state or their
 * timers), kept durably with the partition so that a crash between barriers does not
 * lose track of dirty keys.
 */
export interface TrackedInterval {
  /** The barrier epoch the interval started after (the partition's lastBarrier then). */
  readonly after: number;
  /** entity -> key group */
  readonly entities: ReadonlyMap<string, number>;
  /**
   * Optional: every entity of `entities` at least once (one may repeat), without building
   * the map; for a caller that deduplicates anyway (a snapshot collects the entities of
   * several intervals into one map).
   */
  forEachChanged?(fn: (kg: number, entity: string) => void): void;
}

/** Changes of one commit for the tracked intervals. */
export interface TrackingUpdate {
  /**
   * Entities changed other than by this batch's writes (their timers). Every written
   * entity counts as changed too; all go to the newest interval (repeats are fine).
   */
  readonly entities: readonly { readonly entity: string; readonly kg: number }[];
  /**
   * Set by the commit that snapshotted barrier `after`: after adding the entities above,
   * start a new interval after that barrier and forget intervals that started before
   * `dropBefore` (the barrier's base epoch, a completed checkpoint that covers them).
   */
  readonly next?: { readonly after: number; readonly dropBefore: number };
}

/**
 * An entity's committed fields as an in-memory store keeps them (StateBackend.cellOf). A
 * cell in the store (`attached`) is updated in place by every later commit, so an overlay
 * keeps it across batches instead of peeking per batch; a detached cell (the entity had no
 * fields when it was looked up) answers for the batch that looked it up.
 */
export interface StateCell {
  /** A committed field's value (undefined: absent). */
  get(field: string): unknown;
  /** Every committed field. */
  forEach(fn: (value: unknown, field: string) => void): void;
  /** In the store: later commits show through this cell until one drops the entity's last field. */
  readonly attached: boolean;
  /**
   * Is the field's list the store's alone (WritableFields.setOwned), so that a commit may
   * extend it in place (WritableFields.extend)? Absent: never (a remote store's view).
   */
  extensible?(field: string): boolean;
}

/** What EntityChanges.applyTo writes into: a store's fields of one entity. */
export interface WritableFields {
  set(field: string, value: unknown): void;
  /**
   * set() of a list that no one outside the store holds (an overlay's append made it and
   * handed it to no one): later commits may extend it in place instead of replacing it.
   */
  setOwned(field: string, list: unknown[]): void;
  /** Is the field's list one set by setOwned (and not set, deleted or replaced since)? */
  extensible(field: string): boolean;
  /** Push `items` onto the field's list in place (only when extensible(field)). */
  extend(field: string, items: readonly unknown[]): void;
  delete(field: string): void;
  readonly size: number;
}

/**
 * One entity's changes in a batch, handed to a store with cellOf (CommitBatch.entities)
 * straight from the overlay: no write object per field.
 */
export interface EntityChanges {
  readonly kg: number;
  readonly entity: string;
  /** The cell cellOf() answered for the entity in this batch. */
  readonly cell: StateCell;
  /**
   * Apply the batch's writes to `fields` (set every written field, delete every deleted one).
   * Returns whether any field is left.
   */
  applyTo(fields: WritableFields): boolean;
}

export interface CommitBatch {
  readonly scope: PartitionScope;
  /** The version read at recovery or the last commit; the commit fails if another writer moved it. */
  readonly expectedVersion: number;
  /** Every written field once, with its final value (empty when `entities` carries the writes). */
  readonly writes: readonly StateWrite[];
  /**
   * Stores with cellOf: the batch's writes per entity, instead of `writes` (then empty). Each
   * entity at most once, and the same entity not also in `writes`.
   */
  readonly entities?: readonly EntityChanges[];
  readonly timerAdds: readonly TimerEntry[];
  readonly timerDeletes: readonly TimerEntry[];
  readonly progress: PartitionProgress;
  /** Outputs to deliver after the commit; kept until clearOutbox. */
  readonly outbox: readonly OutboxEntry[];
  /** Checkpointed runs: dirty-key tracking for incremental snapshots (backends with tracksChanges). */
  readonly tracking?: TrackingUpdate;
  /**
   * Logged input (PartitionDeps.logInput): the source records this commit consumed, in
   * order; the backend stores them with the commit (all or nothing) so a restore can replay them.
   */
  readonly inputLog?: readonly InputLogAppend[];
}

/** Source records consumed on one log channel, in order: records `from` .. `from + records.length - 1` of the channel. */
export interface InputLogAppend {
  readonly channel: string;
  /** The source partition (`${source}#${partition}`) whose checkpoint positions count these records. */
  readonly source: string;
  /** Records consumed on the channel before these (ChannelProgress.records). */
  readonly from: number;
  /** The barrier these records follow (0: none): they belong to epoch `after + 1`. */
  readonly after: number;
  readonly records: readonly StreamRecord[];
}

export interface RecoveredPartition {
  readonly version: number;
  readonly progress: PartitionProgress;
  readonly timers: readonly TimerEntry[];
  /** Outputs committed but not yet confirmed delivered: deliver them again (receivers deduplicate). */
  readonly outbox: readonly OutboxEntry[];
  /** Backends with tracksChanges: the tracked intervals, oldest first. */
  readonly tracking?: readonly TrackedInterval[];
}

export interface StateBackend {
  /** Read the partition's committed position, timers and undelivered outbox. */
  recover(scope: PartitionScope): Promise<RecoveredPartition>;
  /** True when peek() needs prefetch() first (remote stores); false for in-memory stores. */
  readonly needsPrefetch: boolean;
  /** Load the entities a batch will touch, so that peek() can answer synchronously. */
  prefetch(scope: PartitionScope, entities: ReadonlyArray<{ kg: number; entity: string }>): Promise<void>;
  /** The committed fields of one entity (undefined: none). */
  peek(scope: PartitionScope, kg: number, entity: string): ReadonlyMap<string, unknown> | undefined;
  /**
   * Optional (in-memory stores): the entity's cell, which peek() would answer the fields of.
   * StateTxn keeps an attached cell across batches instead of peeking once per batch, and
   * commits its writes as CommitBatch.entities, which a store with cellOf must accept.
   * Remote stores (needsPrefetch) leave it unset. `reuse`: an object of the caller's that the
   * store may take as the entity's new cell when it has none (an in-memory store's state
   * entries are built on its cells: StateTxn's entry then is the cell, one object per key).
   */
  cellOf?(scope: PartitionScope, kg: number, entity: string, reuse?: StateCell): StateCell;
  /**
   * Optional, with cellOf: a new detached cell for an entity the caller knows has no fields in
   * the store, attached by the commit that gives it some without a look-up. A StateTxn that
   * began on a stage without cells (hasCells) knows every entity of its partition with fields
   * (they were all made through it), until untrackedChanges moves. `reuse`: as for cellOf.
   */
  freshCell?(scope: PartitionScope, kg: number, entity: string, reuse?: StateCell): StateCell;
  /** Optional, with freshCell: does any entity of the partition's stage have fields? */
  hasCells?(scope: PartitionScope): boolean;
  /**
   * Optional, with freshCell: a count of changes that may have given entities fields other
   * than through a StateTxn's entries (install, commits in the `writes` form).
   */
  readonly untrackedChanges?: number;
  /** Apply a batch atomically: all of it or nothing. Throws CommitConflictError when the version moved. */
  commit(batch: CommitBatch): Promise<void>;
  /**
   * Optional (in-memory stores): commit() done synchronously, in one step. The runtime
   * prefers it: a batch's commit then costs no promise and no turn of the event loop.
   */
  commitSync?(batch: CommitBatch): void;
  /** The outbox of the given version has been delivered. */
  clearOutbox(scope: PartitionScope, version: number): Promise<void>;
  /**
   * Optional, for checkpoints: the backend keeps CommitBatch.tracking durably and returns it
   * from recover(). Incremental snapshots need it; without it the runtime refuses barriers.
   */
  readonly tracksChanges?: boolean;
  /** With tracksChanges: the committed tracked intervals, oldest first (read only; valid until the next commit). */
  tracked?(scope: PartitionScope): readonly TrackedInterval[];
  /**
   * Optional: true when the store keeps no reference to a TimerEntry once a commit deleted
   * it (it forgets deleted timers, and hands recover() the entries it holds, which the
   * runtime copies). The runtime may then reuse the objects of deleted timers for new ones
   * (a window fires one timer per key and window). Stores that keep entries in logs leave it unset.
   */
  readonly releasesTimerEntries?: boolean;
  /** Optional, for full snapshots: every committed entity of the given key groups of a stage (remote stores answer asynchronously). */
  entitiesOf?(
    scope: PartitionScope,
    keyGroups: readonly number[],
  ): Iterable<{ kg: number; entity: string; fields: ReadonlyMap<string, unknown> }> | AsyncIterable<{ kg: number; entity: string; fields: ReadonlyMap<string, unknown> }>;
}

export function emptyProgress(): PartitionProgress {
  return { inputs: {}, outputs: {}, outputWatermark: Number.NEGATIVE_INFINITY, outputIdle: false };
}
