/**
 * Commits too large for one transaction (over 100 items or ~3.5 MB) of the DynamoDB
 * state backend (dynamodb-state.ts) go through a redo log, so they stay atomic for every
 * reader that goes through recover() (the partition runtime always does):
 *   1. write the batch's operations as log chunks `x#${uuid}#n` (invisible to readers);
 *   2. flip the version item with the same fence, recording `pend = uuid`: the commit
 *      point; a stale writer fails here and leaves only TTL-collected log items;
 *   3. apply the logged operations in transactions of <= 99 items, each with a
 *      ConditionCheck that `pend` is still this uuid (a zombie cannot re-apply old
 *      writes after the new owner finished), then remove `pend` and the log.
 * A crash after step 2 is finished by the next recover() (finishLogged); normal commits
 * require `pend` absent, so nothing commits on top of a half-applied batch.
 */
import { randomUUID } from 'node:crypto';
import { PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { CommitConflictError, InvariantError } from '../../errors.ts';
import type { CommitBatch, PartitionScope } from '../../state/backend.ts';
import { scopeId } from '../../state/backend.ts';
import { type Attrs, cancelCode, commitError, fence, groupOps, type Op, txOp } from './dynamodb-commit-ops.ts';
import * as L from './dynamodb-layout.ts';
import { type DynamoDbTable, kb, pool } from './dynamodb-table.ts';
import { CommitRollForwardError, mapDynamoDbError } from '../errors.ts';

export interface RedoLogOptions {
  /** Transactions in flight while applying a logged batch. */
  readonly writeConcurrency: number;
  /** Lifetime of redo-log items that nothing cleaned up. */
  readonly logTtlSeconds: number;
}

/** Commit `ops` with the version item `head` through a redo log (steps 1-3 above). */
export async function commitLogged(db: DynamoDbTable, options: RedoLogOptions, batch: CommitBatch, head: Attrs, ops: readonly Op[]): Promise<void> {
  const id = randomUUID();
  const ctrl = String(head.pk);
  const chunks = L.splitText(JSON.stringify(ops.map((o) => (o.item ? { p: o.item } : { d: [o.pk, o.sk] }))));
  const expires = Math.floor(Date.now() / 1000) + options.logTtlSeconds;
  try {
    await db.batchWrite(chunks.map((v, i) => ({ PutRequest: { Item: { pk: ctrl, sk: L.logSk(id, i), v, expires } } })));
  } catch (e) {
    // Nothing is visible before the flip: the commit did not land, whatever the error.
    throw mapDynamoDbError(e, { operation: 'BatchWriteItem', table: db.name, write: false });
  }
  const flip = { ...head, pend: id, pn: chunks.length };
  try {
    await db.send('PutItem', 'write', new PutCommand({ TableName: db.name, Item: flip, ...fence(batch.expectedVersion), ReturnValuesOnConditionCheckFailure: 'ALL_OLD', ReturnConsumedCapacity: 'TOTAL' }), 1, 2 * kb(L.itemBytes(flip)));
  } catch (e) {
    const err = commitError(e, batch, 'PutItem', db.name);
    if (err instanceof CommitConflictError) void deleteLog(db, ctrl, id, chunks.length).catch(() => undefined);
    throw err;
  }
  try {
    await rollForward(db, options.writeConcurrency, ctrl, id, ops, chunks.length);
  } catch (e) {
    throw new CommitRollForwardError(scopeId(batch.scope), Number(head.ver), e);
  }
}

/** Apply a flipped batch's operations; idempotent, and harmless when another process finishes it first. */
async function rollForward(db: DynamoDbTable, writeConcurrency: number, ctrl: string, id: string, ops: readonly Op[], logChunks: number): Promise<void> {
  const groups = groupOps(ops);
  const check = { ConditionCheck: { TableName: db.name, Key: { pk: ctrl, sk: L.VERSION_SK }, ConditionExpression: '#pend = :id', ExpressionAttributeNames: { '#pend': 'pend' }, ExpressionAttributeValues: { ':id': id } } };
  let done = false;
  await pool(groups, writeConcurrency, async (g) => {
    if (done) return;
    try {
      await db.transact([check, ...g.map((o) => txOp(db.name, o))]);
    } catch (e) {
      // `pend` moved: whoever cleared it applied everything first.
      if (cancelCode(e, 0) === 'ConditionalCheckFailed') done = true;
      else throw mapDynamoDbError(e, { operation: 'TransactWriteItems', table: db.name, write: true });
    }
  });
  if (!done) {
    try {
      await db.send('UpdateItem', 'write', new UpdateCommand({ TableName: db.name, Key: { pk: ctrl, sk: L.VERSION_SK }, UpdateExpression: 'REMOVE #pend, #pn', ConditionExpression: '#pend = :id', ExpressionAttributeNames: { '#pend': 'pend', '#pn': 'pn' }, ExpressionAttributeValues: { ':id': id }, ReturnConsumedCapacity: 'TOTAL' }), 1, 1);
    } catch (e) {
      if ((e as { name?: string }).name !== 'ConditionalCheckFailedException') throw mapDynamoDbError(e, { operation: 'UpdateItem', table: db.name, write: true });
    }
  }
  // Best effort: TTL removes what this misses.
  await deleteLog(db, ctrl, id, logChunks).catch(() => undefined);
}

/** recover(): a batch flipped but not fully applied (the writer crashed): apply it from its log. */
export async function finishLogged(db: DynamoDbTable, writeConcurrency: number, scope: PartitionScope, id: string, count: number): Promise<void> {
  const ctrl = L.controlPk(scope);
  const items = await db.query('#pk = :pk AND begins_with(#sk, :p)', { ':pk': ctrl, ':p': `${L.LOG_PREFIX}${id}#` });
  if (items.length !== count) {
    throw new InvariantError(`redo log ${id} of ${scopeId(scope)} has ${items.length} of ${count} chunks (expired by TTL?): the committed batch cannot be applied`);
  }
  const logged = JSON.parse(items.map((it) => String(it.v)).join('')) as ({ p: Attrs } | { d: [string, string] })[];
  const ops = logged.map((o) => ('p' in o ? { pk: String(o.p.pk), sk: String(o.p.sk), item: o.p, bytes: L.itemBytes(o.p) } : { pk: o.d[0], sk: o.d[1], bytes: 0 }));
  await rollForward(db, writeConcurrency, ctrl, id, ops, count);
}

async function deleteLog(db: DynamoDbTable, ctrl: string, id: string, count: number): Promise<void> {
  await db.batchWrite(Array.from({ length: count }, (_, i) => ({ DeleteRequest: { Key: { pk: ctrl, sk: L.logSk(id, i) } } })));
}
