/**
 * The item operations of a DynamoDB state commit (dynamodb-state.ts): a batch planned as
 * distinct Puts and Deletes, size-checked before anything is written, grouped into
 * transactions, and the version fence a commit's first write checks.
 */
import type { CommitBatch, PartitionScope, StateWrite } from '../../state/backend.ts';
import { scopeId } from '../../state/backend.ts';
import { CommitConflictError, type SluiceError } from '../../errors.ts';
import * as L from './dynamodb-layout.ts';
import { deltaOf, type LogDelta } from './dynamodb-state-log.ts';
import { mapDynamoDbError, StateEncodingError, StateItemTooLargeError } from '../errors.ts';

export type Attrs = Record<string, string | number>;
/** One item operation of a commit: a Put (item) or a Delete. */
export interface Op {
  readonly pk: string;
  readonly sk: string;
  readonly item?: Attrs;
  readonly bytes: number;
  /** What the item holds, for the cost breakdown (accounting service 'dynamodb-items'). */
  readonly kind?: L.ItemKind;
}

/** A planned commit: its operations, the outbox object to store first (if any), the state log entry (if logged). */
export interface CommitPlan {
  readonly ops: Op[];
  readonly blob?: { key: string; body: Uint8Array };
  readonly delta?: { value: LogDelta; bytes: number };
}

/**
 * The batch as distinct item operations (last write wins, timer adds after deletes, as in memory). Validates sizes first.
 * `logged`: state and timer changes go into one state log entry instead of their own items.
 */
export function planCommit(batch: CommitBatch, next: number, logged: boolean, outbox: { inlineBytes?: number; blobs: boolean }): CommitPlan {
  const ops = new Map<string, Op>();
  const add = (op: Op) => ops.set(`${op.pk}\u0000${op.sk}`, op);
  const ctrl = L.controlPk(batch.scope);
  // Built (and so size-checked) either way: a value too large fails here, before anything is written.
  const stateOps = batch.writes.map((w) => stateOp(batch.scope, w));
  const timerOps: Op[] = [
    ...batch.timerDeletes.map((t) => ({ ...deleteOp(ctrl, L.timerSk(t)), kind: 'timer' as const })),
    ...batch.timerAdds.map((t) => ({ ...putOp({ pk: ctrl, sk: L.timerSk(t), v: L.encodeValue(t) }, `(timer of ${scopeId(batch.scope)})`, t.key), kind: 'timer' as const })),
  ];
  let delta: { value: LogDelta; bytes: number } | undefined;
  const value = logged ? deltaOf(batch.writes, batch.timerAdds, batch.timerDeletes) : undefined;
  if (value) {
    const text = L.encodeValue(value);
    delta = { value, bytes: text.length };
    const stored = L.storeOutbox(text, batch.scope, next, { blobs: false });
    if (stored.kind !== 'b') stored.chunks.forEach((chunk, i) => add(putOp({ pk: ctrl, sk: L.stateLogSk(next, i), [stored.kind]: chunk }, '(state log)', String(i), 'log')));
  } else {
    for (const o of stateOps) add(o);
    for (const o of timerOps) add(o);
  }
  let blob: { key: string; body: Uint8Array } | undefined;
  if (batch.outbox.length) {
    const stored = L.storeOutbox(L.encodeValue(batch.outbox), batch.scope, next, { inlineBytes: outbox.inlineBytes, blobs: outbox.blobs });
    if (stored.kind === 'b') {
      blob = { key: stored.key, body: stored.body };
      add({ ...putOp({ pk: ctrl, sk: L.outboxSk(next, 0), b: stored.key }, '(outbox)', '0'), kind: 'outbox' });
    } else stored.chunks.forEach((chunk, i) => add({ ...putOp({ pk: ctrl, sk: L.outboxSk(next, i), [stored.kind]: chunk }, '(outbox)', String(i)), kind: 'outbox' }));
  }
  return { ops: [...ops.values()], blob, delta };
}

/** A failed commit write as an error: the fence failing is a CommitConflictError naming the stored version. */
export function commitError(e: unknown, batch: CommitBatch, operation: string, table: string): SluiceError {
  // The version item is always first in the transaction, so reason 0 is the fence.
  const single = (e as { name?: string }).name === 'ConditionalCheckFailedException';
  if (single || cancelCode(e, 0) === 'ConditionalCheckFailed') {
    const old = single ? (e as { Item?: Record<string, unknown> }).Item : (e as { CancellationReasons?: { Item?: Record<string, unknown> }[] }).CancellationReasons?.[0]?.Item;
    const stored = old ? attrNumber(old.ver) : 0;
    const pending = old?.pend !== undefined ? ', a logged batch is still being applied' : '';
    return new CommitConflictError(scopeId(batch.scope), batch.expectedVersion, `stored version is ${stored}${pending}`);
  }
  return mapDynamoDbError(e, { operation, table, write: true });
}

/** The operation as an item of TransactWriteItems. */
export function txOp(table: string, o: Op): Record<string, unknown> {
  return o.item ? { Put: { TableName: table, Item: o.item } } : { Delete: { TableName: table, Key: { pk: o.pk, sk: o.sk } } };
}

export function stateOp(scope: PartitionScope, w: StateWrite): Op {
  const pk = L.statePk(scope, w.kg);
  const { sk, entityAttr, fieldAttr } = L.stateSortKey(w.entity, w.field);
  if (w.value === undefined) return { ...deleteOp(pk, sk), kind: 'state' };
  let v: string;
  try {
    v = L.encodeValue(w.value);
  } catch (e) {
    throw new StateEncodingError(w.entity, w.field, e);
  }
  const item: Attrs = { pk, sk, v };
  if (entityAttr !== undefined) item.e = entityAttr;
  if (fieldAttr !== undefined) item.f = fieldAttr;
  return { ...putOp(item, w.entity, w.field), kind: 'state' };
}

export function putOp(item: Attrs, entity: string, field: string, kind?: L.ItemKind): Op {
  const bytes = L.itemBytes(item);
  if (bytes > L.MAX_ITEM_BYTES) throw new StateItemTooLargeError(entity, field, bytes, L.MAX_ITEM_BYTES);
  return { pk: String(item.pk), sk: String(item.sk), item, bytes, kind };
}

/** Operations in transaction-sized groups (leaving room for one condition check). */
export function groupOps(ops: readonly Op[]): Op[][] {
  const groups: Op[][] = [];
  let cur: Op[] = [];
  let bytes = 0;
  for (const op of ops) {
    if (cur.length === L.MAX_TX_ITEMS - 1 || bytes + op.bytes > L.MAX_TX_BYTES) {
      groups.push(cur);
      cur = [];
      bytes = 0;
    }
    cur.push(op);
    bytes += op.bytes;
  }
  if (cur.length) groups.push(cur);
  return groups;
}

export function deleteOp(pk: string, sk: string): Op {
  return { pk, sk, bytes: L.itemBytes({ pk, sk }) };
}

/** The version fence: the stored version is the expected one and no logged batch is half applied. */
export function fence(expected: number): { ConditionExpression: string; ExpressionAttributeNames: Record<string, string>; ExpressionAttributeValues?: Record<string, number> } {
  if (expected === 0) return { ConditionExpression: 'attribute_not_exists(#pk)', ExpressionAttributeNames: { '#pk': 'pk' } };
  return { ConditionExpression: '#ver = :e AND attribute_not_exists(#pend)', ExpressionAttributeNames: { '#ver': 'ver', '#pend': 'pend' }, ExpressionAttributeValues: { ':e': expected } };
}

/** Why item `index` of a cancelled transaction failed (DynamoDB's reason code), if it was cancelled. */
export function cancelCode(e: unknown, index: number): string | undefined {
  const err = e as { name?: string; CancellationReasons?: { Code?: string }[] };
  return err?.name === 'TransactionCanceledException' ? err.CancellationReasons?.[index]?.Code : undefined;
}

/** An attribute as returned raw in errors ({ N: '3' }) or unmarshalled (3). */
function attrNumber(v: unknown): number {
  if (v && typeof v === 'object' && 'N' in v) return Number((v as { N: string }).N);
  return Number(v ?? 0);
}
