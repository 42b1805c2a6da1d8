/**
 * The state log (dynamodb-state-log.ts) as stored in the DynamoDB state table
 * (dynamodb-state.ts): reading a partition's log, and compacting it into the field and
 * timer items.
 *
 * After `compactAfterCommits` commits or `compactAfterBytes` of log, compaction writes
 * the net change into the field and timer items (transactions that check the version
 * item still holds this process's version, so a stale process never overwrites a newer
 * owner), sets `cmp`, deletes the log. Until then the changes are visible to readers of
 * the same partition (recover, or a first prefetch loads the log); other partitions of
 * the stage see them after compaction, which moving key groups (rescaling) must do first.
 */
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import type { PartitionScope, StateWrite, TimerEntry } from '../../state/backend.ts';
import { scopeId, timerId } from '../../state/backend.ts';
import { deleteOp, groupOps, type Op, putOp, stateOp, txOp } from './dynamodb-commit-ops.ts';
import * as L from './dynamodb-layout.ts';
import { type LogDelta, PartitionLog } from './dynamodb-state-log.ts';
import { type DynamoDbTable, kb, pool } from './dynamodb-table.ts';

/**
 * The partition's state log as stored: entries above the version item's `cmp`, in
 * version order. recover() passes what it read (`stored`); without it (a reader that did
 * not recover the partition: a fresh process, a test) it is read here.
 * `loadObject` reads an entry stored as an object (the backend writes them inline; its reader accepts both).
 */
export async function loadPartitionLog(
  db: DynamoDbTable,
  scope: PartitionScope,
  loadObject: (key: string) => Promise<Uint8Array>,
  stored?: { head?: Record<string, unknown>; logItems: Record<string, unknown>[]; baseTimers: readonly TimerEntry[] },
): Promise<PartitionLog> {
  const ctrl = L.controlPk(scope);
  let head = stored?.head;
  let logItems = stored?.logItems;
  if (!logItems) {
    head = await db.get(ctrl, L.VERSION_SK);
    logItems = await db.query('#pk = :pk AND begins_with(#sk, :p)', { ':pk': ctrl, ':p': L.STATE_LOG_PREFIX });
  }
  let baseTimers = stored?.baseTimers;
  if (!baseTimers) {
    baseTimers = [];
    if (logItems.length) {
      const items = await db.query('#pk = :pk AND begins_with(#sk, :p)', { ':pk': ctrl, ':p': L.TIMER_PREFIX });
      baseTimers = items.map((it) => L.decodeValue(String(it.v)) as TimerEntry);
    }
  }
  const compactedThrough = head?.cmp === undefined ? 0 : Number(head.cmp);
  const byVersion = new Map<number, Record<string, unknown>[]>();
  for (const it of logItems) {
    const v = L.versionOfStateLogSk(String(it.sk));
    // At or below cmp: already compacted, a leftover of an interrupted cleanup.
    if (v <= compactedThrough) continue;
    const list = byVersion.get(v);
    if (list) list.push(it);
    else byVersion.set(v, [it]);
  }
  const log = new PartitionLog(compactedThrough, new Set(baseTimers.map(timerId)));
  for (const [v, list] of [...byVersion].sort((a, b) => a[0] - b[0])) {
    const text = await L.loadOutbox(list, loadObject);
    log.apply(v, L.decodeValue(text) as LogDelta, text.length, list.map((it) => String(it.sk)));
  }
  return log;
}

export interface CompactionOptions {
  readonly readConcurrency: number;
  readonly writeConcurrency: number;
}

/**
 * Write `log`'s changes into their own items, then mark the log compacted through
 * `version` and delete it. Each transaction checks that the version item still says
 * `version` (no other writer took the partition over), so a stale process can never
 * write old values over a newer owner's. False on failure: the log stays in place (it
 * stays the truth for recover). `listed` learns which field items were (or may have
 * been) written.
 */
export async function compactPartitionLog(
  db: DynamoDbTable,
  options: CompactionOptions,
  scope: PartitionScope,
  log: PartitionLog,
  version: number,
  listed: (writes: readonly StateWrite[], landed: boolean) => void,
): Promise<boolean> {
  const ctrl = L.controlPk(scope);
  const { writes, timerAdds, timerDeletes } = log.compaction();
  const names = { '#ver': 'ver', '#pend': 'pend' };
  const check = { ConditionCheck: { TableName: db.name, Key: { pk: ctrl, sk: L.VERSION_SK }, ConditionExpression: '#ver = :v AND attribute_not_exists(#pend)', ExpressionAttributeNames: names, ExpressionAttributeValues: { ':v': version } } };
  try {
    const ops: Op[] = [...(await withoutMissingDeletes(db, options.readConcurrency, scope, writes)).map((w) => stateOp(scope, w)), ...timerDeletes.map((t) => ({ ...deleteOp(ctrl, L.timerSk(t)), kind: 'timer' as const })), ...timerAdds.map((t) => ({ ...putOp({ pk: ctrl, sk: L.timerSk(t), v: L.encodeValue(t) }, `(timer of ${scopeId(scope)})`, t.key), kind: 'timer' as const }))];
    const groups = groupOps(ops);
    await pool(groups, options.writeConcurrency, async (g) => {
      for (const o of g) db.accounting.record(L.ITEM_KINDS_SERVICE, `compaction ${o.kind ?? 'other'} ${o.item ? 'put' : 'delete'}`, { items: 1, estimatedWriteUnits: 2 * kb(o.bytes) });
      await db.transact([check, ...g.map((o) => txOp(db.name, o))]);
    });
    await db.send('UpdateItem', 'write', new UpdateCommand({ TableName: db.name, Key: { pk: ctrl, sk: L.VERSION_SK }, UpdateExpression: 'SET #cmp = :v', ConditionExpression: '#ver = :v AND attribute_not_exists(#pend)', ExpressionAttributeNames: { ...names, '#cmp': 'cmp' }, ExpressionAttributeValues: { ':v': version }, ReturnConsumedCapacity: 'TOTAL' }), 1, 1);
  } catch {
    listed(writes, false);
    return false;
  }
  listed(writes, true);
  const sortKeys = [...log.sortKeys];
  log.compacted(version);
  // Best effort: entries at or below cmp are ignored by recover().
  await db.batchWrite(sortKeys.map((sk) => ({ DeleteRequest: { Key: { pk: ctrl, sk } } }))).catch(() => undefined);
  return true;
}

/**
 * Deletes of field items that do not exist cost 2 write units each in a transaction.
 * The log knows which fields the base holds only for entities read since the last
 * compaction (not after a cold start), so ask DynamoDB for the others: one Query of
 * sort keys per key group, far cheaper than a window's worth of pointless deletes.
 */
async function withoutMissingDeletes(db: DynamoDbTable, readConcurrency: number, scope: PartitionScope, writes: readonly StateWrite[]): Promise<StateWrite[]> {
  const kgs = [...new Set(writes.filter((w) => w.value === undefined).map((w) => w.kg))];
  if (!kgs.length) return [...writes];
  const existing = new Set<string>();
  await pool(kgs, readConcurrency, async (kg) => {
    const pk = L.statePk(scope, kg);
    for (const it of await db.query('#pk = :pk', { ':pk': pk }, 'sk')) existing.add(`${kg}\u0000${String(it.sk)}`);
  });
  return writes.filter((w) => w.value !== undefined || existing.has(`${w.kg}\u0000${L.stateSortKey(w.entity, w.field).sk}`));
}
