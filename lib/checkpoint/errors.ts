/**
 * Typed errors of the checkpoint coordinator. The pure steps throw them only for input
 * that breaks the protocol (a driver or partition bug, a plan mismatch); ordinary races
 * (late or duplicate acks, repeated commits) are not errors but ignored with a reason.
 */
import { FieldError, SluiceError } from '../errors.ts';

/** An ack came from a (stage, partition) that is not a participant of this plan. */
export class UnknownParticipantError extends SluiceError {
  readonly code = 'CHECKPOINT_UNKNOWN_PARTICIPANT';
  // The participant set is fixed by the plan: the same ack fails again.
  readonly retryable = false;
  constructor(
    readonly job: string,
    readonly stage: number,
    readonly partition: number,
    readonly epoch: number,
  ) {
    super(`job "${job}": ack for epoch ${epoch} from stage ${stage} partition ${partition}, which is not a participant of the plan`);
  }
}

/** An input of a coordinator step is malformed (not a finite time, a negative position, ...). */
export class InvalidCoordinatorInputError extends FieldError {
  readonly code = 'CHECKPOINT_INVALID_INPUT';
}

/**
 * A snapshot chain cannot be continued: an ack's delta is relative to another base, a
 * snapshot key repeats, a manifest does not match its pointer, or a position regressed.
 * Including it would make a checkpoint that restores wrong state.
 */
export class ManifestChainError extends SluiceError {
  readonly code = 'CHECKPOINT_MANIFEST_CHAIN';
  // Retrying replays the same inconsistency; the partition must redo its snapshot or an operator must look.
  readonly retryable = false;
  constructor(
    readonly epoch: number,
    readonly participant: string | null,
    readonly expected: string,
    readonly received: string,
  ) {
    super(`checkpoint ${epoch}${participant ? ` participant ${participant}` : ''}: expected ${expected}, received ${received}`);
  }
}

/** Persisted coordinator data belongs to another plan (fingerprint) or job. */
export class PlanMismatchError extends SluiceError {
  readonly code = 'CHECKPOINT_PLAN_MISMATCH';
  // A changed plan restores from a savepoint through the restore flow, not by resuming the chain.
  readonly retryable = false;
  constructor(
    readonly what: string,
    readonly expected: string,
    readonly received: string,
  ) {
    super(`${what}: expected ${expected}, received ${received}; a changed plan must be restored from a savepoint`);
  }
}

/** onCommitted named an epoch the coordinator never decided to commit. */
export class CommitMismatchError extends SluiceError {
  readonly code = 'CHECKPOINT_COMMIT_MISMATCH';
  readonly retryable = false;
  constructor(
    readonly epoch: number,
    readonly inFlightEpoch: number | null,
    readonly detail: string,
  ) {
    super(`commit of epoch ${epoch} (in flight: ${inFlightEpoch ?? 'none'}): ${detail}`);
  }
}

/** A savepoint with another label is still pending. */
export class SavepointPendingError extends SluiceError {
  readonly code = 'CHECKPOINT_SAVEPOINT_PENDING';
  // Retry once the pending savepoint has completed.
  readonly retryable = true;
  constructor(
    readonly pendingLabel: string,
    readonly requestedLabel: string,
  ) {
    super(`savepoint "${pendingLabel}" is still pending; cannot request "${requestedLabel}" before it completes`);
  }
}
