/**
 * Checkpoint storage on AWS against the local servers: the S3 blob store on fauxqs
 * (immutable keys, idempotent re-put, pagination beyond 1,000 keys, batch deletes) and
 * the DynamoDB pointer store on DynamoDB Local (compare-and-set under races).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { DynamoDbPointerStore } from '../../lib/aws/dynamodb/dynamodb-pointers.ts';
import { createBucket, S3BlobStore } from '../../lib/aws/s3/s3-blob-store.ts';
import { BlobConflictError } from '../../lib/aws/transport-errors.ts';
import { localClients, unique } from './helpers.ts';

const clients = localClients();
const bucket = unique('blobs').toLowerCase();
const table = unique('sluice-ptr');

beforeAll(async () => {
  await Promise.all([createBucket(clients.s3, bucket), createStateTable(clients.dynamodb, table)]);
});
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));

const bytes = (s: string) => new TextEncoder().encode(s);

describe('S3BlobStore', () => {
  it('stores immutable objects: the same bytes again are accepted, other bytes refused', async () => {
    const acc = new AwsAccounting();
    const store = new S3BlobStore({ s3: clients.s3, bucket, prefix: 'job-a/', accounting: acc });
    expect(await store.get('snap/1')).toBeUndefined();
    await store.put('snap/1', bytes('hello'));
    await store.put('snap/1', bytes('hello'));
    await expect(store.put('snap/1', bytes('HELLO'))).rejects.toBeInstanceOf(BlobConflictError);
    expect(new TextDecoder().decode(await store.get('snap/1'))).toBe('hello');
    await store.put('empty', new Uint8Array(0));
    expect(await store.get('empty')).toEqual(new Uint8Array(0));
    expect(acc.get('s3', 'PutObject')).toMatchObject({ requests: 2, bytes: 5 });
    // Another prefix is another namespace.
    expect(await new S3BlobStore({ s3: clients.s3, bucket, prefix: 'job-b/' }).get('snap/1')).toBeUndefined();
  });

  it('lists keys under a prefix in order across pages, and deletes in batches', async () => {
    const acc = new AwsAccounting();
    const store = new S3BlobStore({ s3: clients.s3, bucket, prefix: 'many/', pageSize: 10, accounting: acc });
    const keys = Array.from({ length: 43 }, (_, i) => `log/${String(42 - i).padStart(5, '0')}`).sort();
    await Promise.all(keys.map((k) => store.put(k, bytes(k))));
    await store.put('other/x', bytes('x'));
    expect(await store.list('log/')).toEqual(keys);
    expect(acc.get('s3', 'ListObjectsV2').requests).toBe(5);
    await store.delete([...keys.slice(0, 30), 'log/absent']);
    expect(await store.list('log/')).toEqual(keys.slice(30));
    expect(await store.list('')).toEqual([...keys.slice(30), 'other/x']);
  });
});

describe('DynamoDbPointerStore', () => {
  it('writes by compare-and-set: one winner per version, values read back exactly', async () => {
    const acc = new AwsAccounting();
    const a = new DynamoDbPointerStore({ client: clients.dynamodb, tableName: table, job: 'job-a', accounting: acc });
    const b = new DynamoDbPointerStore({ client: clients.dynamodb, tableName: table, job: 'job-a' });
    expect(await a.read('checkpoint')).toBeUndefined();
    expect(await a.compareAndSet('checkpoint', 1, { epoch: 0 })).toBe(false); // absent is version 0
    expect(await a.compareAndSet('checkpoint', 0, { epoch: 1, wm: Number.NEGATIVE_INFINITY })).toBe(true);
    expect(await b.compareAndSet('checkpoint', 0, { epoch: 99 })).toBe(false);
    expect(await b.read('checkpoint')).toEqual({ version: 1, value: { epoch: 1, wm: Number.NEGATIVE_INFINITY } });

    // Racing writers at the same version: exactly one wins.
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => (i % 2 ? a : b).compareAndSet('checkpoint', 1, { epoch: 2, writer: i })));
    expect(results.filter(Boolean)).toHaveLength(1);
    const now = await a.read<{ writer: number }>('checkpoint');
    expect(now!.version).toBe(2);
    expect(results[now!.value.writer]).toBe(true);

    // Names and jobs are separate pointers.
    expect(await a.read('other')).toBeUndefined();
    expect(await new DynamoDbPointerStore({ client: clients.dynamodb, tableName: table, job: 'job-b' }).read('checkpoint')).toBeUndefined();
    expect(acc.get('dynamodb', 'PutItem').requests).toBeGreaterThan(0);
  });
});
