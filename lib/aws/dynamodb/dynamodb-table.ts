/**
 * Requests to one DynamoDB table through the DocumentClient, each counted in the
 * accounting (requests, reported capacity, capacity estimated by AWS's rules), with
 * errors mapped to typed ones except where the caller must interpret them itself
 * (a transaction's version fence).
 */
import { randomUUID } from 'node:crypto';
import { CreateTableCommand, type DynamoDBClient, UpdateTimeToLiveCommand, waitUntilTableExists } from '@aws-sdk/client-dynamodb';
import { BatchWriteCommand, DynamoDBDocumentClient, GetCommand, QueryCommand, TransactWriteCommand } from '@aws-sdk/lib-dynamodb';
import { type AwsAccounting, dynamoDbCapacity } from '../cost/accounting.ts';
import { itemBytes } from './dynamodb-layout.ts';
import { DynamoDbThrottledError, mapDynamoDbError } from '../errors.ts';

export type Item = Record<string, unknown>;
const SERVICE = 'dynamodb';

export class DynamoDbTable {
  readonly doc: DynamoDBDocumentClient;

  constructor(
    client: DynamoDBClient,
    readonly name: string,
    readonly accounting: AwsAccounting,
  ) {
    this.doc = DynamoDBDocumentClient.from(client, { marshallOptions: { removeUndefinedValues: true } });
  }

  /**
   * One TransactWriteItems with a fresh ClientRequestToken, so the SDK's own retries of
   * it are idempotent for 10 minutes. Errors are thrown raw: the caller reads CancellationReasons.
   */
  async transact(items: Item[]): Promise<void> {
    let est = 0;
    for (const it of items) {
      const put = (it.Put as { Item?: Item } | undefined)?.Item;
      est += 2 * kb(put ? itemBytes(put) : 0);
    }
    await this.send('TransactWriteItems', 'write', new TransactWriteCommand({ TransactItems: items as never, ClientRequestToken: randomUUID(), ReturnConsumedCapacity: 'TOTAL' }), items.length, est);
  }

  /** A strongly consistent GetItem. */
  async get(pk: string, sk: string): Promise<Item | undefined> {
    try {
      const out = await this.send<{ Item?: Item }>('GetItem', 'read', new GetCommand({ TableName: this.name, Key: { pk, sk }, ConsistentRead: true, ReturnConsumedCapacity: 'TOTAL' }), 1, 0);
      this.accounting.record(SERVICE, 'GetItem', { estimatedReadUnits: Math.max(1, Math.ceil(itemBytes(out.Item ?? {}) / 4096)) });
      return out.Item;
    } catch (e) {
      throw mapDynamoDbError(e, { operation: 'GetItem', table: this.name, write: false });
    }
  }

  /** A strongly consistent Query over all pages. `#pk` and `#sk` name the key attributes in the condition. */
  async query(condition: string, values: Record<string, string>, projection?: string): Promise<Item[]> {
    const out: Item[] = [];
    let start: Item | undefined;
    do {
      const page = await this.queryPage(condition, values, projection, start);
      out.push(...page.items);
      start = page.next;
    } while (start);
    return out;
  }

  /** The first page of a strongly consistent Query (up to 1 MB read), and whether it was the last. */
  async queryFirstPage(condition: string, values: Record<string, string>, projection?: string): Promise<{ items: Item[]; complete: boolean }> {
    const page = await this.queryPage(condition, values, projection, undefined);
    return { items: page.items, complete: !page.next };
  }

  private async queryPage(condition: string, values: Record<string, string>, projection: string | undefined, start: Item | undefined): Promise<{ items: Item[]; next?: Item }> {
    let page: { Items?: Item[]; LastEvaluatedKey?: Item };
    try {
      page = await this.send(
        'Query',
        'read',
        new QueryCommand({
          TableName: this.name,
          KeyConditionExpression: condition,
          // DynamoDB refuses names the expressions do not use (a condition on the partition key alone).
          ExpressionAttributeNames: { '#pk': 'pk', ...(condition.includes('#sk') ? { '#sk': 'sk' } : {}), ...(projection ? { '#proj': projection } : {}) },
          ExpressionAttributeValues: values,
          ProjectionExpression: projection ? '#pk, #proj' : undefined,
          ConsistentRead: true,
          ExclusiveStartKey: start,
          ReturnConsumedCapacity: 'TOTAL',
        }),
        0,
        0,
      );
    } catch (e) {
      throw mapDynamoDbError(e, { operation: 'Query', table: this.name, write: false });
    }
    const items = page.Items ?? [];
    // A Query reads the sum of its items' sizes, rounded up to 4 KB once (strongly consistent).
    // With a projection we see only the projected part, so this undercounts a little.
    this.accounting.record(SERVICE, 'Query', { items: items.length, estimatedReadUnits: Math.max(1, Math.ceil(items.reduce((n, it) => n + itemBytes(it), 0) / 4096)) });
    return { items, next: page.LastEvaluatedKey };
  }

  /** BatchWriteItem in groups of 25, retrying unprocessed items with backoff. Not atomic: only for idempotent writes. */
  async batchWrite(requests: Item[]): Promise<void> {
    for (let i = 0; i < requests.length; i += 25) {
      let pending: Item[] = requests.slice(i, i + 25);
      for (let attempt = 0; pending.length; attempt++) {
        if (attempt === 8) throw new DynamoDbThrottledError('BatchWriteItem', this.name, `${pending.length} items still unprocessed after ${attempt} attempts`);
        if (attempt) await sleep(Math.min(1000, 25 * 2 ** attempt) * (0.5 + Math.random() / 2));
        const est = pending.reduce((n, r) => n + kb(itemBytes((r.PutRequest as { Item?: Item } | undefined)?.Item ?? {})), 0);
        let out: { UnprocessedItems?: Record<string, Item[]> };
        try {
          out = await this.send('BatchWriteItem', 'write', new BatchWriteCommand({ RequestItems: { [this.name]: pending as never }, ReturnConsumedCapacity: 'TOTAL' }), pending.length, est);
        } catch (e) {
          throw mapDynamoDbError(e, { operation: 'BatchWriteItem', table: this.name, write: true });
        }
        pending = out.UnprocessedItems?.[this.name] ?? [];
      }
    }
  }

  /** Send one request, counting it, its reported capacity and the estimated write units. Errors pass through unmapped. */
  async send<T>(operation: string, kind: 'read' | 'write', command: { input: unknown }, items: number, estimatedWriteUnits: number): Promise<T> {
    try {
      const out = (await this.doc.send(command as never)) as { ConsumedCapacity?: unknown };
      this.accounting.record(SERVICE, operation, { requests: 1, items, estimatedWriteUnits, ...dynamoDbCapacity(out.ConsumedCapacity, kind) });
      return out as T;
    } catch (e) {
      this.accounting.record(SERVICE, operation, { requests: 1, errors: 1 });
      throw e;
    }
  }
}

/** Write units of an item by AWS's rule: 1 per started KB. */
export function kb(bytes: number): number {
  return Math.max(1, Math.ceil(bytes / 1024));
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Run f over items with at most n in flight; the first error stops new work and is thrown. */
export async function pool<T>(items: readonly T[], n: number, f: (t: T) => Promise<void>): Promise<void> {
  let next = 0;
  let failed = false;
  const worker = async () => {
    while (!failed && next < items.length) {
      const item = items[next++];
      try {
        await f(item);
      } catch (e) {
        failed = true;
        throw e;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(n, items.length) }, worker));
}

/** The state table: pk/sk strings, on-demand billing, TTL on `expires` (redo-log leftovers). Idempotent. */
export async function createStateTable(client: DynamoDBClient, tableName: string): Promise<void> {
  try {
    await client.send(
      new CreateTableCommand({
        TableName: tableName,
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [
          { AttributeName: 'pk', AttributeType: 'S' },
          { AttributeName: 'sk', AttributeType: 'S' },
        ],
        KeySchema: [
          { AttributeName: 'pk', KeyType: 'HASH' },
          { AttributeName: 'sk', KeyType: 'RANGE' },
        ],
      }),
    );
  } catch (e) {
    if ((e as { name?: string }).name !== 'ResourceInUseException') throw mapDynamoDbError(e, { operation: 'CreateTable', table: tableName, write: true });
  }
  await waitUntilTableExists({ client, maxWaitTime: 120, minDelay: 1, maxDelay: 5 }, { TableName: tableName });
  try {
    await client.send(new UpdateTimeToLiveCommand({ TableName: tableName, TimeToLiveSpecification: { AttributeName: 'expires', Enabled: true } }));
  } catch (e) {
    // Already enabled is fine; anything else is not.
    if (!/already enabled/i.test((e as Error).message ?? '')) throw mapDynamoDbError(e, { operation: 'UpdateTimeToLive', table: tableName, write: true });
  }
}
