/**
 * One partition of the DynamoDB state table rolled back in place to a snapshot
 * (restore.ts runs this for every partition of the job). The partition keeps its items'
 * keys, so a deployed job's one table serves the restored timeline:
 *
 *   1. fence: the version item is replaced, on the condition that it still holds the
 *      version read (`ver = V`), by version V+1 with the restore mark `rst` and the old
 *      progress. From here every writer of the abandoned timeline fails its commit's
 *      version fence (it expects V or lower), and recover() refuses the partition
 *      (RestoreInProgressError, retryable) until step 4;
 *   2. delete every control item but the version item and the input log (`i#`: the
 *      records consumed after the checkpoint are replayed from it): timers, state log,
 *      outbox, tracked keys, redo log; the partition's record-attempt counts; and every
 *      state item of the partition's key groups;
 *   3. write the snapshot's fields and timers as their own items (no state log);
 *   4. the version item at V+2 (condition `ver = V+1`): the installed progress, one
 *      tracked interval after the restored epoch, no mark. This write is the commit point.
 *
 * Every step is idempotent, so a restore that dies midway is run again from the start: a
 * partition still marked keeps its old progress in the version item, which is what the
 * restore reads back. Steps 2 and 3 use BatchWriteItem (not atomic, 25 items a request):
 * nothing reads the partition while it is marked.
 */
import { PutCommand } from '@aws-sdk/lib-dynamodb';
import { SluiceError } from '../../errors.ts';
import type { PartitionProgress, PartitionScope, TimerEntry } from '../../state/backend.ts';
import { scopeId } from '../../state/backend.ts';
import { stateOp } from '../dynamodb/dynamodb-commit-ops.ts';
import * as L from '../dynamodb/dynamodb-layout.ts';
import { type DynamoDbTable, type Item, kb } from '../dynamodb/dynamodb-table.ts';
import { INTERVALS_ATTR } from '../dynamodb/dynamodb-tracking.ts';
import { mapDynamoDbError } from '../errors.ts';
import { INPUT_LOG_PREFIX } from '../operator/input-log.ts';

/** The version item's restore mark: the restore epoch of a rollback in progress. */
export const RESTORING_ATTR = 'rst';

/** recover() found a partition that a restore is rolling back (or that a restore died in). */
export class RestoreInProgressError extends SluiceError {
  readonly code = 'RESTORE_IN_PROGRESS';
  readonly retryable = true;
  constructor(
    readonly partition: string,
    readonly restoreEpoch: number,
  ) {
    super(`partition ${partition}: an in-place restore (restore epoch ${restoreEpoch}) is rolling it back; expected its consumers to be stopped until the restore finishes (run the restore again if it died)`);
  }
}

/** The version item changed under the restore: something still commits to the partition. */
export class RestoreFencedError extends SluiceError {
  readonly code = 'RESTORE_FENCED';
  readonly retryable = false;
  constructor(
    readonly partition: string,
    readonly expectedVersion: number,
  ) {
    super(`partition ${partition}: expected version ${expectedVersion} while restoring it, found another; stop the job's stage consumers (and wait for running invocations) before an in-place restore`);
  }
}

/** What the version item holds now. */
export interface PartitionHead {
  readonly version: number;
  /** The committed progress (a marked partition: the progress before the restore began). */
  readonly progress?: PartitionProgress;
  /** The restore epoch of a rollback that began and did not finish. */
  readonly restoring?: number;
}

export async function readHead(db: DynamoDbTable, scope: PartitionScope): Promise<PartitionHead> {
  const item = await db.get(L.controlPk(scope), L.VERSION_SK);
  if (!item) return { version: 0 };
  return {
    version: Number(item.ver),
    progress: L.decodeValue(String(item.prog)) as PartitionProgress,
    ...(item[RESTORING_ATTR] !== undefined ? { restoring: Number(item[RESTORING_ATTR]) } : {}),
  };
}

/** What a partition is rolled back to. */
export interface PartitionInstall {
  readonly scope: PartitionScope;
  /** The key groups the partition owns (their state items are replaced). */
  readonly keyGroups: readonly number[];
  readonly progress: PartitionProgress;
  readonly timers: readonly TimerEntry[];
  readonly entities: readonly { readonly kg: number; readonly entity: string; readonly fields: ReadonlyMap<string, unknown> }[];
  /** The restored checkpoint's epoch: changed keys are tracked after it (the next checkpoint's delta base). */
  readonly epoch: number;
  /** The restore's own epoch number (the mark). */
  readonly restoreEpoch: number;
}

/** Roll the partition back (steps 1-4 above); returns the installed version. */
export async function rollBackPartition(db: DynamoDbTable, head: PartitionHead, install: PartitionInstall): Promise<number> {
  const { scope } = install;
  const pk = L.controlPk(scope);
  const id = scopeId(scope);
  const marked = head.version + 1;
  const oldProgress = L.encodeValue(head.progress ?? install.progress);
  await putHead(db, id, head.version, { pk, sk: L.VERSION_SK, ver: marked, prog: oldProgress, [RESTORING_ATTR]: install.restoreEpoch });

  const control = await db.query('#pk = :pk', { ':pk': pk }, 'sk');
  const doomed: Item[] = control.map((it) => String(it.sk)).filter((sk) => sk !== L.VERSION_SK && !sk.startsWith(INPUT_LOG_PREFIX)).map((sk) => ({ DeleteRequest: { Key: { pk, sk } } }));
  doomed.push({ DeleteRequest: { Key: { pk: `${scope.job}#f#${scope.stage}#${scope.partition}`, sk: 'a' } } });
  for (const kg of install.keyGroups) {
    const statePk = L.statePk(scope, kg);
    for (const it of await db.query('#pk = :pk', { ':pk': statePk }, 'sk')) doomed.push({ DeleteRequest: { Key: { pk: statePk, sk: it.sk } } });
  }
  await db.batchWrite(doomed);

  const puts: Item[] = [];
  for (const { kg, entity, fields } of install.entities) for (const [field, value] of fields) puts.push({ PutRequest: { Item: stateOp(scope, { kg, entity, field, value }).item! } });
  for (const t of install.timers) puts.push({ PutRequest: { Item: { pk, sk: L.timerSk(t), v: L.encodeValue(t) } } });
  await db.batchWrite(puts);

  const installed = marked + 1;
  await putHead(db, id, marked, { pk, sk: L.VERSION_SK, ver: installed, prog: L.encodeValue(install.progress), [INTERVALS_ATTR]: JSON.stringify([install.epoch]) });
  return installed;
}

/** Replace the version item when it still holds `expected` (0: none). */
async function putHead(db: DynamoDbTable, id: string, expected: number, item: Item): Promise<void> {
  const condition: { ConditionExpression: string; ExpressionAttributeNames: Record<string, string>; ExpressionAttributeValues?: Record<string, number> } =
    expected === 0
      ? { ConditionExpression: 'attribute_not_exists(#pk)', ExpressionAttributeNames: { '#pk': 'pk' } }
      : { ConditionExpression: '#ver = :e', ExpressionAttributeNames: { '#ver': 'ver' }, ExpressionAttributeValues: { ':e': expected } };
  try {
    await db.send('PutItem', 'write', new PutCommand({ TableName: db.name, Item: item, ...condition, ReturnConsumedCapacity: 'TOTAL' }), 1, kb(L.itemBytes(item)));
  } catch (e) {
    if ((e as { name?: string }).name === 'ConditionalCheckFailedException') throw new RestoreFencedError(id, expected);
    throw mapDynamoDbError(e, { operation: 'PutItem', table: db.name, write: true });
  }
}
