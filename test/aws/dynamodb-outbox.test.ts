/**
 * Where a commit's outbox is kept (dynamodb-layout.ts storeOutbox): inline text when
 * small, gzip when that fits, else an immutable S3 object named by the transaction; a
 * recovering partition reads it back whichever way it was stored.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { loadOutbox, storeOutbox } from '../../lib/aws/dynamodb/dynamodb-layout.ts';
import { createStateTable, DynamoDbStateBackend } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { createBucket, S3BlobStore } from '../../lib/aws/s3/s3-blob-store.ts';
import { InvariantError } from '../../lib/errors.ts';
import { backendConformance, batch, freshScope } from '../state/backend-conformance.ts';
import { localClients, unique } from './helpers.ts';

const clients = localClients();
const table = unique('sluice-outbox');
const bucket = unique('outbox').toLowerCase();
const scope = { job: 'j', stage: 1, partition: 0 };

beforeAll(async () => {
  await createStateTable(clients.dynamodb, table);
  await createBucket(clients.s3, bucket);
});
afterAll(() => {
  for (const c of Object.values(clients)) c.destroy();
});

const sinkOutbox = (n: number, pad = 40) => [{ kind: 'sink' as const, delivery: { sink: 's', producer: '0:0', seq: 1, records: Array.from({ length: n }, (_, i) => ({ i, pad: 'p'.repeat(pad) })) } }];

describe('storeOutbox (pure)', () => {
  it('keeps small outboxes as text, compresses larger ones, and names an object when even that is large', async () => {
    const small = JSON.stringify(sinkOutbox(3));
    expect(storeOutbox(small, scope, 7, { blobs: true })).toEqual({ kind: 'v', chunks: [small] });

    const medium = JSON.stringify(sinkOutbox(500)); // ~40 KB of very repetitive text: gzip fits in 4 KB
    const z = storeOutbox(medium, scope, 7, { blobs: true });
    expect(z.kind).toBe('z');
    const zChunks = z.kind === 'z' ? z.chunks : [];
    expect(await loadOutbox(zChunks.map((c) => ({ z: c })), () => Promise.reject(new Error('no fetch')))).toBe(medium);

    const random = JSON.stringify(Array.from({ length: 2000 }, (_, i) => ({ i, r: Math.sin(i).toString(36) })));
    const b = storeOutbox(random, scope, 7, { blobs: true });
    expect(b.kind).toBe('b');
    const { key, body } = b as { key: string; body: Uint8Array };
    // Content-addressed under the spill prefix (its lifecycle rule collects the objects).
    expect(key).toMatch(/^spill\/j\/outbox\/1\/0\/0000000000000007-[0-9a-f]{64}\.json\.gz$/);
    expect(await loadOutbox([{ b: key }], async (k) => (k === key ? body : new Uint8Array()))).toBe(random);
    // Without a blob store it stays inline, compressed.
    expect(storeOutbox(random, scope, 7, { blobs: false }).kind).toBe('z');
    // A lower inline limit moves the threshold.
    expect(storeOutbox(small, scope, 7, { blobs: true, inlineBytes: 10 }).kind).not.toBe('v');
  });
});

describe('DynamoDbStateBackend with a blob store for large outboxes', () => {
  backendConformance('DynamoDbStateBackend (outbox in S3)', () => {
    const blobs = new S3BlobStore({ s3: clients.s3, bucket, prefix: 'conformance/' });
    return {
      open: () => new DynamoDbStateBackend({ client: clients.dynamodb, tableName: table, blobs, outboxInlineBytes: 64 }),
      settle: async (b, s) => void (await (b as DynamoDbStateBackend).compact(s)),
    };
  });

  it('writes a large outbox as one S3 object and one small item, and recovers it', async () => {
    const accounting = new AwsAccounting();
    const blobs = new S3BlobStore({ s3: clients.s3, bucket, prefix: 'big/', accounting });
    const b = new DynamoDbStateBackend({ client: clients.dynamodb, tableName: table, accounting, blobs });
    const s = freshScope();
    await b.recover(s);
    const outbox = [{ kind: 'sink' as const, delivery: { sink: 's', producer: '0:0', seq: 1, records: Array.from({ length: 3000 }, (_, i) => ({ i, r: Math.cos(i).toString(36) })) } }];
    accounting.reset();
    await b.commit(batch(s, 0, { writes: [{ kg: 1, entity: 'e', field: 'f', value: 1 }], outbox }));
    expect(accounting.get('s3', 'PutObject').requests).toBe(1);
    // Version item, one state item, one outbox item naming the object: all small.
    expect(accounting.get('dynamodb', 'TransactWriteItems')).toMatchObject({ items: 3, estimatedWriteUnits: 6 });
    const fresh = new DynamoDbStateBackend({ client: clients.dynamodb, tableName: table, blobs });
    expect((await fresh.recover(s)).outbox).toEqual(outbox);
    // Without the blob store the committed outbox cannot be read: a clear error, not an empty outbox.
    await expect(new DynamoDbStateBackend({ client: clients.dynamodb, tableName: table }).recover(s)).rejects.toThrow(InvariantError);
    await b.clearOutbox(s, 1);
    expect((await fresh.recover(s)).outbox).toEqual([]);
  });
});
