/**
 * What the data path tells the checkpoint coordinator on AWS, in the state table under
 * one partition key that operators and the ingest function may write and the
 * coordinator reads (apart from `${job}#c`, which only the coordinator writes):
 *
 *   pk `${job}#a`   sk `ack#${epoch:12}#${stage}/${partition}`   v (tagged JSON Ack), expires (TTL)
 *   pk `${job}#a`   sk `activity`                                 at (ms: last input seen)
 *
 * Acks are created once (attribute_not_exists): the first ack per epoch and partition
 * wins everywhere, as coordinator.ts requires; a redelivered outbox re-puts and loses.
 * The coordinator reads them by GetItem (one per participant it still waits for), so it
 * needs no Query permission.
 *
 * Operator wiring (functions/operator.ts): `onBarrierAcks: (acks) => ackStore.put(acks)`,
 * with PutItem on leading key `${job}#a` for the stage roles.
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import type { Ack, Participant } from '../../checkpoint/protocol.ts';
import type { BarrierAck } from '../../transport/envelope.ts';
import { AwsAccounting } from '../cost/accounting.ts';
import { decodeValue, encodeValue, itemBytes } from '../dynamodb/dynamodb-layout.ts';
import { DynamoDbTable, kb, pool } from '../dynamodb/dynamodb-table.ts';
import { mapDynamoDbError } from '../errors.ts';

export interface DynamoDbAckStoreOptions {
  readonly client: DynamoDBClient;
  readonly tableName: string;
  readonly job: string;
  readonly accounting?: AwsAccounting;
  /** Ack items expire this long after they were written (they matter for one epoch). @default 7 days */
  readonly ttlSeconds?: number;
}

export function signalsPk(job: string): string {
  return `${job}#a`;
}

export function ackSk(epoch: number, stage: number, partition: number): string {
  return `ack#${String(epoch).padStart(12, '0')}#${stage}/${partition}`;
}

export const ACTIVITY_SK = 'activity';

export class DynamoDbAckStore {
  readonly accounting: AwsAccounting;
  private readonly db: DynamoDbTable;
  private readonly pk: string;

  constructor(private readonly options: DynamoDbAckStoreOptions) {
    this.accounting = options.accounting ?? new AwsAccounting();
    this.db = new DynamoDbTable(options.client, options.tableName, this.accounting);
    this.pk = signalsPk(options.job);
  }

  /** Record acks create-only; a second ack for the same epoch and partition is dropped. */
  async put(acks: readonly BarrierAck[]): Promise<void> {
    const expires = Math.floor(Date.now() / 1000) + (this.options.ttlSeconds ?? 7 * 24 * 3600);
    await pool(acks, 8, async (ack) => {
      const item = { pk: this.pk, sk: ackSk(ack.epoch, ack.stage, ack.partition), v: encodeValue(ack), expires };
      try {
        await this.db.send(
          'PutItem',
          'write',
          new PutCommand({ TableName: this.options.tableName, Item: item, ConditionExpression: 'attribute_not_exists(#pk)', ExpressionAttributeNames: { '#pk': 'pk' }, ReturnConsumedCapacity: 'TOTAL' }),
          1,
          kb(itemBytes(item)),
        );
      } catch (e) {
        // The first ack won; this one is a redelivery (or a later attempt) and must not replace it.
        if ((e as { name?: string }).name === 'ConditionalCheckFailedException') return;
        throw mapDynamoDbError(e, { operation: 'PutItem', table: this.options.tableName, write: true });
      }
    });
  }

  /** The acks of `epoch` from these participants that exist (strongly consistent reads). */
  async get(epoch: number, participants: readonly Pick<Participant, 'stage' | 'partition'>[]): Promise<Ack[]> {
    const out: Ack[] = [];
    await pool(participants, 8, async (p) => {
      const item = await this.db.get(this.pk, ackSk(epoch, p.stage, p.partition));
      if (item) out.push(decodeValue(String(item.v)) as Ack);
    });
    return out.sort((a, b) => a.stage - b.stage || a.partition - b.partition);
  }

  /** Input was accepted at `at` (ms). Monotonic: an older time never replaces a newer one. */
  async touch(at: number): Promise<void> {
    try {
      await this.db.send(
        'UpdateItem',
        'write',
        new UpdateCommand({
          TableName: this.options.tableName,
          Key: { pk: this.pk, sk: ACTIVITY_SK },
          UpdateExpression: 'SET #at = :at',
          ConditionExpression: 'attribute_not_exists(#at) OR #at < :at',
          ExpressionAttributeNames: { '#at': 'at' },
          ExpressionAttributeValues: { ':at': at },
          ReturnConsumedCapacity: 'TOTAL',
        }),
        1,
        1,
      );
    } catch (e) {
      if ((e as { name?: string }).name === 'ConditionalCheckFailedException') return;
      throw mapDynamoDbError(e, { operation: 'UpdateItem', table: this.options.tableName, write: true });
    }
  }

  /** When input was last seen (ms), or undefined when never. */
  async lastActivity(): Promise<number | undefined> {
    const item = await this.db.get(this.pk, ACTIVITY_SK);
    return item?.at === undefined ? undefined : Number(item.at);
  }
}
