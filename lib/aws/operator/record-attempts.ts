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
 * redelivered messages, so the happy path pays nothing. Outside the version fence, but
 * each count is a conditional write on the item as read, so invocations that overlap (an
 * SQS redelivery while the first still runs) lose no failure, and a location at the limit
 * stays there. An in-place restore deletes the item (restore-partition.ts), as locations
 * after a restore may name other records.
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { PutCommand } from '@aws-sdk/lib-dynamodb';
import type { AttemptCounter, AttemptFailure } from '../../runtime/batch-runner.ts';
import type { ParkedFailure } from '../../runtime/failures.ts';
import type { PartitionScope } from '../../state/backend.ts';
import type { AwsAccounting } from '../cost/accounting.ts';
import { itemBytes } from '../dynamodb/dynamodb-layout.ts';
import { DynamoDbTable, kb } from '../dynamodb/dynamodb-table.ts';
import { AttemptsContendedError, mapDynamoDbError } from '../errors.ts';

/** Most locations kept (the most recent), and the item's size bound (DynamoDB's limit is 400 KB). */
const MAX_ENTRIES = 256;
const MAX_ITEM_BYTES = 300_000;
/** Error messages and stacks are cut to this many characters in the item. */
const MAX_TEXT = 2000;
/** Conditional writes tried before a count gives up (each retry means another invocation counted in between). */
const MAX_COUNT_TRIES = 8;

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
    return { failed: (location, failure, limit) => this.failed(scope, location, failure, limit), forget: (locations) => this.forget(scope, locations) };
  }

  /** Count one more failed attempt of a record or callback, up to `limit`; returns the attempts so far. */
  async failed(scope: PartitionScope, location: string, failure: AttemptFailure, limit: number): Promise<number> {
    for (let tries = 1; ; tries++) {
      const { map, raw } = await this.readRaw(scope);
      const attempts = Math.min(limit, (map.get(location)?.[1] ?? 0) + 1);
      map.delete(location);
      map.set(location, [location, attempts, cut(failure)]); // most recent last
      if (await this.write(scope, map, { expected: raw })) return attempts;
      if (tries >= MAX_COUNT_TRIES) throw new AttemptsContendedError(scope, location, tries);
    }
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
    return (await this.readRaw(scope)).map;
  }

  /** The entries and the item's attribute as stored (undefined: no item), the condition of the next write. */
  private async readRaw(scope: PartitionScope): Promise<{ map: Map<string, Entry>; raw: string | undefined }> {
    const item = await this.db.get(pk(scope), 'a');
    const raw = item ? String(item.a) : undefined;
    const entries = raw !== undefined ? (JSON.parse(raw) as Entry[]) : [];
    return { map: new Map(entries.map((e) => [e[0], e])), raw };
  }

  /**
   * Writes the entries; with `unchanged` (the attribute as read, undefined for no item), only
   * if the item is unchanged since: false when another invocation wrote in between.
   */
  private async write(scope: PartitionScope, map: Map<string, Entry>, unchanged?: { readonly expected: string | undefined }): Promise<boolean> {
    const entries = [...map.values()].slice(-MAX_ENTRIES);
    let item = { pk: pk(scope), sk: 'a', a: JSON.stringify(entries) };
    while (entries.length > 1 && itemBytes(item) > MAX_ITEM_BYTES) {
      entries.shift();
      item = { ...item, a: JSON.stringify(entries) };
    }
    const condition = !unchanged
      ? {}
      : unchanged.expected === undefined
        ? { ConditionExpression: 'attribute_not_exists(pk)' }
        : { ConditionExpression: 'a = :expected', ExpressionAttributeValues: { ':expected': unchanged.expected } };
    try {
      await this.db.send('PutItem', 'write', new PutCommand({ TableName: this.tableName, Item: item, ...condition, ReturnConsumedCapacity: 'TOTAL' }), 1, kb(itemBytes(item)));
      return true;
    } catch (e) {
      if ((e as { name?: string }).name === 'ConditionalCheckFailedException') return false;
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
