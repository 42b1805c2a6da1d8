/** What a partition runtime (partition.ts) needs to open, and what a batch returns. */
import type { Clock } from '../api/types.ts';
import type { BlobStore } from '../checkpoint/storage.ts';
import type { PhysicalPlan } from '../graph/compile.ts';
import type { StateBackend } from '../state/backend.ts';
import type { OutboxEntry } from '../transport/envelope.ts';

export interface PartitionDeps {
  readonly plan: PhysicalPlan;
  readonly stage: number;
  readonly partition: number;
  readonly backend: StateBackend;
  readonly clock: Clock;
  /** Fault-injection hook: runs after processing, before the commit. */
  readonly beforeCommit?: () => void;
  /**
   * Checkpointed runs: where snapshot objects go. With it the partition tracks changed
   * keys durably (the backend must have tracksChanges) and handles barriers; without
   * it a barrier is an InvariantError.
   */
  readonly checkpointStore?: BlobStore;
  /**
   * Log the records consumed on source log channels (those with offsets: SQS) with each
   * commit (CommitBatch.inputLog), so a restore can replay what the queue no longer holds.
   */
  readonly logInput?: boolean;
}

export interface BatchResult {
  /** Outputs committed with this batch; deliver them, then call outboxDelivered(version). */
  readonly outbox: OutboxEntry[];
  readonly version: number;
  readonly recordsIn: number;
  readonly duplicatesDropped: number;
  readonly committed: boolean;
  /** Location ids of the records and callbacks parked as dead letters in this commit. */
  readonly parked: readonly string[];
  /** Records dropped as late in this batch, per operator name (absent names: none). */
  readonly lateDropped: Readonly<Record<string, number>>;
}

export interface OperatorStats {
  readonly name: string;
  readonly recordsIn: number;
}
