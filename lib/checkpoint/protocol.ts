/**
 * The checkpoint coordinator protocol as data: what the coordinator knows, what it is
 * told (acks, activity, commit confirmations) and what it decides. The decisions are
 * pure functions of these types (coordinator.ts); the driver (a Step Functions state
 * machine on AWS, an in-process loop locally) does every I/O the decisions name.
 *
 * Everything here is plain JSON (no Map, Set, class or function): the state travels
 * through Step Functions payloads and control items unchanged.
 *
 * Epoch numbers are never reused: an aborted epoch's number is burned, so a late ack or
 * a stray barrier of an aborted attempt can never be mistaken for a newer one.
 */

/** A (stage, partition) that must acknowledge every epoch. */
export interface Participant {
  readonly stage: number;
  readonly partition: number;
  /** Sources this partition reads (source stages only): it reports a position for each. */
  readonly sources: readonly string[];
}

/** `${stage}/${partition}`: the key of a participant in records. */
export type ParticipantKey = string;
/** `${source}#${partition}`: one partition of one source (partition p feeds participant partition p). */
export type SourcePartitionKey = string;

export function participantKey(p: { readonly stage: number; readonly partition: number }): ParticipantKey {
  return `${p.stage}/${p.partition}`;
}

export function sourcePartitionKey(source: string, partition: number): SourcePartitionKey {
  return `${source}#${partition}`;
}

/**
 * Where a participant wrote its snapshot for an epoch. `full` snapshots contain the whole
 * partition state; the others contain the keys changed since the barrier's base epoch.
 * Keys must be unique per (stage, partition, epoch): objects are immutable.
 */
export interface SnapshotHandle {
  readonly key: string;
  readonly bytes: number;
  readonly entities: number;
  readonly full: boolean;
}

/** One participant's acknowledgement of barrier `epoch`. */
export interface Ack {
  readonly epoch: number;
  readonly stage: number;
  readonly partition: number;
  /** The base epoch the barrier named; the delta covers every change since it. */
  readonly baseEpoch: number;
  /** null: nothing changed since the base epoch (no object written, the chain is unchanged). */
  readonly snapshot: SnapshotHandle | null;
  /**
   * Source partitions only: per source partition, the number of logged records that
   * precede the barrier (records at positions below it are in this checkpoint).
   */
  readonly positions: Readonly<Record<SourcePartitionKey, number>>;
  /** When the partition aligned the barrier, and when it wrote the ack. */
  readonly alignedAt: number;
  readonly ackedAt: number;
  /** Event-time timers pending at the barrier: the earliest and the partition's watermark (AWS wake-ups). */
  readonly timers?: { readonly earliest: number; readonly watermark: number };
}

/** One link of a partition's snapshot chain in a manifest. */
export interface ChainLink {
  readonly epoch: number;
  readonly key: string;
  readonly bytes: number;
  readonly entities: number;
  readonly full: boolean;
}

export interface ManifestPartition {
  readonly stage: number;
  readonly partition: number;
  /** Apply in order to rebuild the partition's state: oldest first, a full snapshot can only be first. */
  readonly chain: readonly ChainLink[];
}

/**
 * A completed checkpoint. Self-sufficient: its chains name every object needed to
 * restore, so no other manifest has to be read. Built deterministically from the
 * previous manifest and the acks (createdAt is the last ack's time), so a coordinator
 * that rebuilds it after a crash writes the same bytes under the same key.
 */
export interface Manifest {
  readonly format: 1;
  readonly job: string;
  /** Fingerprint of the compiled plan: a manifest only continues the chain of the same plan. */
  readonly fingerprint: string;
  readonly epoch: number;
  /** The epoch whose chains this one extends (0: none). */
  readonly baseEpoch: number;
  readonly createdAt: number;
  readonly partitions: Readonly<Record<ParticipantKey, ManifestPartition>>;
  readonly positions: Readonly<Record<SourcePartitionKey, number>>;
  readonly savepoint: { readonly label: string } | null;
}

/** The commit pointer control item (written with a conditional write: the "ZooKeeper" role). */
export interface CommitPointer {
  readonly epoch: number;
  readonly manifestKey: string;
  readonly committedAt: number;
}

export interface CompletedCheckpoint {
  readonly epoch: number;
  readonly pointer: CommitPointer;
  readonly completedAt: number;
  readonly manifest: Manifest;
}

/** An ack as kept in the in-flight record. */
export interface RecordedAck {
  readonly baseEpoch: number;
  readonly snapshot: SnapshotHandle | null;
  readonly positions: Readonly<Record<SourcePartitionKey, number>>;
  readonly alignedAt: number;
  readonly ackedAt: number;
  readonly recordedAt: number;
}

export interface InFlightEpoch {
  readonly epoch: number;
  /** Last completed epoch when opened (0: none): deltas are relative to it. */
  readonly baseEpoch: number;
  readonly openedAt: number;
  readonly deadline: number;
  readonly savepoint: { readonly label: string } | null;
  /** Participants asked for a full snapshot (chain compaction, savepoints, the first epoch). */
  readonly fullSnapshot: readonly ParticipantKey[];
  readonly acks: Readonly<Record<ParticipantKey, RecordedAck>>;
  /** Set once decide() returned commit: from then on the epoch can only complete, never abort. */
  readonly committing: Manifest | null;
}

/** A completed checkpoint kept for log retention. */
export interface RetainedCheckpoint {
  readonly epoch: number;
  readonly completedAt: number;
  readonly positions: Readonly<Record<SourcePartitionKey, number>>;
}

export interface SavepointRecord {
  readonly epoch: number;
  readonly label: string;
  readonly manifestKey: string;
  readonly completedAt: number;
}

export interface CoordinatorCounters {
  readonly opened: number;
  readonly completed: number;
  readonly aborted: number;
  readonly acks: number;
  readonly duplicateAcks: number;
  readonly ignoredAcks: number;
  readonly savepoints: number;
}

export interface LogRetention {
  /** The last `epochs` completed checkpoints stay restorable with full replay (>= 1). */
  readonly epochs: number;
  /** Logs also go back to a checkpoint completed at least `ms` ago (when one is known). */
  readonly ms: number;
}

export interface CoordinatorConfig {
  /** An epoch not fully acknowledged this long after opening is aborted. */
  readonly timeoutMs: number;
  /** Minimum time between two epoch openings (savepoints bypass it). */
  readonly minIntervalMs: number;
  /** A chain reaching this length asks its partition for a full snapshot next (>= 1). */
  readonly maxChainLength: number;
  readonly retention: LogRetention;
  /** Bound on the retained-checkpoint history (thinned conservatively beyond it). */
  readonly historyLimit: number;
  /** Bound on the list of recently aborted epoch numbers (for classifying late acks). */
  readonly abortedLimit: number;
}

export const DEFAULT_CONFIG: CoordinatorConfig = {
  timeoutMs: 60_000,
  minIntervalMs: 0,
  maxChainLength: 10,
  retention: { epochs: 1, ms: 0 },
  historyLimit: 256,
  abortedLimit: 64,
};

/** What the deployed plan says: fixed for the life of a job's chain. */
export interface CoordinatorSetup {
  readonly job: string;
  readonly fingerprint: string;
  readonly participants: readonly Participant[];
  readonly config?: Partial<Omit<CoordinatorConfig, 'retention'>> & { readonly retention?: Partial<LogRetention> };
}

export interface CoordinatorState {
  readonly format: 1;
  readonly job: string;
  readonly fingerprint: string;
  readonly config: CoordinatorConfig;
  /** Sorted by (stage, partition). */
  readonly participants: readonly Participant[];
  /** Highest epoch ever opened (0: none). The next epoch is this + 1. */
  readonly highestEpoch: number;
  readonly lastOpenedAt: number | null;
  readonly lastCompleted: CompletedCheckpoint | null;
  readonly inFlight: InFlightEpoch | null;
  /** Recently aborted epochs, oldest first, at most config.abortedLimit. */
  readonly aborted: readonly number[];
  /** Completed checkpoints still inside log retention, oldest first; the first is the log truncation point. */
  readonly history: readonly RetainedCheckpoint[];
  /** Never truncated away: their manifests and the objects their chains name must be kept. */
  readonly savepoints: readonly SavepointRecord[];
  readonly pendingSavepoint: { readonly label: string; readonly requestedAt: number } | null;
  /** Logs have been released through this epoch (0: none). */
  readonly truncatedThrough: number;
  readonly counters: CoordinatorCounters;
}

/**
 * What openEpoch is told about input since the last completed checkpoint. Either form
 * suffices: heads are compared with the last manifest's positions, touched is a flag
 * list (a wake-up item the ingestion stage sets).
 */
export interface Activity {
  /** Per source partition, the number of records logged so far. */
  readonly heads?: Readonly<Record<SourcePartitionKey, number>>;
  /** Source partitions known to have received input since the last completed checkpoint. */
  readonly touched?: readonly SourcePartitionKey[];
}

export interface BarrierTarget {
  readonly source: string;
  readonly partition: number;
  readonly stage: number;
}

export type AbortReason = 'timeout' | 'coordinator-restarted' | 'superseded';

export type IgnoreReason =
  | 'duplicate'
  | 'epoch-completed'
  | 'epoch-aborted'
  | 'epoch-never-opened'
  | 'epoch-superseded'
  | 'already-committed'
  | 'older-than-last-committed';

/** What the driver must do, in order. */
export type Decision =
  | {
      readonly kind: 'inject-barriers';
      readonly epoch: number;
      readonly baseEpoch: number;
      readonly deadline: number;
      readonly sources: readonly BarrierTarget[];
      readonly fullSnapshot: readonly ParticipantKey[];
      readonly savepoint: { readonly label: string } | null;
    }
  | { readonly kind: 'wait'; readonly until: number; readonly epoch: number | null; readonly reason: 'epoch-in-flight' | 'acks-pending' | 'min-interval' }
  | { readonly kind: 'idle'; readonly reason: 'no-activity' | 'no-epoch-in-flight' }
  | {
      readonly kind: 'commit';
      readonly epoch: number;
      readonly manifest: Manifest;
      /** Where to put the manifest object (deterministic, so a retry rewrites the same key). */
      readonly manifestKey: string;
      /** Condition of the pointer write: the pointer's current epoch (0: no pointer yet). */
      readonly expectedPointerEpoch: number;
    }
  | { readonly kind: 'commit-sinks'; readonly epoch: number }
  | { readonly kind: 'abort'; readonly epoch: number; readonly reason: AbortReason; readonly discardSnapshots: readonly string[] }
  | { readonly kind: 'discard-snapshots'; readonly epoch: number; readonly keys: readonly string[]; readonly reason: IgnoreReason }
  | {
      readonly kind: 'truncate';
      readonly epoch: number;
      /** Logged input no retained checkpoint needs; null: the truncation point did not move. */
      readonly logs: { readonly throughEpoch: number; readonly belowPositions: Readonly<Record<SourcePartitionKey, number>> } | null;
      /** Outbox entries staged for epochs up to this one are covered by the checkpoint. */
      readonly outboxes: { readonly throughEpoch: number };
    };

export interface RejectedAck {
  readonly epoch: number;
  readonly stage: number;
  readonly partition: number;
  /** The SluiceError code and message that recordAck raised for it. */
  readonly code: string;
  readonly message: string;
}

export interface StepResult {
  readonly state: CoordinatorState;
  readonly decisions: readonly Decision[];
  /** Set when the input was accepted but had no effect, with why. */
  readonly ignored?: { readonly reason: IgnoreReason; readonly detail: string };
  /** resume() only: ack items that broke the protocol and were treated as missing. */
  readonly rejected?: readonly RejectedAck[];
}

/**
 * What the driver persisted, read back on resume. `record` is toRecord(state) as last
 * written (write-ahead: before executing a step's decisions); `pointer` and `manifest`
 * are the commit pointer item and the object it names; `acks` are the ack items found.
 */
export interface PersistedCoordinator {
  readonly setup: CoordinatorSetup;
  readonly record: CoordinatorRecord | null;
  readonly pointer: CommitPointer | null;
  readonly manifest: Manifest | null;
  readonly acks?: readonly Ack[];
}

/**
 * The coordinator's control item: the state without the manifests (the last one is
 * re-read through the pointer; a committing one is rebuilt from the acks), which keeps
 * the item small.
 */
export interface CoordinatorRecord extends Omit<CoordinatorState, 'lastCompleted' | 'inFlight'> {
  readonly lastCompleted: Omit<CompletedCheckpoint, 'manifest'> | null;
  readonly inFlight: (Omit<InFlightEpoch, 'committing'> & { readonly committing: boolean }) | null;
}

export function manifestObjectKey(job: string, epoch: number): string {
  return `${job}/manifests/${String(epoch).padStart(12, '0')}.json`;
}
