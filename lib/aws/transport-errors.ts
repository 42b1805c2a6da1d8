/**
 * Typed errors of the SQS and S3 adapters (DynamoDB's are in errors.ts). Each says
 * whether a retry can help: throttling and 5xx yes; a malformed message, a body SQS
 * refuses or an immutable object with other bytes, never.
 */
import { SluiceError } from '../errors.ts';
import { isThrottlingName } from './errors.ts';

/** An SQS request failed as a whole (after the SDK's own retries). */
export class SqsRequestError extends SluiceError {
  readonly code = 'SQS_REQUEST';
  constructor(
    readonly operation: string,
    readonly queue: string,
    readonly awsName: string,
    readonly awsMessage: string,
    readonly retryable: boolean,
    readonly throttled: boolean,
    options?: { cause?: unknown },
  ) {
    super(`SQS ${operation} on ${queue} failed: ${awsName}: ${awsMessage}${retryable ? ' (retryable)' : ''}`, options);
  }
}

/** Some entries of SendMessageBatch were still refused after the retries. */
export class SqsSendError extends SluiceError {
  readonly code = 'SQS_SEND';
  constructor(
    readonly queue: string,
    readonly failures: readonly { readonly code: string; readonly message: string; readonly senderFault: boolean }[],
    readonly retryable: boolean,
  ) {
    const f = failures[0];
    super(`SQS refused ${failures.length} message(s) sent to ${queue}: ${f?.code}: ${f?.message}${retryable ? '' : ' (the request itself is wrong: a retry cannot help)'}`);
  }
}

/** A message body is not one this version of Sluice wrote (or is corrupt). */
export class MessageDecodeError extends SluiceError {
  readonly code = 'MESSAGE_DECODE';
  readonly retryable = false;
  constructor(
    readonly messageId: string,
    readonly reason: string,
    options?: { cause?: unknown },
  ) {
    super(`message ${messageId}: cannot decode its body: ${reason}`, options);
  }
}

/** An envelope is larger than a message even compressed, and no blob store was given to carry it. */
export class EnvelopeTooLargeError extends SluiceError {
  readonly code = 'ENVELOPE_TOO_LARGE';
  readonly retryable = false;
  constructor(
    readonly channel: string,
    readonly seq: number,
    readonly bytes: number,
    readonly limitBytes: number,
  ) {
    super(`envelope ${channel}#${seq} encodes to ${bytes} bytes, over the message limit of ${limitBytes}: configure a blob store (S3) for oversized envelopes`);
  }
}

/** An immutable object was written again with different bytes. */
export class BlobConflictError extends SluiceError {
  readonly code = 'BLOB_CONFLICT';
  readonly retryable = false;
  constructor(
    readonly key: string,
    readonly storedBytes: number,
    readonly newBytes: number,
  ) {
    super(`object ${JSON.stringify(key)} already exists with different content (${storedBytes} bytes stored, ${newBytes} offered): objects are never overwritten`);
  }
}

/** An S3 request failed (after the SDK's own retries). */
export class S3RequestError extends SluiceError {
  readonly code = 'S3_REQUEST';
  constructor(
    readonly operation: string,
    readonly bucket: string,
    readonly key: string | undefined,
    readonly awsName: string,
    readonly awsMessage: string,
    readonly retryable: boolean,
    options?: { cause?: unknown },
  ) {
    super(`S3 ${operation} on s3://${bucket}/${key ?? ''} failed: ${awsName}: ${awsMessage}`, options);
  }
}

interface AwsErrorShape {
  name?: string;
  message?: string;
  code?: string;
  $fault?: 'client' | 'server';
  $retryable?: unknown;
  $metadata?: { httpStatusCode?: number };
}

/**
 * S3's 409s that clear by themselves: another conditional write on the key is in flight
 * (ConditionalRequestConflict, an `If-None-Match` put racing another), or a conflicting
 * operation on the resource is (OperationAborted). Its other 409s (BucketNotEmpty,
 * BucketAlreadyExists, InvalidBucketState) stay as they are.
 */
const S3_TRANSIENT_CONFLICTS = new Set(['ConditionalRequestConflict', 'OperationAborted']);

export function isS3TransientConflict(err: unknown): boolean {
  return S3_TRANSIENT_CONFLICTS.has((err as AwsErrorShape | undefined)?.name ?? '');
}

/** Whether an SDK error can go away by itself: throttling, 5xx, S3's transient conflicts, network, timeouts. */
export function isTransient(err: unknown): boolean {
  const e = (err ?? {}) as AwsErrorShape;
  if (err instanceof SluiceError) return err.retryable;
  if (isThrottlingName(e.name) || e.name === 'RequestThrottled' || e.name === 'KmsThrottled' || e.name === 'SlowDown') return true;
  if (isS3TransientConflict(err)) return true;
  if (e.$retryable !== undefined || e.$fault === 'server') return true;
  const status = e.$metadata?.httpStatusCode;
  if (status !== undefined && (status >= 500 || status === 429)) return true;
  return e.code !== undefined || e.name === 'TimeoutError' || e.name === 'AbortError';
}

export function mapSqsError(err: unknown, operation: string, queue: string): SluiceError {
  if (err instanceof SluiceError) return err;
  const e = (err ?? {}) as AwsErrorShape;
  const name = e.name ?? 'Error';
  const throttled = isThrottlingName(name) || name === 'RequestThrottled' || e.$metadata?.httpStatusCode === 429;
  return new SqsRequestError(operation, queue, name, e.message ?? String(err), isTransient(err), throttled, { cause: err });
}

export function mapS3Error(err: unknown, operation: string, bucket: string, key?: string): SluiceError {
  if (err instanceof SluiceError) return err;
  const e = (err ?? {}) as AwsErrorShape;
  return new S3RequestError(operation, bucket, key, e.name ?? 'Error', e.message ?? String(err), isTransient(err), { cause: err });
}
