/**
 * How often each failing record (or callback) has been tried, per partition, with its
 * last error, so the operator handler runs user code on it exactly maxAttempts times, as
 * the embedded runtime does. ApproximateReceiveCount alone cannot tell: a message also
 * counts receives in which processing stopped at an earlier record of the group.
 *
 *   pk `${job}#f#${stage}#${partition}`   sk `a`   a (JSON: [locationId, attempts, failure])
 *
 * A record that reached maxAttempts is parked only with the commit of the messages up
 * to it; when a later failure in the same message stops that commit, the next receive
 * parks it from here (parkable) without running it again. Entries are forgotten once
 * their dead letter is committed. Written only when user code throws, and read only for
 * redelivered messages, so the happy path pays nothing. Advisory: outside the version
 * fence (one invocation owns a message group at a time); an in-place restore deletes it
 * (restore-partition.ts), as locations after a restore may name other records.
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { PutCommand } from '@aws-sdk/lib-dynamodb';
import type { AttemptCounter, AttemptFailure } from '../../runtime/batch-runner.ts';
import type { ParkedFailure } from '../../runtime/failures.ts';
import type { PartitionScope } from '../../state/backend.ts';
import type { AwsAccounting } from '../cost/accounting.ts';
import { itemBytes } from '../dynamodb/dynamodb-layout.ts';
import { DynamoDbTable, kb } from '../dynamodb/dynamodb-table.ts';
import { mapDynamoDbError } from '../errors.ts';

/** Most locations kept (the most recent), and the item's size bound (DynamoDB's limit is 400 KB). */
const MAX_ENTRIES = 256;
const MAX_ITEM_BYTES = 300_000;
/** Error messages and stacks are cut to this many characters in the item. */
const MAX_TEXT = 2000;

export type { AttemptFailure } from '../../runtime/batch-runner.ts';

type Entry = [location: string, attempts: number, failure?: AttemptFailure];

export class RecordAttempts {
  private readonly db: DynamoDbTable;

  constructor(
    client: DynamoDBClient,
    private readonly tableName: string,
    accounting: AwsAccounting,
  ) {
    this.db = new DynamoDbTable(client, tableName, accounting);
  }

  /** The batch runner's counter for one partition. */
  of(scope: PartitionScope): AttemptCounter {
    return { failed: (location, failure) => this.failed(scope, location, failure), forget: (locations) => this.forget(scope, locations) };
  }

  /** Count one more failed attempt of a record or callback; returns the attempts so far. */
  async failed(scope: PartitionScope, location: string, failure: AttemptFailure): Promise<number> {
    const map = await this.read(scope);
    const attempts = (map.get(location)?.[1] ?? 0) + 1;
    map.delete(location);
    map.set(location, [location, attempts, cut(failure)]); // most recent last
    await this.write(scope, map);
    return attempts;
  }

  /** The locations tried maxAttempts times whose dead letters are not committed yet: to park without running them again. */
  async parkable(scope: PartitionScope, maxAttempts: number): Promise<Map<string, ParkedFailure>> {
    const out = new Map<string, ParkedFailure>();
    for (const [location, attempts, f] of (await this.read(scope)).values()) {
      if (attempts >= maxAttempts && f) out.set(location, { error: f.error, attempts, ...(f.operator !== undefined ? { operator: f.operator } : {}), ...(f.stack !== undefined ? { stack: f.stack } : {}) });
    }
    return out;
  }

  /** Forget locations whose dead letters were committed (best effort: stale entries only cost space). */
  async forget(scope: PartitionScope, locations: Iterable<string>): Promise<void> {
    const map = await this.read(scope);
    let changed = false;
    for (const l of locations) changed = map.delete(l) || changed;
    if (changed) await this.write(scope, map);
  }

  private async read(scope: PartitionScope): Promise<Map<string, Entry>> {
    const item = await this.db.get(pk(scope), 'a');
    const entries = item ? (JSON.parse(String(item.a)) as Entry[]) : [];
    return new Map(entries.map((e) => [e[0], e]));
  }

  private async write(scope: PartitionScope, map: Map<string, Entry>): Promise<void> {
    const entries = [...map.values()].slice(-MAX_ENTRIES);
    let item = { pk: pk(scope), sk: 'a', a: JSON.stringify(entries) };
    while (entries.length > 1 && itemBytes(item) > MAX_ITEM_BYTES) {
      entries.shift();
      item = { ...item, a: JSON.stringify(entries) };
    }
    try {
      await this.db.send('PutItem', 'write', new PutCommand({ TableName: this.tableName, Item: item, ReturnConsumedCapacity: 'TOTAL' }), 1, kb(itemBytes(item)));
    } catch (e) {
      throw mapDynamoDbError(e, { operation: 'PutItem', table: this.tableName, write: true });
    }
  }
}

function cut(f: AttemptFailure): AttemptFailure {
  return { error: f.error.slice(0, MAX_TEXT), ...(f.operator !== undefined ? { operator: f.operator } : {}), ...(f.stack !== undefined ? { stack: f.stack.slice(0, MAX_TEXT) } : {}) };
}

function pk(scope: PartitionScope): string {
  return `${scope.job}#f#${scope.stage}#${scope.partition}`;
}
