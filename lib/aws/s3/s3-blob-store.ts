/**
 * BlobStore on S3: snapshots, logged input and spilled envelopes. Objects are
 * immutable: put() reads the key first and accepts the same bytes again (a retried
 * step), refusing different ones with BlobConflictError. The PutObject also carries
 * `If-None-Match: *`, so on S3 itself a racing writer cannot overwrite either; emulators
 * ignore that header, which is why commit points never rely on it (pointers live in
 * DynamoDB, dynamodb-pointers.ts). While another conditional write of the key is in
 * flight S3 answers 409 ConditionalRequestConflict (or OperationAborted): put() reads the
 * key again and retries a few times, then fails retryable (the handler backs off).
 *
 * Keys are `${prefix}${key}`; list() returns keys without the prefix, in lexical order.
 * Accounting ('s3'): requests, bytes moved, objects deleted (items).
 */
import { CreateBucketCommand, DeleteObjectsCommand, GetObjectCommand, ListObjectsV2Command, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import type { BlobStore } from '../../checkpoint/storage.ts';
import { AwsAccounting } from '../cost/accounting.ts';
import { BlobConflictError, isS3TransientConflict, mapS3Error } from '../transport-errors.ts';

export interface S3BlobStoreOptions {
  readonly s3: S3Client;
  readonly bucket: string;
  /** Prepended to every key, e.g. `${job}/`. */
  readonly prefix?: string;
  readonly accounting?: AwsAccounting;
  /** Keys per ListObjectsV2 page (default and maximum 1,000). */
  readonly pageSize?: number;
  /** The wait before the n-th retry of a put S3 answered with a transient 409 is n times this (default 50 ms). */
  readonly conflictRetryDelayMs?: number;
}

const SERVICE = 's3';

export class S3BlobStore implements BlobStore {
  readonly accounting: AwsAccounting;
  private readonly s3: S3Client;
  private readonly bucket: string;
  private readonly prefix: string;
  private readonly pageSize?: number;
  private readonly conflictRetryDelayMs: number;
  /** Attempts of a put that meets S3's transient 409s. */
  static readonly CONFLICT_ATTEMPTS = 4;

  constructor(options: S3BlobStoreOptions) {
    this.pageSize = options.pageSize;
    this.conflictRetryDelayMs = options.conflictRetryDelayMs ?? 50;
    this.s3 = options.s3;
    this.bucket = options.bucket;
    this.prefix = options.prefix ?? '';
    this.accounting = options.accounting ?? new AwsAccounting();
  }

  async put(key: string, body: Uint8Array): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      // Again after a conflict: the racing writer may have landed these bytes (or others).
      if (await this.sameAsStored(key, body)) return;
      try {
        await this.s3.send(new PutObjectCommand({ Bucket: this.bucket, Key: this.prefix + key, Body: body, ContentLength: body.byteLength, IfNoneMatch: '*' }));
        this.accounting.record(SERVICE, 'PutObject', { requests: 1, bytes: body.byteLength });
        return;
      } catch (e) {
        this.accounting.record(SERVICE, 'PutObject', { requests: 1, errors: 1 });
        const status = (e as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
        // Another writer created it between our read and our write: same bytes are fine.
        if (status === 412 && (await this.sameAsStored(key, body))) return;
        if (!isS3TransientConflict(e) || attempt >= S3BlobStore.CONFLICT_ATTEMPTS) throw mapS3Error(e, 'PutObject', this.bucket, this.prefix + key);
        await new Promise((r) => setTimeout(r, this.conflictRetryDelayMs * attempt));
      }
    }
  }

  /** True when the key holds exactly these bytes, false when absent; BlobConflictError when it holds others. */
  private async sameAsStored(key: string, body: Uint8Array): Promise<boolean> {
    const stored = await this.get(key);
    if (!stored) return false;
    if (Buffer.from(stored.buffer, stored.byteOffset, stored.byteLength).equals(Buffer.from(body.buffer, body.byteOffset, body.byteLength))) return true;
    throw new BlobConflictError(key, stored.byteLength, body.byteLength);
  }

  async get(key: string): Promise<Uint8Array | undefined> {
    try {
      const out = await this.s3.send(new GetObjectCommand({ Bucket: this.bucket, Key: this.prefix + key }));
      const bytes = await out.Body!.transformToByteArray();
      this.accounting.record(SERVICE, 'GetObject', { requests: 1, bytes: bytes.byteLength });
      return bytes;
    } catch (e) {
      this.accounting.record(SERVICE, 'GetObject', { requests: 1 });
      const name = (e as { name?: string }).name;
      if (name === 'NoSuchKey' || name === 'NotFound' || (e as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode === 404) return undefined;
      this.accounting.record(SERVICE, 'GetObject', { errors: 1 });
      throw mapS3Error(e, 'GetObject', this.bucket, this.prefix + key);
    }
  }

  async list(prefix: string): Promise<string[]> {
    const keys: string[] = [];
    let token: string | undefined;
    do {
      let out;
      try {
        out = await this.s3.send(new ListObjectsV2Command({ Bucket: this.bucket, Prefix: this.prefix + prefix, ContinuationToken: token, MaxKeys: this.pageSize }));
        this.accounting.record(SERVICE, 'ListObjectsV2', { requests: 1, items: out.KeyCount ?? out.Contents?.length ?? 0 });
      } catch (e) {
        this.accounting.record(SERVICE, 'ListObjectsV2', { requests: 1, errors: 1 });
        throw mapS3Error(e, 'ListObjectsV2', this.bucket, this.prefix + prefix);
      }
      for (const o of out.Contents ?? []) if (o.Key) keys.push(o.Key.slice(this.prefix.length));
      token = out.IsTruncated ? out.NextContinuationToken : undefined;
    } while (token);
    return keys.sort();
  }

  async delete(keys: readonly string[]): Promise<void> {
    for (let i = 0; i < keys.length; i += 1000) {
      const chunk = keys.slice(i, i + 1000);
      let out;
      try {
        out = await this.s3.send(new DeleteObjectsCommand({ Bucket: this.bucket, Delete: { Objects: chunk.map((k) => ({ Key: this.prefix + k })), Quiet: true } }));
        this.accounting.record(SERVICE, 'DeleteObjects', { requests: 1, items: chunk.length });
      } catch (e) {
        this.accounting.record(SERVICE, 'DeleteObjects', { requests: 1, errors: 1 });
        throw mapS3Error(e, 'DeleteObjects', this.bucket, this.prefix + chunk[0]);
      }
      const failed = (out.Errors ?? []).filter((x) => x.Code !== 'NoSuchKey');
      if (failed.length) throw mapS3Error(Object.assign(new Error(failed[0].Message ?? 'delete failed'), { name: failed[0].Code ?? 'DeleteFailed' }), 'DeleteObjects', this.bucket, failed[0].Key);
    }
  }
}

/** Create a bucket if it does not exist (tests, local-AWS mode). */
export async function createBucket(s3: S3Client, bucket: string): Promise<void> {
  try {
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  } catch (e) {
    const name = (e as { name?: string }).name;
    if (name !== 'BucketAlreadyOwnedByYou' && name !== 'BucketAlreadyExists') throw mapS3Error(e, 'CreateBucket', bucket);
  }
}
