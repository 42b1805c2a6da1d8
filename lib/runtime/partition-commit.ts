/**
 * The commit a partition assembles (partition.ts): its state writes, timer changes,
 * progress, outbox and logged input since its last commit, as one CommitBatch, with the
 * entities it changed when checkpoints track them (snapshots.ts).
 */
import type { CommitBatch, EntityChanges, InputLogAppend, PartitionScope, TrackingUpdate } from '../state/backend.ts';
import type { StateTxn } from '../state/txn.ts';
import type { OutboxEntry } from '../transport/envelope.ts';
import { copyProgress, type MutableProgress } from './checkpoints.ts';
import type { NodeRuntime } from './context.ts';
import { timerChanges } from './snapshots.ts';

/** What a partition's commit is assembled from (commitBatchOf). */
export interface CommitInputs {
  readonly scope: PartitionScope;
  /** The version the commit expects the store to hold. */
  readonly version: number;
  readonly txn: StateTxn;
  /** The stage's nodes, whose timer queues hold the timer changes. */
  readonly order: readonly NodeRuntime[];
  readonly progress: MutableProgress;
  readonly outbox: readonly OutboxEntry[];
  readonly inputLog: readonly InputLogAppend[];
  /** A checkpointed run: commits name the entities they changed. */
  readonly tracking: boolean;
  /** Even an envelope without records moves a channel's position, which must be committed. */
  readonly progressMoved: boolean;
  /** An aligned barrier: forces the commit and starts a new tracked interval. */
  readonly next: TrackingUpdate['next'] | undefined;
  /** Fault injection: runs once the changes are taken, before anything is decided. */
  readonly beforeCommit: (() => void) | undefined;
}

/** The batch to commit, or undefined when nothing changed. */
export function commitBatchOf(c: CommitInputs): CommitBatch | undefined {
  const { scope, version, txn, order, progress, outbox, inputLog, tracking, progressMoved, next, beforeCommit } = c;
  const { writes, entities } = txn.changes();
  // A commit goes to the interval after the last barrier; one that starts a new interval reports every key.
  const interval = next ? undefined : (progress.lastBarrier ?? 0);
  const timerEntities = tracking ? [] : undefined;
  const { adds: timerAdds, deletes: timerDeletes } = timerChanges(order, timerEntities, interval);
  beforeCommit?.();
  const changed = next !== undefined || progressMoved || outbox.length > 0 || writes.length > 0 || entities !== undefined || timerAdds.length > 0 || timerDeletes.length > 0;
  if (!changed) return undefined;
  const batch: CommitBatch = {
    scope,
    expectedVersion: version,
    writes,
    timerAdds,
    timerDeletes,
    progress: copyProgress(progress),
    outbox,
  };
  if (entities) (batch as { entities?: readonly EntityChanges[] }).entities = entities;
  if (timerEntities) (batch as { tracking?: TrackingUpdate }).tracking = next ? { entities: timerEntities, next } : { entities: timerEntities };
  if (inputLog.length) (batch as { inputLog?: readonly InputLogAppend[] }).inputLog = inputLog;
  return batch;
}
