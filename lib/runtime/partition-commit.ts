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

/**
 * The batch to commit on `version`, or undefined when nothing changed. `progressMoved`:
 * even an envelope without records moves a channel's position, which must be committed;
 * `next` (an aligned barrier) forces the commit and starts a new tracked interval;
 * `tracking`: a checkpointed run (commits name the entities they changed).
 * `beforeCommit` (fault injection) runs once the changes are taken, before anything is decided.
 */
export function commitBatchOf(
  scope: PartitionScope,
  version: number,
  txn: StateTxn,
  order: readonly NodeRuntime[],
  progress: MutableProgress,
  outbox: readonly OutboxEntry[],
  inputLog: readonly InputLogAppend[],
  tracking: boolean,
  progressMoved: boolean,
  next: TrackingUpdate['next'] | undefined,
  beforeCommit: (() => void) | undefined,
): CommitBatch | undefined {
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
