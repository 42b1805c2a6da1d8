/**
 * Idempotency-Keys of the ingest function, in the job's state table: one item per key,
 * `${job}#k#<first 32 hex of sha256(key)>` / `k`, expiring (TTL attribute `expires`) a
 * day after its first request. A request claims its key with a conditional PutItem
 * (the old item comes back when it was claimed before: one round trip either way), the
 * answer is written once the events are in SQS, and a claim whose attempt enqueued
 * nothing is deleted. The decision (new, replay, conflict, resend) is
 * lib/transport/idempotency.ts.
 */
import { createHash } from 'node:crypto';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import { DeleteCommand, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { unmarshall } from '@aws-sdk/util-dynamodb';
import { DEFAULT_RETENTION_MS, type Remembered, type RememberedAnswer } from '../../transport/idempotency.ts';
import type { ShedEvent } from '../../transport/ingest-validation.ts';
import { AwsAccounting } from '../cost/accounting.ts';
import { itemBytes } from '../dynamodb/dynamodb-layout.ts';
import { DynamoDbTable, type Item, kb } from '../dynamodb/dynamodb-table.ts';
import { mapDynamoDbError, ShedNotRecordedError } from '../errors.ts';

export const KEY_SK = 'k';
/** Largest answer remembered whole (an item holds 400 KB); a larger one is kept without its rejection list. */
const MAX_ANSWER_BYTES = 300_000;

/** The partition key of an Idempotency-Key's item (the IAM grant's LeadingKeys: `${job}#k#*`). */
export function keyPk(job: string, key: string): string {
  return `${job}#k#${createHash('sha256').update(key).digest('hex').slice(0, 32)}`;
}

/** What the handler needs of a key store: the DynamoDB one below, or a test's. */
export interface IdempotencyStore {
  /** Claim `key` for a request: undefined when this call claimed it, else what is remembered (with the stream it was for). `shed`: what its attempt shed (a keyless request's claim, made after the attempt). */
  claim(key: string, fingerprint: string, stream: string, now: number, shed?: readonly ShedEvent[]): Promise<(Remembered & { stream: string }) | undefined>;
  /** Before the attempt that claimed `key` at `startedAt` sends: the events load shedding drops from it, so that a resend drops the same ones. */
  recordShed(key: string, fingerprint: string, startedAt: number, shed: readonly ShedEvent[]): Promise<void>;
  /** The request's final answer, after its events were enqueued. */
  complete(key: string, fingerprint: string, answer: RememberedAnswer): Promise<void>;
  /** Forget a claim made at `startedAt` whose attempt enqueued nothing (only that claim: a later one stays). */
  release(key: string, fingerprint: string, startedAt: number): Promise<void>;
}

export interface DynamoDbIdempotencyStoreOptions {
  readonly client: DynamoDBClient;
  readonly tableName: string;
  readonly job: string;
  readonly accounting?: AwsAccounting;
  /** How long a key is held (default 24 h). */
  readonly retentionMs?: number;
}

export class DynamoDbIdempotencyStore implements IdempotencyStore {
  private readonly db: DynamoDbTable;
  private readonly retentionMs: number;

  constructor(private readonly options: DynamoDbIdempotencyStoreOptions) {
    this.db = new DynamoDbTable(options.client, options.tableName, options.accounting ?? new AwsAccounting());
    this.retentionMs = options.retentionMs ?? DEFAULT_RETENTION_MS;
  }

  async claim(key: string, fingerprint: string, stream: string, now: number, shed?: readonly ShedEvent[]): Promise<(Remembered & { stream: string }) | undefined> {
    const pk = keyPk(this.options.job, key);
    const item = { pk, sk: KEY_SK, key, fp: fingerprint, stream, state: 'pending', started: now, expires: Math.ceil((now + this.retentionMs) / 1000), ...(shed?.length ? { shed: JSON.stringify(shed) } : {}) };
    try {
      await this.db.send(
        'PutItem',
        'write',
        new PutCommand({
          TableName: this.db.name,
          Item: item,
          // TTL deletes lag: an item past its expiry counts as gone.
          ConditionExpression: 'attribute_not_exists(#pk) OR #exp <= :now',
          ExpressionAttributeNames: { '#pk': 'pk', '#exp': 'expires' },
          ExpressionAttributeValues: { ':now': Math.floor(now / 1000) },
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
          ReturnConsumedCapacity: 'TOTAL',
        }),
        1,
        kb(itemBytes(item)),
      );
      return undefined;
    } catch (e) {
      if (!conditionFailed(e)) throw mapDynamoDbError(e, { operation: 'PutItem', table: this.db.name, write: true });
      // ReturnValuesOnConditionCheckFailure gives the item in the low-level shape, not the DocumentClient's.
      const returned = (e as { Item?: Record<string, AttributeValue> }).Item;
      const old = (returned ? (unmarshall(returned) as Item) : undefined) ?? (await this.db.get(pk, KEY_SK));
      // Gone between the two calls (expired and deleted): claim again.
      if (!old) return this.claim(key, fingerprint, stream, now, shed);
      return rememberedOf(old);
    }
  }

  async complete(key: string, fingerprint: string, answer: RememberedAnswer): Promise<void> {
    let text = JSON.stringify(answer);
    if (text.length > MAX_ANSWER_BYTES) {
      const { rejected, ...rest } = answer.body;
      const count = Array.isArray(rejected) ? rejected.length : 0;
      text = JSON.stringify({ ...answer, body: { ...rest, rejectedCount: count, note: `the list of ${count} rejected events was too long to remember; the first answer had it` } });
    }
    // Only this request's claim (another body may have claimed an expired key since).
    await this.updateClaim(key, { state: 'done', answer: text }, { fingerprint });
  }

  async recordShed(key: string, fingerprint: string, startedAt: number, shed: readonly ShedEvent[]): Promise<void> {
    // Not this attempt's claim any more: sending now could differ from what a resend sends.
    if (!(await this.updateClaim(key, { shed: JSON.stringify(shed) }, { fingerprint, startedAt }))) throw new ShedNotRecordedError(key);
  }

  /** SET `values` on the key's item if it is the claim of `fingerprint` (and, with `startedAt`, still the pending one made then); false if not. */
  private async updateClaim(key: string, values: Readonly<Record<string, string>>, claim: { fingerprint: string; startedAt?: number }): Promise<boolean> {
    const names: Record<string, string> = { '#fp': 'fp' };
    const vals: Record<string, unknown> = { ':fp': claim.fingerprint };
    const sets = Object.entries(values).map(([k, v]) => ((names[`#${k}`] = k), (vals[`:${k}`] = v), `#${k} = :${k}`));
    let condition = '#fp = :fp';
    if (claim.startedAt !== undefined) {
      Object.assign(names, { '#state': 'state', '#started': 'started' });
      Object.assign(vals, { ':pending': 'pending', ':started': claim.startedAt });
      condition += ' AND #state = :pending AND #started = :started';
    }
    try {
      await this.db.send(
        'UpdateItem',
        'write',
        new UpdateCommand({
          TableName: this.db.name,
          Key: { pk: keyPk(this.options.job, key), sk: KEY_SK },
          UpdateExpression: `SET ${sets.join(', ')}`,
          ConditionExpression: condition,
          ExpressionAttributeNames: names,
          ExpressionAttributeValues: vals,
          ReturnConsumedCapacity: 'TOTAL',
        }),
        1,
        kb(Object.values(values).reduce((n, v) => n + v.length, 200)),
      );
      return true;
    } catch (e) {
      if (!conditionFailed(e)) throw mapDynamoDbError(e, { operation: 'UpdateItem', table: this.db.name, write: true });
      return false;
    }
  }

  async release(key: string, fingerprint: string, startedAt: number): Promise<void> {
    try {
      await this.db.send(
        'DeleteItem',
        'write',
        new DeleteCommand({
          TableName: this.db.name,
          Key: { pk: keyPk(this.options.job, key), sk: KEY_SK },
          ConditionExpression: '#fp = :fp AND #state = :pending AND #started = :started',
          ExpressionAttributeNames: { '#fp': 'fp', '#state': 'state', '#started': 'started' },
          ExpressionAttributeValues: { ':fp': fingerprint, ':pending': 'pending', ':started': startedAt },
          ReturnConsumedCapacity: 'TOTAL',
        }),
        1,
        1,
      );
    } catch (e) {
      if (!conditionFailed(e)) throw mapDynamoDbError(e, { operation: 'DeleteItem', table: this.db.name, write: true });
    }
  }
}

/** The write's condition did not hold: the key is someone else's (claim) or no longer this request's (complete, release). */
function conditionFailed(e: unknown): boolean {
  return (e as { name?: string }).name === 'ConditionalCheckFailedException';
}

function rememberedOf(item: Item): Remembered & { stream: string } {
  const base = { fingerprint: String(item.fp), stream: String(item.stream), startedAt: Number(item.started), expiresAt: Number(item.expires) * 1000 };
  if (item.state === 'done' && typeof item.answer === 'string') return { ...base, state: 'done', answer: JSON.parse(item.answer) as RememberedAnswer };
  return { ...base, state: 'pending', ...(typeof item.shed === 'string' ? { shed: JSON.parse(item.shed) as ShedEvent[] } : {}) };
}
