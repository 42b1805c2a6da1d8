/**
 * An idempotent DynamoDB upsert sink: one item per record key, the last record a
 * producer emitted for a key wins, and a redelivered, duplicated or out-of-order
 * delivery never overwrites a newer one.
 *
 * Every item carries the producer (partition) that wrote it and the sequence number of
 * that delivery (`sluice_producer`, `sluice_seq`). A write is a PutItem with the
 * condition
 *
 *   attribute_not_exists(sluice_seq) OR sluice_producer <> :producer OR sluice_seq < :seq
 *
 * so a repeated delivery (same seq) or an older one (lower seq) is refused by DynamoDB
 * itself, whichever container sends it and whenever. Within one delivery the records
 * are coalesced per key first (the last wins), so each key costs one write per delivery.
 * A key that moves to another producer (a rescale, or a sink fed by an unkeyed stage)
 * is overwritten by the new producer's first write: order across producers is not
 * defined by the contract (per-key order holds per source partition).
 *
 * Why PutItem, not BatchWriteItem or TransactWriteItems: BatchWriteItem takes no
 * condition, so a late redelivery would overwrite newer values (a zombie container's
 * outbox, a retry after a lost answer); TransactWriteItems takes conditions but bills
 * two write units per item, and one stale item (any redelivery) cancels the whole
 * transaction. On-demand DynamoDB bills per write unit, not per request, so conditional
 * PutItems cost the same as a batch (one unit per KB per item; a refused condition is
 * billed one unit), and they run `concurrency` at a time.
 *
 * Faults: throttled items are retried with backoff (`maxAttempts`), then the delivery
 * fails with DynamoDbThrottledError (retryable; the operator function's outbox is
 * delivered again, and the condition makes the items already written no-ops). A lost
 * answer (timeout, 5xx) is retried the same way: if the first write landed, the retry's
 * condition fails, which is success. Accounting ('dynamodb', 'PutItem'): requests,
 * items, reported and estimated write units; refused conditions count as errors.
 */
import { ConditionalCheckFailedException, DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DynamoDBDocumentClient, PutCommand } from '@aws-sdk/lib-dynamodb';
import type { Sink, SinkBatch } from '../../api/sinks.ts';
import { FieldError } from '../../errors.ts';
import { AwsAccounting, dynamoDbCapacity } from '../cost/accounting.ts';
import { itemBytes } from '../dynamodb/dynamodb-layout.ts';
import { kb, pool } from '../dynamodb/dynamodb-table.ts';
import { DynamoDbThrottledError, mapDynamoDbError } from '../errors.ts';
import { type AwsBindableSink, type AwsSinkBinding, type AwsSinkResources, type KeyValue, PRODUCER_ATTRIBUTE, type ResolvedUpsertOptions, SEQ_ATTRIBUTE, SinkRecordsRejectedError } from './sink-options.ts';

/** A record the sink cannot turn into an item (its key or item function threw or returned the wrong type); reported per delivery as SinkRecordsRejectedError. */
export class SinkRecordError extends FieldError {
  readonly code = 'SINK_RECORD';
}

const CONDITION = 'attribute_not_exists(#seq) OR #prod <> :prod OR #seq < :seq';

export class DynamoDbUpsertSink<T> implements Sink<T>, AwsBindableSink {
  readonly kind = 'dynamodb-upsert';
  readonly awsResources: AwsSinkResources;
  /** Deliveries skipped as redeliveries by this container's high-water marks. */
  duplicatesDropped = 0;
  /** Item writes DynamoDB refused because the item holds this producer's write at this or a later delivery. */
  staleWrites = 0;
  /** Items written. */
  written = 0;
  private readonly highWater = new Map<string, number>();
  private client?: DynamoDBClient;
  private doc?: DynamoDBDocumentClient;
  private accounting: AwsAccounting;

  constructor(
    readonly options: ResolvedUpsertOptions<T>,
    context: { dynamodb?: DynamoDBClient; accounting?: AwsAccounting } = {},
  ) {
    this.awsResources = { kind: 'dynamodb-upsert', table: options.table };
    this.client = context.dynamodb;
    this.accounting = context.accounting ?? new AwsAccounting();
  }

  bindAws(binding: AwsSinkBinding): void {
    if (binding.dynamodb && binding.dynamodb !== this.client) {
      this.client = binding.dynamodb;
      this.doc = undefined;
    }
    if (binding.accounting) this.accounting = binding.accounting;
  }

  async write(batch: SinkBatch<T>): Promise<void> {
    const hw = this.highWater.get(batch.producer) ?? 0;
    if (batch.seq <= hw) {
      this.duplicatesDropped++;
      return;
    }
    const items = new Map<string, { item: Record<string, unknown>; index: number }>();
    const rejected: { index: number; record: unknown; error: string }[] = [];
    batch.records.forEach((record, index) => {
      try {
        const item = this.itemOf(record, index, batch);
        // Coalesce: the last record of a key in this delivery is the one that counts.
        const id = JSON.stringify([item[this.options.partitionKey], this.options.sortKey ? item[this.options.sortKey] : null]);
        items.delete(id);
        items.set(id, { item, index });
      } catch (e) {
        if (!(e instanceof SinkRecordError)) throw e;
        rejected.push({ index, record, error: e.message });
      }
    });
    await pool([...items.values()], this.options.concurrency, async ({ item, index }) => {
      try {
        await this.put(item);
      } catch (e) {
        if (!(e instanceof SinkRecordError)) throw e;
        rejected.push({ index, record: batch.records[index], error: e.message });
      }
    });
    this.highWater.set(batch.producer, batch.seq);
    if (rejected.length) throw new SinkRecordsRejectedError(`dynamodbUpsert(${this.options.table})`, batch.producer, batch.seq, rejected.sort((a, b) => a.index - b.index));
  }

  private itemOf(record: T, index: number, batch: SinkBatch<T>): Record<string, unknown> {
    const o = this.options;
    const where = `AwsSinks.dynamodbUpsert(${o.table}) record ${index} of delivery ${batch.producer}#${batch.seq}`;
    let key: KeyValue | readonly [KeyValue, KeyValue];
    let attrs: Record<string, unknown>;
    try {
      key = o.key(record);
      attrs = o.item ? o.item(record) : typeof record === 'object' && record !== null && !Array.isArray(record) ? { ...(record as Record<string, unknown>) } : { value: record };
    } catch (e) {
      throw new SinkRecordError(`${where}: key/item`, 'functions that return for every record', `a throw: ${(e as Error).message}`);
    }
    const parts = Array.isArray(key) ? key : [key];
    const want = o.sortKey ? 2 : 1;
    if (parts.length !== want || parts.some((p) => !(typeof p === 'string' ? p.length > 0 : Number.isFinite(p)))) {
      throw new SinkRecordError(`${where}: key(record)`, o.sortKey ? '[partition, sort]: two non-empty strings or finite numbers' : 'a non-empty string or a finite number', JSON.stringify(key) ?? String(key));
    }
    if (typeof attrs !== 'object' || attrs === null) throw new SinkRecordError(`${where}: item(record)`, 'an object of attributes', String(attrs));
    if (PRODUCER_ATTRIBUTE in attrs || SEQ_ATTRIBUTE in attrs) throw new SinkRecordError(`${where}: item(record)`, `no attribute named ${PRODUCER_ATTRIBUTE} or ${SEQ_ATTRIBUTE} (the sink's own)`, Object.keys(attrs).join(', '));
    const item: Record<string, unknown> = { ...attrs, [o.partitionKey]: parts[0], [PRODUCER_ATTRIBUTE]: batch.producer, [SEQ_ATTRIBUTE]: batch.seq };
    if (o.sortKey) item[o.sortKey] = parts[1];
    return item;
  }

  /** The document client the writes go through (created on first use). */
  documentClient(): DynamoDBDocumentClient {
    this.client ??= new DynamoDBClient({});
    return (this.doc ??= DynamoDBDocumentClient.from(this.client, { marshallOptions: { removeUndefinedValues: true, convertClassInstanceToMap: true } }));
  }

  /** One conditional PutItem, retried on throttling and on a lost answer. */
  private async put(item: Record<string, unknown>): Promise<void> {
    const { table, maxAttempts, sleep } = this.options;
    const est = estimateUnits(item);
    const doc = this.documentClient();
    const command = new PutCommand({
      TableName: table,
      Item: item,
      ConditionExpression: CONDITION,
      ExpressionAttributeNames: { '#seq': SEQ_ATTRIBUTE, '#prod': PRODUCER_ATTRIBUTE },
      ExpressionAttributeValues: { ':seq': item[SEQ_ATTRIBUTE], ':prod': item[PRODUCER_ATTRIBUTE] },
      ReturnConsumedCapacity: 'TOTAL',
    });
    let landedMaybe = false;
    for (let attempt = 1; ; attempt++) {
      try {
        const out = await doc.send(command);
        this.accounting.record('dynamodb', 'PutItem', { requests: 1, items: 1, estimatedWriteUnits: est, ...dynamoDbCapacity(out.ConsumedCapacity, 'write') });
        this.written++;
        return;
      } catch (e) {
        if (e instanceof ConditionalCheckFailedException || (e as { name?: string }).name === 'ConditionalCheckFailedException') {
          // Billed like a write; after a lost answer it is our own first write.
          this.accounting.record('dynamodb', 'PutItem', { requests: 1, errors: 1, estimatedWriteUnits: 1 });
          if (landedMaybe) this.written++;
          else this.staleWrites++;
          return;
        }
        this.accounting.record('dynamodb', 'PutItem', { requests: 1, errors: 1 });
        if (isMarshallError(e)) throw new SinkRecordError(`AwsSinks.dynamodbUpsert(${table}) item`, 'values DynamoDB can store (finite numbers, no symbols)', (e as Error).message);
        const mapped = mapDynamoDbError(e, { operation: 'PutItem', table, write: true });
        if (!mapped.retryable) throw mapped;
        if (attempt >= maxAttempts) {
          throw mapped instanceof DynamoDbThrottledError ? new DynamoDbThrottledError('PutItem', table, `still throttled after ${attempt} attempts`, { cause: e }) : mapped;
        }
        if (mapped.code === 'DYNAMODB_UNKNOWN_OUTCOME') landedMaybe = true;
        await sleep(Math.min(2000, 25 * 2 ** attempt));
      }
    }
  }
}

/** The document client's marshalling failed before anything was sent. */
function isMarshallError(e: unknown): boolean {
  const m = (e as Error)?.message ?? '';
  return !(e as { $metadata?: unknown })?.$metadata && /Unsupported type|marshall|convertClassInstanceToMap|Special numeric value|Cannot convert/i.test(m);
}

/** Write units by AWS's rule (1 per started KB); values JSON cannot size (bigint) are left to the marshaller. */
function estimateUnits(item: Record<string, unknown>): number {
  try {
    return kb(itemBytes(item));
  } catch {
    return 1;
  }
}
