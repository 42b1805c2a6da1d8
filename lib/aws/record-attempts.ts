/**
 * How often each failing record has been tried, per partition, so the operator handler
 * parks a record after exactly maxAttempts failures, as the embedded runtime does.
 * ApproximateReceiveCount alone cannot tell: a message also counts receives in which
 * processing stopped at an earlier record of the group.
 *
 *   pk `${job}#f#${stage}#${partition}`   sk `a`   a (JSON: locationId -> attempts)
 *
 * Written only when user code throws, so the happy path pays nothing. Advisory: it is
 * outside the version fence (one invocation owns a message group at a time), and at
 * most MAX_ENTRIES recent locations are kept.
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { PutCommand } from '@aws-sdk/lib-dynamodb';
import type { PartitionScope } from '../state/backend.ts';
import type { AwsAccounting } from './accounting.ts';
import { itemBytes } from './dynamodb-layout.ts';
import { DynamoDbTable, kb } from './dynamodb-table.ts';
import { mapDynamoDbError } from './errors.ts';

const MAX_ENTRIES = 64;

export class RecordAttempts {
  private readonly db: DynamoDbTable;

  constructor(
    client: DynamoDBClient,
    private readonly tableName: string,
    accounting: AwsAccounting,
  ) {
    this.db = new DynamoDbTable(client, tableName, accounting);
  }

  /** Count one more failed attempt of a record; returns the attempts so far. */
  async failed(scope: PartitionScope, location: string): Promise<number> {
    const map = await this.read(scope);
    const attempts = (map.get(location) ?? 0) + 1;
    map.delete(location);
    map.set(location, attempts); // most recent last
    await this.write(scope, map);
    return attempts;
  }

  /** Forget records that were parked (best effort: stale entries only cost space). */
  async forget(scope: PartitionScope, locations: Iterable<string>): Promise<void> {
    const map = await this.read(scope);
    let changed = false;
    for (const l of locations) changed = map.delete(l) || changed;
    if (changed) await this.write(scope, map);
  }

  private async read(scope: PartitionScope): Promise<Map<string, number>> {
    const item = await this.db.get(pk(scope), 'a');
    return new Map(item ? (JSON.parse(String(item.a)) as [string, number][]) : []);
  }

  private async write(scope: PartitionScope, map: Map<string, number>): Promise<void> {
    const entries = [...map].slice(-MAX_ENTRIES);
    const item = { pk: pk(scope), sk: 'a', a: JSON.stringify(entries) };
    try {
      await this.db.send('PutItem', 'write', new PutCommand({ TableName: this.tableName, Item: item, ReturnConsumedCapacity: 'TOTAL' }), 1, kb(itemBytes(item)));
    } catch (e) {
      throw mapDynamoDbError(e, { operation: 'PutItem', table: this.tableName, write: true });
    }
  }
}

function pk(scope: PartitionScope): string {
  return `${scope.job}#f#${scope.stage}#${scope.partition}`;
}
