/**
 * PointerStore on DynamoDB: checkpoint pointers and coordinator records, changed only
 * by compare-and-set (a conditional PutItem), in the job's state table:
 *
 *   pk `${job}#c`   sk `ptr#${name}`   ver (number), v (tagged JSON, dynamodb-layout.ts)
 *
 * `#c` sits beside the state (`#s#`) and partition control (`#p#`) keys of
 * dynamodb-state.ts and never collides with them. Reads are strongly consistent, so a
 * successful compareAndSet is visible to the next read anywhere.
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { PutCommand } from '@aws-sdk/lib-dynamodb';
import type { PointerStore, PointerValue } from '../../checkpoint/storage.ts';
import { AwsAccounting } from '../cost/accounting.ts';
import { decodeValue, encodeValue, itemBytes, MAX_ITEM_BYTES } from './dynamodb-layout.ts';
import { DynamoDbTable, kb } from './dynamodb-table.ts';
import { mapDynamoDbError, StateItemTooLargeError } from '../errors.ts';

export interface DynamoDbPointerStoreOptions {
  readonly client: DynamoDBClient;
  readonly tableName: string;
  readonly job: string;
  readonly accounting?: AwsAccounting;
}

export function pointerKey(job: string, name: string): { pk: string; sk: string } {
  return { pk: `${job}#c`, sk: `ptr#${name}` };
}

export class DynamoDbPointerStore implements PointerStore {
  readonly accounting: AwsAccounting;
  private readonly db: DynamoDbTable;

  constructor(private readonly options: DynamoDbPointerStoreOptions) {
    this.accounting = options.accounting ?? new AwsAccounting();
    this.db = new DynamoDbTable(options.client, options.tableName, this.accounting);
  }

  async read<T>(name: string): Promise<PointerValue<T> | undefined> {
    const { pk, sk } = pointerKey(this.options.job, name);
    const item = await this.db.get(pk, sk);
    if (!item) return undefined;
    return { value: decodeValue(String(item.v)) as T, version: Number(item.ver) };
  }

  async compareAndSet<T>(name: string, expectedVersion: number, value: T): Promise<boolean> {
    const { pk, sk } = pointerKey(this.options.job, name);
    const item = { pk, sk, ver: expectedVersion + 1, v: encodeValue(value) };
    const bytes = itemBytes(item);
    if (bytes > MAX_ITEM_BYTES) throw new StateItemTooLargeError(`(pointer ${name})`, 'v', bytes, MAX_ITEM_BYTES);
    const condition: { ConditionExpression: string; ExpressionAttributeNames: Record<string, string>; ExpressionAttributeValues?: Record<string, number> } =
      expectedVersion === 0
        ? { ConditionExpression: 'attribute_not_exists(#pk)', ExpressionAttributeNames: { '#pk': 'pk' } }
        : { ConditionExpression: '#ver = :e', ExpressionAttributeNames: { '#ver': 'ver' }, ExpressionAttributeValues: { ':e': expectedVersion } };
    try {
      await this.db.send('PutItem', 'write', new PutCommand({ TableName: this.options.tableName, Item: item, ...condition, ReturnConsumedCapacity: 'TOTAL' }), 1, kb(bytes));
      return true;
    } catch (e) {
      if ((e as { name?: string }).name === 'ConditionalCheckFailedException') return false;
      throw mapDynamoDbError(e, { operation: 'PutItem', table: this.options.tableName, write: true });
    }
  }
}
