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
import type { OutboxEntry } from '../transport/envelope.ts';

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

export function timerId(t: TimerEntry): string {
  return `${t.domain}\u0001${t.node}\u0001${t.key}\u0001${t.ns}\u0001${t.time}`;
}

export interface ChannelProgress {
  /** Highest sequence number applied. */
  seq: number;
  /** Highest log position applied, for source channels that carry offsets. */
  offset?: string;
  watermark: number;
  idle: boolean;
}

/** The partition's position, committed atomically with its state and outputs. */
export interface PartitionProgress {
  readonly inputs: Record<string, ChannelProgress>;
  /** Last sequence number used per output channel (`${edge}:${self}>${target}`) and per sink. */
  readonly outputs: Record<string, number>;
  /** The watermark this partition last forwarded. */
  readonly outputWatermark: number;
  readonly outputIdle: boolean;
}

export interface CommitBatch {
  readonly scope: PartitionScope;
  /** The version read at recovery or the last commit; the commit fails if another writer moved it. */
  readonly expectedVersion: number;
  readonly writes: readonly StateWrite[];
  readonly timerAdds: readonly TimerEntry[];
  readonly timerDeletes: readonly TimerEntry[];
  readonly progress: PartitionProgress;
  /** Outputs to deliver after the commit; kept until clearOutbox. */
  readonly outbox: readonly OutboxEntry[];
}

export interface RecoveredPartition {
  readonly version: number;
  readonly progress: PartitionProgress;
  readonly timers: readonly TimerEntry[];
  /** Outputs committed but not yet confirmed delivered: deliver them again (receivers deduplicate). */
  readonly outbox: readonly OutboxEntry[];
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
  /** Apply a batch atomically: all of it or nothing. Throws CommitConflictError when the version moved. */
  commit(batch: CommitBatch): Promise<void>;
  /** The outbox of the given version has been delivered. */
  clearOutbox(scope: PartitionScope, version: number): Promise<void>;
}

export function emptyProgress(): PartitionProgress {
  return { inputs: {}, outputs: {}, outputWatermark: Number.NEGATIVE_INFINITY, outputIdle: false };
}
