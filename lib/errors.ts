/**
 * One error base class for the whole library. Every error says whether a
 * retry can help (`retryable`) and carries the data a caller needs to act,
 * so handlers can decide between retrying and parking a record.
 */
export abstract class SluiceError extends Error {
  abstract readonly code: string;
  abstract readonly retryable: boolean;

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The job definition is wrong; raised while building or compiling the job. */
export class JobDefinitionError extends SluiceError {
  readonly code = 'JOB_DEFINITION';
  readonly retryable = false;
  constructor(
    readonly operator: string,
    readonly expected: string,
    readonly received: string,
  ) {
    super(`operator "${operator}": expected ${expected}, received ${received}`);
  }
}

/** Bad input named by field: which field, what was expected, what was received. Retrying the same input fails again. */
export abstract class FieldError extends SluiceError {
  readonly retryable = false;
  constructor(
    readonly field: string,
    readonly expected: string,
    readonly received: string,
  ) {
    super(`${field}: expected ${expected}, received ${received}`);
  }
}

/** Configuration or CLI input failed validation. */
export class ConfigError extends FieldError {
  readonly code = 'CONFIG';
}

/** A job module could not be imported; `hint` says what to do about it. */
export class JobModuleLoadError extends SluiceError {
  readonly code = 'JOB_MODULE_LOAD';
  readonly retryable = false;
  constructor(
    readonly path: string,
    readonly reason: string,
    readonly hint: string,
    options?: { cause?: unknown },
  ) {
    super(`cannot load job module "${path}": ${reason}${hint ? ` (${hint})` : ''}`, options);
  }
}

/** An input event was rejected (bad shape, too large, unknown stream). */
export class InputRejectedError extends FieldError {
  readonly code = 'INPUT_REJECTED';
}

/** The runtime is saturated; the caller should retry after `retryAfterMs`. */
export class BackPressureError extends SluiceError {
  readonly code = 'BACK_PRESSURE';
  readonly retryable = true;
  constructor(readonly retryAfterMs: number, detail = 'runtime saturated') {
    super(`${detail}; retry after ${retryAfterMs} ms`);
  }
}

/** User code threw while processing a record. Retried, then dead-lettered. */
export class UserCodeError extends SluiceError {
  readonly code = 'USER_CODE';
  readonly retryable = true;
  constructor(
    readonly operator: string,
    readonly record: unknown,
    cause: unknown,
  ) {
    super(`operator "${operator}" threw: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
}

/** A commit lost a race with another writer (version fence); re-read and retry. */
export class CommitConflictError extends SluiceError {
  readonly code = 'COMMIT_CONFLICT';
  readonly retryable = true;
  constructor(readonly scope: string, readonly expectedVersion: number, detail?: string) {
    super(`commit conflict on ${scope} at version ${expectedVersion}${detail ? `: ${detail}` : ''}`);
  }
}

/** An invariant of the protocol broke (a gap in a channel's sequence, ...). Not retryable. */
export class InvariantError extends SluiceError {
  readonly code = 'INVARIANT';
  readonly retryable = false;
}

/** A fault injected by a test's seeded fault plan (simulated crash). */
export class InjectedCrash extends SluiceError {
  readonly code = 'INJECTED_CRASH';
  readonly retryable = true;
  constructor(readonly point: string) {
    super(`injected crash at ${point}`);
  }
}
