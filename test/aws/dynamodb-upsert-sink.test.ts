/**
 * The DynamoDB upsert sink against DynamoDB Local: one item per key, the last record a
 * producer emitted wins, redelivered, duplicated and out-of-order deliveries never
 * overwrite newer items (the server's own condition check). Faults DynamoDB Local cannot
 * produce (throttling, a timeout after the write landed) come from aws-sdk-client-mock
 * in front of the real server.
 */
import { CreateTableCommand, DynamoDBClient, ProvisionedThroughputExceededException } from '@aws-sdk/client-dynamodb';
import { DynamoDBDocumentClient, GetCommand, PutCommand, ScanCommand } from '@aws-sdk/lib-dynamodb';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwsSinks } from '../../lib/aws/sinks/sinks.ts';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { DynamoDbUpsertSink } from '../../lib/aws/sinks/dynamodb-upsert-sink.ts';
import { DynamoDbThrottledError } from '../../lib/aws/errors.ts';
import { type DynamoDbUpsertSinkOptions, parseUpsertOptions, SinkRecordsRejectedError } from '../../lib/aws/sinks/sink-options.ts';
import { ConfigError } from '../../lib/errors.ts';
import { localClients, unique } from './helpers.ts';

const clients = localClients();
const doc = DynamoDBDocumentClient.from(clients.dynamodb);
const table = unique('upsert');
const sorted = unique('upsert-sk');

beforeAll(async () => {
  const attr = (n: string) => ({ AttributeName: n, AttributeType: 'S' as const });
  await clients.dynamodb.send(new CreateTableCommand({ TableName: table, BillingMode: 'PAY_PER_REQUEST', AttributeDefinitions: [attr('user')], KeySchema: [{ AttributeName: 'user', KeyType: 'HASH' }] }));
  await clients.dynamodb.send(
    new CreateTableCommand({ TableName: sorted, BillingMode: 'PAY_PER_REQUEST', AttributeDefinitions: [attr('pk'), { AttributeName: 'sk', AttributeType: 'N' }], KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }, { AttributeName: 'sk', KeyType: 'RANGE' }] }),
  );
});
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));

type Count = { user: string; n: number };

/** One container's sink (its own high-water marks), on the real server unless a client is given. */
function sink(o: Partial<DynamoDbUpsertSinkOptions<Count>> = {}, dynamodb: DynamoDBClient = clients.dynamodb, accounting = new AwsAccounting()) {
  return new DynamoDbUpsertSink<Count>(parseUpsertOptions<Count>({ table, key: (c) => c.user, partitionKey: 'user', ...o }), { dynamodb, accounting });
}
const delivery = (producer: string, seq: number, ...records: Count[]) => ({ producer, seq, records });
const get = async (user: string) => (await doc.send(new GetCommand({ TableName: table, Key: { user }, ConsistentRead: true }))).Item;

describe('DynamoDbUpsertSink', () => {
  it('keeps the last record per key; repeated, duplicated and out-of-order deliveries never overwrite a newer one', async () => {
    const acc = new AwsAccounting();
    const a = sink({}, clients.dynamodb, acc);
    await a.write(delivery('1:0', 1, { user: 'ann', n: 1 }, { user: 'bob', n: 1 }, { user: 'ann', n: 2 }));
    expect(a.written).toBe(2); // coalesced per key within the delivery
    expect(await get('ann')).toEqual({ user: 'ann', n: 2, sluice_producer: '1:0', sluice_seq: 1 });
    await a.write(delivery('1:0', 1, { user: 'ann', n: 2 })); // duplicate: skipped by this container
    expect(a.duplicatesDropped).toBe(1);

    await a.write(delivery('1:0', 3, { user: 'ann', n: 5 }));
    // Another container delivers an older batch late, and a redelivery of the newest: DynamoDB refuses both.
    const b = sink();
    await b.write(delivery('1:0', 2, { user: 'ann', n: 3 }, { user: 'cy', n: 1 }));
    await b.write(delivery('1:0', 3, { user: 'ann', n: 5 }));
    expect(b.staleWrites).toBe(2);
    expect(await get('ann')).toMatchObject({ n: 5, sluice_seq: 3 });
    expect(await get('cy')).toMatchObject({ n: 1, sluice_seq: 2 }); // a key the newer batch did not touch is written
    // A key moving to another producer (rescale): the new producer's write wins.
    await b.write(delivery('1:1', 1, { user: 'ann', n: 6 }));
    expect(await get('ann')).toMatchObject({ n: 6, sluice_producer: '1:1', sluice_seq: 1 });

    const put = acc.get('dynamodb', 'PutItem');
    expect(put).toMatchObject({ requests: 3, items: 3, errors: 0 });
    expect(put.estimatedWriteUnits).toBe(3);
  });

  it('writes composite keys and mapped items through the public API', async () => {
    const s = AwsSinks.dynamodbUpsert<{ id: string; at: number; total: number }>({ table: sorted, key: (r) => [r.id, r.at], sortKey: 'sk', item: (r) => ({ total: r.total }) });
    s.bindAws({ job: 'j', sink: 'totals', dynamodb: clients.dynamodb, tableName: 'unused' });
    await s.write({ producer: '2:0', seq: 1, records: [{ id: 'a', at: 1, total: 10 }, { id: 'a', at: 2, total: 20 }, { id: 'a', at: 1, total: 11 }] });
    const items = (await doc.send(new ScanCommand({ TableName: sorted }))).Items!.sort((x, y) => x.sk - y.sk);
    expect(items).toEqual([
      { pk: 'a', sk: 1, total: 11, sluice_producer: '2:0', sluice_seq: 1 },
      { pk: 'a', sk: 2, total: 20, sluice_producer: '2:0', sluice_seq: 1 },
    ]);
  });

  it('rejects bad options at build time and bad records with the field, the expectation and what it got', async () => {
    expect(() => AwsSinks.dynamodbUpsert<Count>({ table: 'x', key: (c) => c.user })).toThrow(/AwsSinks\.dynamodbUpsert\.table: expected a DynamoDB table name.*received "x"/);
    expect(() => AwsSinks.dynamodbUpsert<Count>({ table, key: 'user' as never })).toThrow(/AwsSinks\.dynamodbUpsert\.key: expected a function, received "user"/);
    expect(() => AwsSinks.dynamodbUpsert<Count>({ table, key: (c) => c.user, concurrency: 0 })).toThrow(ConfigError);
    expect(() => AwsSinks.dynamodbUpsert<Count>({ table, key: (c) => c.user, partitionKey: 'sluice_seq' })).toThrow(/the sink's own/);
    // A bad record is reported with its error; the rest of the delivery is written.
    const s = sink({ key: (c) => (c.user === 'bad' ? (undefined as never) : c.user) });
    const err = await s.write(delivery('1:0', 1, { user: 'bad', n: 1 }, { user: 'fine', n: 4 }, { user: 'nan', n: Number.NaN })).catch((e) => e);
    expect(err).toBeInstanceOf(SinkRecordsRejectedError);
    expect(err.rejected).toEqual([
      { index: 0, record: { user: 'bad', n: 1 }, error: expect.stringMatching(/record 0 of delivery 1:0#1: key\(record\): expected a non-empty string or a finite number, received undefined/) },
      { index: 2, record: { user: 'nan', n: Number.NaN }, error: expect.stringMatching(/expected values DynamoDB can store/) },
    ]);
    expect(await get('fine')).toMatchObject({ n: 4 });
    expect(await get('nan')).toBeUndefined();
  });
});

describe('DynamoDbUpsertSink under faults the server cannot produce', () => {
  /** The sink's document client mocked, each call passed to the real server through `real` unless a fault fires. */
  function faulty(fault: (call: number, input: unknown) => 'throttle' | 'timeout-after' | 'pass') {
    const sleeps: number[] = [];
    const s = sink({ maxAttempts: 4, sleep: async (ms) => void sleeps.push(ms) }, new DynamoDBClient({}));
    const mock = mockClient(s.documentClient());
    let calls = 0;
    mock.on(PutCommand).callsFake(async (input) => {
      const f = fault(++calls, input);
      if (f === 'throttle') throw new ProvisionedThroughputExceededException({ message: 'Rate exceeded', $metadata: { httpStatusCode: 400 } });
      const out = await doc.send(new PutCommand(input));
      if (f === 'timeout-after') throw Object.assign(new Error('socket timed out'), { name: 'TimeoutError' });
      return out;
    });
    return { s, sleeps, calls: () => calls, mock };
  }

  it('retries throttled writes with backoff, then fails retryably (the delivery comes again, written items are no-ops)', async () => {
    const ok = faulty((n) => (n <= 2 ? 'throttle' : 'pass'));
    await ok.s.write(delivery('7:0', 1, { user: 'thr', n: 1 }));
    expect(ok.sleeps).toEqual([50, 100]);
    expect(await get('thr')).toMatchObject({ n: 1 });

    const down = faulty(() => 'throttle');
    const err = await down.s.write(delivery('7:0', 2, { user: 'thr', n: 2 })).catch((e) => e);
    expect(err).toBeInstanceOf(DynamoDbThrottledError);
    expect(err.retryable).toBe(true);
    expect(down.calls()).toBe(4);
    expect(await get('thr')).toMatchObject({ n: 1 }); // nothing written, nothing marked: the redelivery writes it
    const again = sink();
    await again.write(delivery('7:0', 2, { user: 'thr', n: 2 }));
    expect(await get('thr')).toMatchObject({ n: 2, sluice_seq: 2 });
  });

  it('retries a write whose answer was lost after it landed: the retry finds it applied (condition) and counts it once', async () => {
    const f = faulty((n) => (n === 1 ? 'timeout-after' : 'pass'));
    await f.s.write(delivery('8:0', 1, { user: 'lost', n: 1 }));
    expect(f.calls()).toBe(2);
    expect(f.s.written).toBe(1);
    expect(f.s.staleWrites).toBe(0);
    expect(await get('lost')).toMatchObject({ n: 1, sluice_seq: 1 });
  });
});
