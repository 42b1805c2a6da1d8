/**
 * The AWS input log (lib/aws/operator/input-log.ts) against DynamoDB Local and fauxqs' S3: a
 * commit's consumed source records become one content-addressed object named in the
 * commit's transaction; replay returns the records at or above given positions in their
 * original order; truncation deletes only segments the positions cover; a crash between
 * the PUT and the transaction (or a fenced-off stale writer) leaves an object nothing
 * names, which replay never reads.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { StreamRecord } from '../../lib/api/types.ts';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { createStateTable, DynamoDbStateBackend } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { DynamoDbTable } from '../../lib/aws/dynamodb/dynamodb-table.ts';
import { AwsInputLog, inputLogSegment } from '../../lib/aws/operator/input-log.ts';
import { createBucket, S3BlobStore } from '../../lib/aws/s3/s3-blob-store.ts';
import { CommitConflictError, InjectedCrash, InvariantError } from '../../lib/errors.ts';
import type { InputLogAppend, PartitionScope } from '../../lib/state/backend.ts';
import { batch, freshScope } from '../state/backend-conformance.ts';
import { localClients, unique } from './helpers.ts';

const clients = localClients();
const table = unique('sluice-inlog');
const bucket = unique('inlog').toLowerCase();
const accounting = new AwsAccounting();
const blobs = new S3BlobStore({ s3: clients.s3, bucket, accounting });
const log = new AwsInputLog(new DynamoDbTable(clients.dynamodb, table, accounting), blobs);

beforeAll(async () => {
  await createStateTable(clients.dynamodb, table);
  await createBucket(clients.s3, bucket);
});
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));

const recs = (from: number, n: number): StreamRecord[] => Array.from({ length: n }, (_, i) => ({ value: { i: from + i, x: i % 3 === 0 ? Number.NaN : `v${from + i}` }, timestamp: 1000 + from + i }));
const append = (source: string, from: number, n: number, after = 0): InputLogAppend => ({ channel: `ch-${source}`, source, from, after, records: recs(from, n) });

/** Segments as objects (inline: 0), so the object path is what these tests see; the inline path has its own test. */
function backend(client = clients.dynamodb, inputLogInlineBytes = 0): DynamoDbStateBackend {
  return new DynamoDbStateBackend({ client, tableName: table, inputLogStore: blobs, inputLogInlineBytes, accounting });
}

/** Commits `appends` one per version on a fresh partition; returns the scope. */
async function commitAll(scope: PartitionScope, appends: readonly InputLogAppend[][], inlineBytes = 0): Promise<void> {
  const b = backend(clients.dynamodb, inlineBytes);
  await b.recover(scope);
  for (const [v, a] of appends.entries()) await b.commit(batch(scope, v, { inputLog: a }));
}

const values = (runs: readonly { records: readonly StreamRecord[] }[]) => runs.flatMap((r) => r.records.map((x) => (x.value as { i: number }).i));

describe('AWS input log', () => {
  it('names each commit segment by epoch, version and content; replays from positions in the original order', async () => {
    const scope = freshScope(1, 0);
    // Two source partitions' channels interleaved in one partition (a union), then barrier 1.
    await commitAll(scope, [[append('a#1', 0, 5), append('b#1', 0, 2)], [append('a#1', 5, 3)], [append('b#1', 2, 4, 1), append('a#1', 8, 2, 1)]]);
    const segs = await log.segments(scope);
    expect(segs.map((s) => [s.version, s.after])).toEqual([[1, 0], [2, 0], [3, 1]]);
    for (const s of segs) expect(s.key).toMatch(new RegExp(`^${scope.job}/input-log/0-1/${String(s.after).padStart(10, '0')}-${String(s.version).padStart(16, '0')}-[0-9a-f]{64}\\.json\\.gz$`));

    const all = await log.replay(scope, {});
    expect(all.map((r) => [r.source, r.from, r.records.length])).toEqual([['a#1', 0, 5], ['b#1', 0, 2], ['a#1', 5, 3], ['b#1', 2, 4], ['a#1', 8, 2]]);
    expect(all[0].records).toEqual(recs(0, 5)); // NaN survives the encoding
    // From a checkpoint at a#1 = 6, b#1 = 2: the tail of the second run of a, nothing of b's first.
    const tail = await log.replay(scope, { 'a#1': 6, 'b#1': 2 });
    expect(tail.map((r) => [r.source, r.from, r.records.length])).toEqual([['a#1', 6, 2], ['b#1', 2, 4], ['a#1', 8, 2]]);
    expect(values(tail.filter((r) => r.source === 'a#1'))).toEqual([6, 7, 8, 9]);
    // One PUT per commit, not per record.
    expect((await blobs.list(`${scope.job}/input-log/`)).length).toBe(3);
  });

  it('truncation deletes the items and objects of segments wholly below the positions, nothing else', async () => {
    const scope = freshScope(0, 0);
    await commitAll(scope, [[append('s#0', 0, 4)], [append('s#0', 4, 4)], [append('s#0', 8, 4, 1)]]);
    const before = await log.segments(scope);
    expect(await log.truncate(scope, { 's#0': 6 })).toEqual([before[0].key]); // the second straddles 6: kept
    expect((await log.segments(scope)).map((s) => s.version)).toEqual([2, 3]);
    expect(await blobs.list(`${scope.job}/input-log/`)).toEqual(before.slice(1).map((s) => s.key));
    expect(values(await log.replay(scope, { 's#0': 6 }))).toEqual([6, 7, 8, 9, 10, 11]);
    expect(await log.truncate(scope, { 's#0': 6 })).toEqual([]);
    expect(await log.truncate(scope, {})).toEqual([]); // a source without position keeps everything
    await log.truncate(scope, { 's#0': 12 });
    expect(await log.segments(scope)).toEqual([]);
    expect(await blobs.list(`${scope.job}/input-log/`)).toEqual([]);
  });

  it('a crash between the segment PUT and the transaction leaves an orphan object that replay never reads', async () => {
    const scope = freshScope(2, 0);
    await commitAll(scope, [[append('s#2', 0, 3)]]);
    // A container whose DynamoDB transaction never reaches the table (the process dies first).
    const dying = new DynamoDBClient({ region: inject('awsRegion'), credentials: inject('awsCredentials'), endpoint: inject('dynamodbEndpoint') });
    dying.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'TransactWriteItemsCommand') throw new InjectedCrash('process gone before the commit');
        return next(args);
      },
      { step: 'initialize', name: 'dieBeforeCommit' },
    );
    const b = backend(dying);
    await b.recover(scope);
    await expect(b.commit(batch(scope, 1, { inputLog: [append('s#2', 3, 5)] }))).rejects.toThrow(InjectedCrash);
    dying.destroy();
    const orphan = inputLogSegment(scope, 2, [append('s#2', 3, 5)], 0).object!.key;
    expect(await blobs.list(`${scope.job}/input-log/`)).toContain(orphan);
    expect((await log.segments(scope)).map((s) => s.key)).not.toContain(orphan);
    expect(values(await log.replay(scope, {}))).toEqual([0, 1, 2]);

    // SQS redelivers: the next container consumes more (another batch), commits version 2 under another key.
    const again = backend();
    await again.recover(scope);
    await again.commit(batch(scope, 1, { inputLog: [append('s#2', 3, 7)] }));
    expect(values(await log.replay(scope, {}))).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    // A stale writer is fenced off: its object is written, its segment never named.
    await expect(backend().commit(batch(scope, 1, { inputLog: [append('s#2', 3, 1)] }))).rejects.toThrow(CommitConflictError);
    expect(values(await log.replay(scope, {}))).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    // Truncation deletes what items name; the orphans stay harmless (nothing reads them).
    await log.truncate(scope, { 's#2': 10 });
    expect(await log.replay(scope, {})).toEqual([]);
  });

  it('keeps a small segment inline in its item (no PUT), a large one as an object', async () => {
    const scope = freshScope(4, 0);
    const puts = () => accounting.rows().filter((r) => r.service === 's3' && r.operation === 'PutObject').reduce((n, r) => n + r.requests, 0);
    const before = puts();
    await commitAll(scope, [[append('s#4', 0, 20)], [append('s#4', 20, 3000)]], 4096);
    expect(puts() - before).toBe(1);
    const segs = await log.segments(scope);
    expect(segs.map((s) => [s.key === undefined, s.inline === undefined])).toEqual([[true, false], [false, true]]);
    expect(values(await log.replay(scope, { 's#4': 10 }))).toEqual(Array.from({ length: 3010 }, (_, i) => i + 10));
    expect(await log.truncate(scope, { 's#4': 3020 })).toEqual([segs[1].key]);
    expect(await log.segments(scope)).toEqual([]);
  });

  it('refuses a segment that spans a barrier, a commit with logged input but no store, and a named segment that is gone', async () => {
    const scope = freshScope(3, 0);
    expect(() => inputLogSegment(scope, 1, [append('s#3', 0, 1, 0), append('s#3', 1, 1, 1)])).toThrow(InvariantError);
    const noStore = new DynamoDbStateBackend({ client: clients.dynamodb, tableName: table });
    await noStore.recover(scope);
    await expect(noStore.commit(batch(scope, 0, { inputLog: [append('s#3', 0, 1)] }))).rejects.toThrow(/inputLogStore/);
    await commitAll(scope, [[append('s#3', 0, 2)]]);
    const [seg] = await log.segments(scope);
    await blobs.delete([seg.key!]);
    await expect(log.replay(scope, {})).rejects.toThrow(/missing from the store/);
    // Positions past it need not read it.
    expect(await log.replay(scope, { 's#3': 2 })).toEqual([]);
  });
});
