/** Typed errors of the checkpoint drivers and local storage (the pure protocol's are in errors.ts). */
import { SluiceError } from '../errors.ts';

/** An immutable object was written again with different bytes. */
export class BlobOverwriteError extends SluiceError {
  readonly code = 'CHECKPOINT_BLOB_OVERWRITE';
  // The same write fails again: two writers disagree about an immutable object.
  readonly retryable = false;
  constructor(readonly key: string) {
    super(`blob ${key}: expected a new key or the same bytes as stored (objects are immutable), received different bytes`);
  }
}

/** A blob key that would leave the store's directory or is malformed. */
export class BlobKeyError extends SluiceError {
  readonly code = 'CHECKPOINT_BLOB_KEY';
  readonly retryable = false;
  constructor(readonly key: string) {
    super(`blob key: expected a relative path of non-empty segments without "." or "..", received ${JSON.stringify(key)}`);
  }
}

/** Another process holds the pointer lock for too long. */
export class PointerLockedError extends SluiceError {
  readonly code = 'CHECKPOINT_POINTER_LOCKED';
  readonly retryable = true;
  constructor(
    readonly path: string,
    readonly holder: string,
  ) {
    super(`pointer lock ${path} is held by ${holder}; another sluice process may be running on this checkpoint directory`);
  }
}

/** The commit pointer names an epoch the coordinator did not expect (another coordinator on the same chain). */
export class PointerConflictError extends SluiceError {
  readonly code = 'CHECKPOINT_POINTER_CONFLICT';
  readonly retryable = false;
  constructor(
    readonly expectedEpoch: number,
    readonly foundEpoch: number,
  ) {
    super(`commit pointer: expected epoch ${expectedEpoch} (or the epoch being committed), found epoch ${foundEpoch}; is another coordinator running on this job?`);
  }
}

/** A checkpoint or savepoint cannot be used to start this job. */
export class RestoreError extends SluiceError {
  readonly code = 'CHECKPOINT_RESTORE';
  readonly retryable = false;
  constructor(
    readonly what: string,
    readonly expected: string,
    readonly received: string,
  ) {
    super(`${what}: expected ${expected}, received ${received}`);
  }
}

/** A savepoint's state does not fit the job's operators (names, state names or kinds changed). */
export class StateCompatibilityError extends SluiceError {
  readonly code = 'CHECKPOINT_STATE_INCOMPATIBLE';
  readonly retryable = false;
  constructor(
    readonly savepoint: string,
    readonly problems: readonly string[],
  ) {
    super(
      `savepoint ${savepoint} does not fit this job's state (${problems.length} problem${problems.length === 1 ? '' : 's'}):\n` +
        problems.map((p) => `  - ${p}`).join('\n') +
        '\nkeep stateful operators\' uids (.uid(), default their names) and state names and kinds, or start without the savepoint',
    );
  }
}
