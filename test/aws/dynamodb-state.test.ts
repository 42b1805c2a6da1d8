/** The DynamoDB state backend against DynamoDB Local: the shared contract, then what only DynamoDB has (limits, layout, cost). */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { createStateTable, DynamoDbStateBackend } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { StateItemTooLargeError, StateNotPrefetchedError } from '../../lib/aws/errors.ts';
import { backendConformance, batch, freshScope, read } from '../state/backend-conformance.ts';

const client = new DynamoDBClient({ endpoint: inject('dynamodbEndpoint'), region: inject('awsRegion'), credentials: inject('awsCredentials') });
const table = `sluice-state-${process.pid}-${Date.now()}`;

beforeAll(async () => {
  await createStateTable(client, table);
  await createStateTable(client, table); // idempotent
});
afterAll(() => client.destroy());

backendConformance('DynamoDbStateBackend', () => ({
  open: () => new DynamoDbStateBackend({ client, tableName: table }),
  settle: async (b, scope) => void (await (b as DynamoDbStateBackend).compact(scope)),
}));
backendConformance('DynamoDbStateBackend (no state log)', () => ({ open: () => new DynamoDbStateBackend({ client, tableName: table, stateLog: false }) }));

describe('DynamoDbStateBackend on DynamoDB Local', () => {
  it('rejects a value over the 400 KB item limit with a typed error naming it, writing nothing', async () => {
    const b = new DynamoDbStateBackend({ client, tableName: table });
    const scope = freshScope();
    await b.recover(scope);
    const big = 'x'.repeat(410 * 1024);
    const err = await b
      .commit(batch(scope, 0, { writes: [{ kg: 1, entity: 'ok', field: 'f', value: 1 }, { kg: 1, entity: 'op\u0001sbig', field: 'blob', value: big }] }))
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StateItemTooLargeError);
    expect(err).toMatchObject({ entity: 'op\u0001sbig', field: 'blob', limitBytes: 400 * 1024, retryable: false });
    expect((err as StateItemTooLargeError).bytes).toBeGreaterThan(410 * 1024);
    expect((err as Error).message).toMatch(/"blob".*over DynamoDB's item limit/);
    expect((await b.recover(scope)).version).toBe(0);
    expect(await read(b, scope, 1, 'ok')).toBeUndefined();
    // Just under the limit is fine.
    await b.commit(batch(scope, 0, { writes: [{ kg: 1, entity: 'op\u0001sbig', field: 'blob', value: 'y'.repeat(399 * 1024) }] }));
    expect(((await read(new DynamoDbStateBackend({ client, tableName: table }), scope, 1, 'op\u0001sbig'))!.blob as string).length).toBe(399 * 1024);
  });

  it('chunks a large outbox and hashes over-long entity and field names, reading all back', async () => {
    const b = new DynamoDbStateBackend({ client, tableName: table });
    const scope = freshScope();
    await b.recover(scope);
    const longEntity = 'op\u0001s' + '\u00e9'.repeat(2000);
    const longField = 'm\u0002' + JSON.stringify('k'.repeat(3000));
    const records = Array.from({ length: 3000 }, (_, i) => ({ i, pad: 'p'.repeat(300) })); // ~1 MB of outbox
    const outbox = [{ kind: 'sink' as const, delivery: { sink: 's', producer: '0:0', seq: 1, records } }];
    await b.commit(batch(scope, 0, { writes: [{ kg: 4, entity: longEntity, field: longField, value: 'v' }, { kg: 4, entity: longEntity, field: 'short', value: 1 }], outbox }));
    const fresh = new DynamoDbStateBackend({ client, tableName: table });
    const rec = await fresh.recover(scope);
    expect(rec.outbox).toEqual(outbox);
    expect(await read(fresh, scope, 4, longEntity)).toEqual({ [longField]: 'v', short: 1 });
    await b.clearOutbox(scope, 1);
    expect((await fresh.recover(scope)).outbox).toEqual([]);
  });

  it('answers peek from the prefetch cache, keeps it current on commit, and refuses entities never prefetched', async () => {
    const accounting = new AwsAccounting();
    const b = new DynamoDbStateBackend({ client, tableName: table, accounting });
    const scope = freshScope();
    await b.recover(scope);
    expect(() => b.peek(scope, 1, 'never')).toThrow(StateNotPrefetchedError);
    accounting.reset();
    await b.prefetch(scope, [
      { kg: 1, entity: 'a' },
      { kg: 1, entity: 'b' },
      { kg: 1, entity: 'a' },
    ]);
    // One Query lists key group 1 (no items): neither entity needs its own.
    expect(accounting.get('dynamodb', 'Query').requests).toBe(1);
    await b.commit(batch(scope, 0, { writes: [{ kg: 1, entity: 'a', field: 'f', value: 1 }] }));
    await b.prefetch(scope, [{ kg: 1, entity: 'a' }]);
    expect(accounting.get('dynamodb', 'Query').requests).toBe(1); // served from cache
    expect(Object.fromEntries(b.peek(scope, 1, 'a')!)).toEqual({ f: 1 });
    expect(b.peek(scope, 1, 'b')).toBeUndefined();
  });

  it('counts requests and capacity per operation (state written directly, without the log)', async () => {
    const accounting = new AwsAccounting();
    const b = new DynamoDbStateBackend({ client, tableName: table, accounting, stateLog: false });
    const scope = freshScope();
    await b.recover(scope);
    await b.commit(batch(scope, 0, { writes: Array.from({ length: 10 }, (_, i) => ({ kg: 0, entity: 'e', field: `f${i}`, value: i })) }));
    const tx = accounting.get('dynamodb', 'TransactWriteItems');
    expect(tx).toMatchObject({ requests: 1, errors: 0, items: 11 });
    expect(tx.estimatedWriteUnits).toBe(22); // 11 small items, 2 units each in a transaction
    expect(tx.writeUnits).toBeGreaterThan(0); // as reported (DynamoDB Local under-reports)
    expect(accounting.get('dynamodb', 'GetItem').requests).toBe(1);
    expect(accounting.totals('dynamodb').requests).toBe(3); // GetItem + Query (recover) + the transaction
  });
});
