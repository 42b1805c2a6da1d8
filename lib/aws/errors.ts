/**
 * Typed errors of the AWS adapters (DynamoDB for now). Each says whether a retry can
 * help, so the runtime can tell "back off and retry" from "reopen and re-read" from
 * "give up", and carries what the caller needs to act (operation, table, sizes).
 */
import { SluiceError } from '../errors.ts';

/** DynamoDB is throttling (on-demand burst, hot partition, account limit): back off and retry. */
export class DynamoDbThrottledError extends SluiceError {
  readonly code = 'DYNAMODB_THROTTLED';
  readonly retryable = true;
  constructor(
    readonly operation: string,
    readonly table: string,
    readonly reason: string,
    options?: { cause?: unknown },
  ) {
    super(`DynamoDB ${operation} on table "${table}" was throttled (${reason}); retry with backoff`, options);
  }
}

/** A transaction lost a race with another transaction on the same items; retrying usually succeeds. */
export class DynamoDbTransactionConflictError extends SluiceError {
  readonly code = 'DYNAMODB_TRANSACTION_CONFLICT';
  readonly retryable = true;
  constructor(
    readonly operation: string,
    readonly table: string,
    readonly detail: string,
    options?: { cause?: unknown },
  ) {
    super(`DynamoDB ${operation} on table "${table}" conflicted with a concurrent transaction: ${detail}`, options);
  }
}

/** Other invocations kept rewriting a partition's attempt counts while this one tried to count a failure: back off and retry. */
export class AttemptsContendedError extends SluiceError {
  readonly code = 'ATTEMPTS_CONTENDED';
  readonly retryable = true;
  constructor(
    readonly scope: { readonly job: string; readonly stage: number; readonly partition: number },
    readonly location: string,
    readonly tries: number,
  ) {
    super(`the attempt count of ${location} in stage ${scope.stage} partition ${scope.partition} of job "${scope.job}" changed under each of ${tries} conditional writes; retry with backoff`);
  }
}

/** DynamoDB rejected the request as malformed (too large, bad expression): the same request fails again. */
export class DynamoDbValidationError extends SluiceError {
  readonly code = 'DYNAMODB_VALIDATION';
  readonly retryable = false;
  constructor(
    readonly operation: string,
    readonly table: string,
    readonly awsMessage: string,
    options?: { cause?: unknown },
  ) {
    super(`DynamoDB ${operation} on table "${table}" rejected the request: ${awsMessage}`, options);
  }
}

/**
 * A write timed out or the connection broke: it may or may not have been applied.
 * Retryable, but only after re-reading (for a commit: recover() and compare the version).
 */
export class DynamoDbUnknownOutcomeError extends SluiceError {
  readonly code = 'DYNAMODB_UNKNOWN_OUTCOME';
  readonly retryable = true;
  constructor(
    readonly operation: string,
    readonly table: string,
    readonly detail: string,
    options?: { cause?: unknown },
  ) {
    super(`DynamoDB ${operation} on table "${table}" has an unknown outcome (${detail}); re-read before retrying`, options);
  }
}

/** Any other DynamoDB failure; `retryable` follows the SDK's own classification (5xx, transient). */
export class DynamoDbRequestError extends SluiceError {
  readonly code = 'DYNAMODB_REQUEST';
  constructor(
    readonly operation: string,
    readonly table: string,
    readonly awsName: string,
    readonly awsMessage: string,
    readonly retryable: boolean,
    options?: { cause?: unknown },
  ) {
    super(`DynamoDB ${operation} on table "${table}" failed: ${awsName}: ${awsMessage}`, options);
  }
}

/** A state value (or other item) would exceed DynamoDB's 400 KB item limit. Nothing was written. */
export class StateItemTooLargeError extends SluiceError {
  readonly code = 'STATE_ITEM_TOO_LARGE';
  readonly retryable = false;
  constructor(
    readonly entity: string,
    readonly field: string,
    readonly bytes: number,
    readonly limitBytes: number,
  ) {
    super(
      `state item for entity ${JSON.stringify(entity)} field ${JSON.stringify(field)} is ${bytes} bytes, ` +
        `over DynamoDB's item limit of ${limitBytes} bytes: keep large values in map state entries or in S3`,
    );
  }
}

/** A state value cannot be stored as JSON (BigInt, cycles). */
export class StateEncodingError extends SluiceError {
  readonly code = 'STATE_ENCODING';
  readonly retryable = false;
  constructor(
    readonly entity: string,
    readonly field: string,
    cause: unknown,
  ) {
    super(`state value for entity ${JSON.stringify(entity)} field ${JSON.stringify(field)} is not JSON-serialisable: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
}

/** peek() was asked for an entity that prefetch() did not load: a runtime bug, not a data problem. */
export class StateNotPrefetchedError extends SluiceError {
  readonly code = 'STATE_NOT_PREFETCHED';
  readonly retryable = false;
  constructor(
    readonly scope: string,
    readonly kg: number,
    readonly entity: string,
  ) {
    super(`peek(${scope}, key group ${kg}, entity ${JSON.stringify(entity)}) before prefetch() loaded it`);
  }
}

/**
 * A batch too large for one transaction was committed (its version is durable) but
 * applying its logged writes was interrupted. recover() finishes it; retrying the batch
 * itself would be a duplicate, which the version fence and the input high-water marks reject.
 */
export class CommitRollForwardError extends SluiceError {
  readonly code = 'COMMIT_ROLL_FORWARD';
  readonly retryable = true;
  constructor(
    readonly scope: string,
    readonly version: number,
    cause: unknown,
  ) {
    super(`commit of ${scope} landed at version ${version} but applying it was interrupted; recover() completes it`, { cause });
  }
}

interface AwsErrorShape {
  name?: string;
  message?: string;
  code?: string;
  $metadata?: { httpStatusCode?: number };
  $retryable?: unknown;
  CancellationReasons?: { Code?: string; Message?: string }[];
}

const THROTTLING = new Set(['ProvisionedThroughputExceededException', 'ThrottlingException', 'RequestLimitExceeded', 'Throttling', 'ThrottlingError', 'ProvisionedThroughputExceeded']);
const NETWORK_CODES = new Set(['ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ECONNABORTED', 'EAI_AGAIN', 'ENETUNREACH', 'EHOSTUNREACH', 'UND_ERR_SOCKET']);
const TIMEOUT_NAMES = new Set(['TimeoutError', 'AbortError', 'RequestTimeout', 'RequestTimeoutException']);

export function isThrottlingName(name: string | undefined): boolean {
  return name !== undefined && THROTTLING.has(name);
}

/** The request may have reached DynamoDB and been applied without us seeing the answer. */
function outcomeUnknown(e: AwsErrorShape): boolean {
  if (e.name && TIMEOUT_NAMES.has(e.name)) return true;
  if (e.code && NETWORK_CODES.has(e.code)) return true;
  const status = e.$metadata?.httpStatusCode;
  return e.name === 'InternalServerError' || e.name === 'ServiceUnavailable' || (status !== undefined && status >= 500);
}

/**
 * Classify an SDK error. `write`: whether the request changes data, so a lost answer
 * means an unknown outcome rather than a plain retryable read failure.
 * TransactionCanceledException's version fence is the caller's business (it knows
 * which item is the version); here its other reasons are mapped.
 */
export function mapDynamoDbError(err: unknown, ctx: { operation: string; table: string; write: boolean }): SluiceError {
  if (err instanceof SluiceError) return err;
  const e = (err ?? {}) as AwsErrorShape;
  const name = e.name ?? 'Error';
  const message = e.message ?? String(err);
  const { operation, table } = ctx;
  if (isThrottlingName(name)) return new DynamoDbThrottledError(operation, table, name, { cause: err });
  if (name === 'TransactionConflictException') return new DynamoDbTransactionConflictError(operation, table, message, { cause: err });
  if (name === 'ValidationException') return new DynamoDbValidationError(operation, table, message, { cause: err });
  if (name === 'TransactionCanceledException') {
    const codes = (e.CancellationReasons ?? []).map((r) => r.Code ?? 'None');
    const summary = codes.join(', ');
    if (codes.includes('TransactionConflict')) return new DynamoDbTransactionConflictError(operation, table, `cancellation reasons [${summary}]`, { cause: err });
    if (codes.some((c) => isThrottlingName(c))) return new DynamoDbThrottledError(operation, table, `cancellation reasons [${summary}]`, { cause: err });
    const invalid = (e.CancellationReasons ?? []).find((r) => r.Code === 'ValidationError');
    if (invalid) return new DynamoDbValidationError(operation, table, invalid.Message ?? message, { cause: err });
    return new DynamoDbRequestError(operation, table, name, `${message} [${summary}]`, false, { cause: err });
  }
  if (name === 'TransactionInProgressException' || name === 'IdempotentParameterMismatchException') {
    // The same ClientRequestToken is still being applied: the first attempt may land.
    return new DynamoDbUnknownOutcomeError(operation, table, name, { cause: err });
  }
  if (outcomeUnknown(e)) {
    return ctx.write
      ? new DynamoDbUnknownOutcomeError(operation, table, `${name}: ${message}`, { cause: err })
      : new DynamoDbRequestError(operation, table, name, message, true, { cause: err });
  }
  if (e.code === 'ECONNREFUSED' || e.code === 'ENOTFOUND') {
    // Never reached DynamoDB: nothing was applied, a later retry may connect.
    return new DynamoDbRequestError(operation, table, e.code, message, true, { cause: err });
  }
  if (name === 'ResourceNotFoundException') return new DynamoDbRequestError(operation, table, name, `${message} (does the table exist? createStateTable() makes it)`, false, { cause: err });
  return new DynamoDbRequestError(operation, table, name, message, e.$retryable !== undefined, { cause: err });
}

/**
 * The claim of an Idempotency-Key changed before its attempt could record what load
 * shedding drops from it (another request with the key took it over): nothing was sent;
 * a retry decides again.
 */
export class ShedNotRecordedError extends SluiceError {
  readonly code = 'SHED_NOT_RECORDED';
  readonly retryable = true;
  constructor(readonly key: string) {
    super(`the claim of Idempotency-Key "${key}" changed before its load-shedding decision was recorded; nothing was enqueued; retry`);
  }
}
