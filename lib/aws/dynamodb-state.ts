/**
 * The DynamoDB state backend: the same commit semantics as InMemoryStateBackend
 * (version-fenced, all-or-nothing, outbox kept until delivered), on one table per job.
 *
 * Key layout (pk, sk are strings; every value is JSON text with tags, see dynamodb-layout.ts):
 *
 *   state   pk `${job}#s#${stage}#${kg}`          sk entityKey(entity) + U+0001 + field    v, [e], [f]
 *   version pk `${job}#p#${stage}#${partition}`    sk `#`                                   ver, prog, [cmp], [pend, pn]
 *   log     (same pk)                              sk `l#${version:16}#${chunk:4}`           v | z (gzip, base64)
 *   timer   (same pk)                              sk `t#${timerId}`                         v
 *   outbox  (same pk)                              sk `o#${version:16}#${chunk:4}`           v | z | b (S3 key)
 *   redo    (same pk)                              sk `x#${commitId}#${chunk:4}`             v, expires (TTL)
 *   tracked (same pk)                              sk `k#${after}#${version}#${chunk}`       v   (changed keys, dynamodb-tracking.ts)
 *
 * State log (default; dynamodb-state-log.ts): a commit writes its state and timer
 * changes as one log item, not as field and timer items, because every item of a
 * transaction is billed 2 write units per started KB and a keyed window touches hundreds
 * of small ones per commit. recover() reads the log entries above the version item's
 * `cmp` and keeps their net change; prefetch() applies it to the field items it reads,
 * and recover()'s timers include it. After `compactAfterCommits` commits or
 * `compactAfterBytes` of log, compact() writes the net change into the field and timer
 * items (transactions that check the version item still holds this process's version,
 * so a stale process never overwrites a newer owner), sets `cmp`, deletes the log.
 * Until then the changes are visible to readers of the same partition (recover, or a
 * first prefetch loads the log); other partitions of the stage see them after
 * compact(), which moving key groups (rescaling) must call first.
 * Outbox: inline up to 4 KB, else gzip, else one immutable S3 object (storeOutbox).
 *
 * State lives per (stage, key group), so one Query reads a key group and rescaling only
 * moves routing. One item per field (map entries too), so large map states are not
 * bound by the 400 KB item limit. entityKey() escapes U+0001/U+0002 so that
 * begins_with(entityKey(E) + U+0001) matches E's fields and never those of an entity
 * that merely starts with E; very long entities or fields are hashed (full name in e/f).
 * Control items sit under one pk per partition: `#` sorts before `o#` and `t#`, and
 * recover() reads it first, so a writer that moves the version later fails our fence.
 *
 * Commit: one TransactWriteItems holding the version item (condition: `ver = expected`
 * and no pending redo, or attribute_not_exists for version 0; ALL_OLD on failure, so
 * the conflict names the stored version), the state Puts/Deletes, timer Puts/Deletes
 * and the outbox chunks, with a ClientRequestToken so the SDK's own retries are idempotent.
 *
 * Batches over 100 items or ~3.5 MB use a redo log, so they stay atomic for every
 * reader that goes through recover() (the partition runtime always does):
 *   1. write the batch's operations as log chunks `x#${uuid}#n` (invisible to readers);
 *   2. flip the version item with the same fence, recording `pend = uuid`: the commit
 *      point; a stale writer fails here and leaves only TTL-collected log items;
 *   3. apply the logged operations in transactions of <= 99 items, each with a
 *      ConditionCheck that `pend` is still this uuid (a zombie cannot re-apply old
 *      writes after the new owner finished), then remove `pend` and the log.
 * A crash after step 2 is finished by the next recover(); normal commits require
 * `pend` absent, so nothing commits on top of a half-applied batch.
 * A single value over 400 KB is rejected (StateItemTooLargeError) before anything is written.
 */
import { randomUUID } from 'node:crypto';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { CommitConflictError, InvariantError, type SluiceError } from '../errors.ts';
import type { BlobStore } from '../checkpoint/storage.ts';
import type { CommitBatch, PartitionScope, RecoveredPartition, StateBackend, StateWrite, TimerEntry, TrackedInterval } from '../state/backend.ts';
import type { InstalledPartition } from '../state/memory.ts';
import { emptyProgress, scopeId, timerId } from '../state/backend.ts';
import type { OutboxEntry } from '../transport/envelope.ts';
import { AwsAccounting } from './accounting.ts';
import * as L from './dynamodb-layout.ts';
import { deltaOf, type LogDelta, PartitionLog } from './dynamodb-state-log.ts';
import { DynamoDbTable, kb, pool } from './dynamodb-table.ts';
import { entityOfStateItem, INTERVALS_ATTR, PartitionTracking, TRACK_PREFIX } from './dynamodb-tracking.ts';
import { CommitRollForwardError, mapDynamoDbError, StateEncodingError, StateItemTooLargeError, StateNotPrefetchedError } from './errors.ts';

export { createStateTable } from './dynamodb-table.ts';

type Attrs = Record<string, string | number>;
/** One item operation of a commit: a Put (item) or a Delete. */
interface Op {
  readonly pk: string;
  readonly sk: string;
  readonly item?: Attrs;
  readonly bytes: number;
  /** What the item holds, for the cost breakdown (accounting service 'dynamodb-items'). */
  readonly kind?: L.ItemKind;
}

export interface DynamoDbStateBackendOptions {
  readonly client: DynamoDBClient;
  readonly tableName: string;
  readonly accounting?: AwsAccounting;
  /** Queries in flight during prefetch (default 16). */
  readonly readConcurrency?: number;
  /** Transactions in flight while applying a logged batch (default 4). */
  readonly writeConcurrency?: number;
  /** Entities kept in the read cache between batches (default 10,000). */
  readonly maxCachedEntities?: number;
  /** Lifetime of redo-log items that nothing cleaned up (default 7 days). */
  readonly logTtlSeconds?: number;
  /**
   * Where an outbox too large to keep inline goes (dynamodb-layout.ts storeOutbox); the
   * objects expire by the bucket's lifecycle rule for spills. Without it: gzip, inline.
   */
  readonly blobs?: BlobStore;
  /** Outbox JSON (and then gzip) kept inline up to this size (default 4 KB). */
  readonly outboxInlineBytes?: number;
  /**
   * Write state and timer changes as one log item per commit, compacted into their own
   * items later (dynamodb-state-log.ts). Default true; false writes every field and timer
   * in the commit itself. Either way a table written with the log is read correctly.
   */
  readonly stateLog?: boolean;
  /** Compact a partition's log after this many commits (default 1,000) ... */
  readonly compactAfterCommits?: number;
  /** ... or this many stored bytes of log (default 2 MB), whichever comes first. */
  readonly compactAfterBytes?: number;
}

export class DynamoDbStateBackend implements StateBackend {
  readonly needsPrefetch = true;
  readonly tracksChanges = true;
  readonly accounting: AwsAccounting;
  private readonly db: DynamoDbTable;
  private readonly table: string;
  private readonly readConcurrency: number;
  private readonly writeConcurrency: number;
  private readonly maxCached: number;
  private readonly logTtl: number;
  private readonly blobs?: BlobStore;
  private readonly outboxInlineBytes?: number;
  private readonly stateLog: boolean;
  private readonly compactAfterCommits: number;
  private readonly compactAfterBytes: number;
  /** Per partition (scopeId): the state log since its last compaction, as recover() found it plus our commits. */
  private readonly logs = new Map<string, PartitionLog>();
  /**
   * LRU (Map order) of committed entities: cacheKey -> fields, and the partition that
   * loaded them. Valid while this process is the only writer; the version fence catches
   * the rest, and recover() drops what its partition loaded.
   */
  private readonly cache = new Map<string, { partition: number; fields: Map<string, unknown> }>();
  /** Changed-key tracking per partition (scopeId), loaded by recover(). */
  private readonly tracking = new Map<string, PartitionTracking>();
  /**
   * Per key group (stage prefix + kg): the entity keys that have field items, read once
   * with one Query of sort keys and kept current by this process's own writes. A key
   * not in it has no items, so prefetch needs no Query for it (a window creates keys all
   * the time). `keys` undefined: the key group is too large to list; Query per entity.
   * Same validity as the cache: dropped by recover() and on failed writes.
   */
  private readonly directories = new Map<string, { partition: number; keys?: Set<string> }>();
  /** Commits applied (for tests and metrics), as in the in-memory backend. */
  commits = 0;

  constructor(options: DynamoDbStateBackendOptions) {
    this.table = options.tableName;
    this.accounting = options.accounting ?? new AwsAccounting();
    this.db = new DynamoDbTable(options.client, options.tableName, this.accounting);
    this.readConcurrency = options.readConcurrency ?? 16;
    this.writeConcurrency = options.writeConcurrency ?? 4;
    this.maxCached = options.maxCachedEntities ?? 10_000;
    this.logTtl = options.logTtlSeconds ?? 7 * 24 * 3600;
    this.blobs = options.blobs;
    this.outboxInlineBytes = options.outboxInlineBytes;
    this.stateLog = options.stateLog ?? true;
    this.compactAfterCommits = options.compactAfterCommits ?? 1000;
    this.compactAfterBytes = options.compactAfterBytes ?? 2 * 1024 * 1024;
  }

  // ---- reads -------------------------------------------------------------------------

  async recover(scope: PartitionScope): Promise<RecoveredPartition> {
    this.forgetPartition(scope);
    const ctrl = L.controlPk(scope);
    const head = await this.db.get(ctrl, L.VERSION_SK);
    if (head?.pend !== undefined) await this.finishLogged(scope, String(head.pend), Number(head.pn));
    // One range: tracked keys (k#), state log (l#), outbox (o#), timers (t#).
    const items = await this.db.query('#pk = :pk AND #sk BETWEEN :a AND :b', { ':pk': ctrl, ':a': TRACK_PREFIX, ':b': 't$' });
    const timers: TimerEntry[] = [];
    const outboxItems = new Map<number, typeof items>();
    const tracked: typeof items = [];
    for (const it of items) {
      const sk = String(it.sk);
      if (sk.startsWith(L.TIMER_PREFIX)) timers.push(L.decodeValue(String(it.v)) as TimerEntry);
      else if (sk.startsWith(TRACK_PREFIX)) tracked.push(it);
      else if (sk.startsWith(L.OUTBOX_PREFIX)) {
        const v = L.versionOfOutboxSk(sk);
        const list = outboxItems.get(v);
        if (list) list.push(it);
        else outboxItems.set(v, [it]);
      }
    }
    const outbox: OutboxEntry[] = [];
    for (const list of outboxItems.values()) outbox.push(...(L.decodeValue(await L.loadOutbox(list, (key) => this.outboxObject(key))) as OutboxEntry[]));
    const progress = head ? (L.decodeValue(String(head.prog)) as RecoveredPartition['progress']) : emptyProgress();
    const { tracking, stale } = PartitionTracking.load(head, progress.lastBarrier ?? 0, tracked);
    this.tracking.set(scopeId(scope), tracking);
    if (stale.length) void this.deleteItems(ctrl, stale);
    const log = await this.loadLog(scope, head, items.filter((it) => String(it.sk).startsWith(L.STATE_LOG_PREFIX)), timers);
    log.committedVersion = head ? Number(head.ver) : 0;
    return {
      version: head ? Number(head.ver) : 0,
      progress,
      timers: log.timers(timers),
      outbox,
      // Absent until a checkpointed run tracked something, as in the in-memory backend.
      ...(tracking.view.length ? { tracking: tracking.view.map((t): TrackedInterval => ({ after: t.after, entities: new Map(t.entities) })) } : {}),
    };
  }

  tracked(scope: PartitionScope): readonly TrackedInterval[] {
    const t = this.tracking.get(scopeId(scope));
    if (!t) throw new InvariantError(`tracked(${scopeId(scope)}): recover() the partition on this backend first`);
    return t.view;
  }

  /** Full snapshots: every committed entity of the key groups (one Query each); leaves them in the read cache for peek(). */
  async *entitiesOf(scope: PartitionScope, keyGroups: readonly number[]): AsyncIterable<{ kg: number; entity: string; fields: ReadonlyMap<string, unknown> }> {
    // Field items hold state up to the last compaction; the partition's log holds the rest.
    const log = this.logs.get(scopeId(scope)) ?? (await this.loadLog(scope));
    const logged = new Map<number, string[]>();
    for (const e of log?.overlay.values() ?? []) {
      const list = logged.get(e.kg);
      if (list) list.push(e.entity);
      else logged.set(e.kg, [e.entity]);
    }
    for (const kg of keyGroups) {
      const byEntity = new Map<string, Map<string, unknown>>();
      for (const it of await this.db.query('#pk = :pk AND #sk >= :a', { ':pk': L.statePk(scope, kg), ':a': '\u0000' })) {
        const item = it as { sk: string; e?: string; f?: string; v: string };
        const entity = entityOfStateItem(item);
        let fields = byEntity.get(entity);
        if (!fields) byEntity.set(entity, (fields = new Map()));
        fields.set(L.fieldOfItem(entity, item), L.decodeValue(String(item.v)));
      }
      for (const entity of logged.get(kg) ?? []) if (!byEntity.has(entity)) byEntity.set(entity, new Map());
      for (const [entity, base] of byEntity) {
        const fields = log ? log.merge(kg, entity, base) : base;
        if (fields.size === 0) continue; // deleted since the last compaction
        this.cache.set(cacheKey(scope, kg, entity), { partition: scope.partition, fields });
        yield { kg, entity, fields };
      }
    }
  }

  /**
   * Restore: a partition's state from a checkpoint into a fresh table (version 0 must be
   * free), its key groups' entities, timers and progress, tracking from `epoch` on.
   */
  async install(scope: PartitionScope, part: InstalledPartition, epoch: number): Promise<void> {
    const writes: StateWrite[] = [];
    for (const { kg, entity, fields } of part.entities) for (const [field, value] of fields) writes.push({ kg, entity, field, value });
    this.tracking.set(scopeId(scope), PartitionTracking.installed(epoch));
    await this.commitWith({ scope, expectedVersion: 0, writes, timerAdds: [...part.timers], timerDeletes: [], progress: part.progress, outbox: [] }, JSON.stringify([epoch]));
  }

  /**
   * The partition's state log as stored: entries above the version item's `cmp`, in
   * version order. recover() passes what it read; a reader that did not recover the
   * partition (a fresh process, a test) gets it read here on its first prefetch.
   */
  private async loadLog(scope: PartitionScope, head?: Record<string, unknown>, logItems?: Record<string, unknown>[], baseTimers?: readonly TimerEntry[]): Promise<PartitionLog> {
    const ctrl = L.controlPk(scope);
    if (!logItems) {
      head = await this.db.get(ctrl, L.VERSION_SK);
      logItems = await this.db.query('#pk = :pk AND begins_with(#sk, :p)', { ':pk': ctrl, ':p': L.STATE_LOG_PREFIX });
    }
    if (!baseTimers) {
      baseTimers = [];
      if (logItems.length) {
        const items = await this.db.query('#pk = :pk AND begins_with(#sk, :p)', { ':pk': ctrl, ':p': L.TIMER_PREFIX });
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
      const text = await L.loadOutbox(list, (key) => this.outboxObject(key));
      log.apply(v, L.decodeValue(text) as LogDelta, text.length, list.map((it) => String(it.sk)));
    }
    this.logs.set(scopeId(scope), log);
    return log;
  }

  private async outboxObject(key: string): Promise<Uint8Array> {
    const body = this.blobs ? await this.blobs.get(key) : undefined;
    if (!body) throw new InvariantError(`the committed outbox object ${key} is ${this.blobs ? 'missing from the blob store' : 'in a blob store, and none is configured'}: the outbox cannot be delivered`);
    return body;
  }

  async prefetch(scope: PartitionScope, entities: ReadonlyArray<{ kg: number; entity: string }>): Promise<void> {
    const wanted = new Set<string>();
    const missing: { kg: number; entity: string; key: string }[] = [];
    for (const { kg, entity } of entities) {
      const key = cacheKey(scope, kg, entity);
      if (wanted.has(key)) continue;
      wanted.add(key);
      const hit = this.cache.get(key);
      if (hit) {
        this.cache.delete(key); // move to the LRU's young end
        this.cache.set(key, hit);
      } else missing.push({ kg, entity, key });
    }
    const log = missing.length ? (this.logs.get(scopeId(scope)) ?? (await this.loadLog(scope))) : undefined;
    await pool([...new Set(missing.map((m) => m.kg))], this.readConcurrency, (kg) => this.directory(scope, kg).then(() => undefined));
    await pool(missing, this.readConcurrency, async ({ kg, entity, key }) => {
      const listed = this.directories.get(directoryKey(scope, kg))?.keys;
      const items = listed && !listed.has(L.entityKey(entity).key) ? [] : await this.db.query('#pk = :pk AND begins_with(#sk, :p)', { ':pk': L.statePk(scope, kg), ':p': L.entityPrefix(entity) });
      let fields = new Map<string, unknown>();
      for (const it of items) fields.set(L.fieldOfItem(entity, it as { sk: string; f?: string }), L.decodeValue(String(it.v)));
      // What the log changed since the base items were last compacted.
      if (log) fields = log.merge(kg, entity, fields);
      this.cache.set(key, { partition: scope.partition, fields });
    });
    for (const key of this.cache.keys()) {
      if (this.cache.size <= this.maxCached || wanted.has(key)) break;
      this.cache.delete(key);
    }
  }

  /** Load the key group's directory if not known yet (see `directories`). */
  private async directory(scope: PartitionScope, kg: number): Promise<void> {
    const id = directoryKey(scope, kg);
    if (this.directories.has(id)) return;
    const page = await this.db.queryFirstPage('#pk = :pk', { ':pk': L.statePk(scope, kg) }, 'sk');
    const keys = page.complete && page.items.length <= MAX_DIRECTORY_ITEMS ? new Set(page.items.map((it) => L.entityKeyOfSk(String(it.sk)))) : undefined;
    this.directories.set(id, { partition: scope.partition, keys });
  }

  /** After field items were (or may have been) written: list their entities, or forget the key group when unsure. */
  private listed(scope: PartitionScope, writes: readonly StateWrite[], landed: boolean): void {
    for (const w of writes) {
      const dir = this.directories.get(directoryKey(scope, w.kg));
      if (!dir?.keys) continue;
      if (!landed) this.directories.delete(directoryKey(scope, w.kg));
      else if (w.value !== undefined) dir.keys.add(L.entityKey(w.entity).key);
      // A delete keeps the entity listed: it may have other fields; listing too much only costs a Query.
    }
  }

  peek(scope: PartitionScope, kg: number, entity: string): ReadonlyMap<string, unknown> | undefined {
    const hit = this.cache.get(cacheKey(scope, kg, entity));
    if (!hit) throw new StateNotPrefetchedError(scopeId(scope), kg, entity);
    return hit.fields.size ? hit.fields : undefined;
  }

  // ---- commit ------------------------------------------------------------------------

  async commit(batch: CommitBatch): Promise<void> {
    await this.commitWith(batch);
  }

  /** `intervals`: the head's tracked intervals when set directly (install). */
  private async commitWith(batch: CommitBatch, intervals?: string): Promise<void> {
    const { scope } = batch;
    const next = batch.expectedVersion + 1;
    const log = this.stateLog ? this.logs.get(scopeId(scope)) : undefined;
    // Writing fields directly (stateLog off) over a log that still holds changes would let the log win on recovery.
    if (!this.stateLog && this.logs.get(scopeId(scope))?.versions.length && !(await this.compact(scope, batch.expectedVersion))) {
      throw new CommitConflictError(scopeId(scope), batch.expectedVersion, 'its state log could not be compacted before a direct write');
    }
    const { ops, blob, delta } = this.plan(batch, next, log !== undefined);
    const head: Attrs = { pk: L.controlPk(scope), sk: L.VERSION_SK, ver: next, prog: L.encodeValue(batch.progress) };
    let applyTracking: (() => string[]) | undefined;
    if (batch.tracking) {
      const t = this.tracking.get(scopeId(scope));
      if (!t) throw new InvariantError(`commit with tracking on ${scopeId(scope)}: recover() the partition on this backend first`);
      const planned = t.plan(next, batch.writes, batch.tracking, batch.progress.lastBarrier ?? 0);
      for (const it of planned.items) ops.push(putOp({ pk: head.pk, ...it }, '(tracked keys)', it.sk));
      head[INTERVALS_ATTR] = planned.intervals;
      applyTracking = planned.apply;
    } else if (intervals !== undefined) head[INTERVALS_ATTR] = intervals;
    // The version item is replaced whole: keep the compaction mark.
    const compactedThrough = this.logs.get(scopeId(scope))?.compactedThrough ?? 0;
    if (compactedThrough) head.cmp = compactedThrough;
    const headBytes = L.itemBytes(head);
    if (headBytes > L.MAX_ITEM_BYTES) throw new StateItemTooLargeError(`(progress of ${scopeId(scope)})`, 'prog', headBytes, L.MAX_ITEM_BYTES);
    const total = ops.reduce((n, o) => n + o.bytes, headBytes);
    this.recordKinds(ops, headBytes);
    try {
      // Immutable and content-addressed: written first, named by the transaction; if that fails it is garbage for the lifecycle rule.
      if (blob) await this.blobs!.put(blob.key, blob.body);
      if (ops.length + 1 <= L.MAX_TX_ITEMS && total <= L.MAX_TX_BYTES) await this.commitOne(batch, head, ops);
      else await this.commitLogged(batch, head, ops);
    } catch (e) {
      // Outcome unknown or rejected: drop what the cache may now get wrong (and the tracking: recover reloads it).
      for (const w of batch.writes) this.cache.delete(cacheKey(scope, w.kg, w.entity));
      if (!delta) this.listed(scope, batch.writes, false);
      if (batch.tracking) this.tracking.delete(scopeId(scope));
      throw e;
    }
    if (!delta) this.listed(scope, batch.writes, true);
    const dropped = applyTracking?.() ?? [];
    if (dropped.length) void this.deleteItems(String(head.pk), dropped);
    for (const w of batch.writes) {
      const fields = this.cache.get(cacheKey(scope, w.kg, w.entity))?.fields;
      if (!fields) continue; // never read: the next prefetch loads it whole
      if (w.value === undefined) fields.delete(w.field);
      else fields.set(w.field, w.value);
    }
    this.commits++;
    if (log) log.committedVersion = next;
    if (log && delta) {
      const logOps = ops.filter((o) => o.kind === 'log');
      log.apply(next, delta.value, delta.bytes, logOps.map((o) => o.sk));
      if (log.versions.length >= this.compactAfterCommits || log.bytes >= this.compactAfterBytes) await this.compact(scope, next);
    }
  }

  /**
   * Write the partition's logged changes into their own items, then mark the log
   * compacted through `version` and delete it. Each transaction checks that the version
   * item still says `version` (no other writer took the partition over), so a stale
   * process can never write old values over a newer owner's. A failure leaves the log
   * in place (it stays the truth for recover) and is retried after a later commit; it
   * does not fail the commit, which is already durable.
   */
  async compact(scope: PartitionScope, version?: number): Promise<boolean> {
    const log = this.logs.get(scopeId(scope));
    if (!log || !log.versions.length) return true;
    version ??= log.committedVersion;
    const ctrl = L.controlPk(scope);
    const { writes, timerAdds, timerDeletes } = log.compaction();
    const names = { '#ver': 'ver', '#pend': 'pend' };
    const check = { ConditionCheck: { TableName: this.table, Key: { pk: ctrl, sk: L.VERSION_SK }, ConditionExpression: '#ver = :v AND attribute_not_exists(#pend)', ExpressionAttributeNames: names, ExpressionAttributeValues: { ':v': version } } };
    try {
      const ops: Op[] = [...(await this.withoutMissingDeletes(scope, writes)).map((w) => stateOp(scope, w)), ...timerDeletes.map((t) => ({ ...deleteOp(ctrl, L.timerSk(t)), kind: 'timer' as const })), ...timerAdds.map((t) => ({ ...putOp({ pk: ctrl, sk: L.timerSk(t), v: L.encodeValue(t) }, `(timer of ${scopeId(scope)})`, t.key), kind: 'timer' as const }))];
      const groups = groupOps(ops);
      await pool(groups, this.writeConcurrency, async (g) => {
        for (const o of g) this.accounting.record(L.ITEM_KINDS_SERVICE, `compaction ${o.kind ?? 'other'} ${o.item ? 'put' : 'delete'}`, { items: 1, estimatedWriteUnits: 2 * kb(o.bytes) });
        await this.db.transact([check, ...g.map((o) => this.txOp(o))]);
      });
      await this.db.send('UpdateItem', 'write', new UpdateCommand({ TableName: this.table, Key: { pk: ctrl, sk: L.VERSION_SK }, UpdateExpression: 'SET #cmp = :v', ConditionExpression: '#ver = :v AND attribute_not_exists(#pend)', ExpressionAttributeNames: { ...names, '#cmp': 'cmp' }, ExpressionAttributeValues: { ':v': version }, ReturnConsumedCapacity: 'TOTAL' }), 1, 1);
    } catch {
      this.listed(scope, writes, false);
      return false;
    }
    this.listed(scope, writes, true);
    const sortKeys = [...log.sortKeys];
    log.compacted(version);
    // Best effort: entries at or below cmp are ignored by recover().
    await this.db.batchWrite(sortKeys.map((sk) => ({ DeleteRequest: { Key: { pk: ctrl, sk } } }))).catch(() => undefined);
    return true;
  }

  /**
   * Deletes of field items that do not exist cost 2 write units each in a transaction.
   * The log knows which fields the base holds only for entities read since the last
   * compaction (not after a cold start), so ask DynamoDB for the others: one Query of
   * sort keys per key group, far cheaper than a window's worth of pointless deletes.
   */
  private async withoutMissingDeletes(scope: PartitionScope, writes: readonly StateWrite[]): Promise<StateWrite[]> {
    const kgs = [...new Set(writes.filter((w) => w.value === undefined).map((w) => w.kg))];
    if (!kgs.length) return [...writes];
    const existing = new Set<string>();
    await pool(kgs, this.readConcurrency, async (kg) => {
      const pk = L.statePk(scope, kg);
      for (const it of await this.db.query('#pk = :pk', { ':pk': pk }, 'sk')) existing.add(`${kg}\u0000${String(it.sk)}`);
    });
    return writes.filter((w) => w.value !== undefined || existing.has(`${w.kg}\u0000${L.stateSortKey(w.entity, w.field).sk}`));
  }

  /** Transactional write units by item kind (not priced: the requests themselves are, under 'dynamodb'). */
  private recordKinds(ops: readonly Op[], headBytes: number): void {
    this.accounting.record(L.ITEM_KINDS_SERVICE, 'progress', { items: 1, estimatedWriteUnits: 2 * kb(headBytes) });
    for (const o of ops) this.accounting.record(L.ITEM_KINDS_SERVICE, `${o.kind ?? 'other'} ${o.item ? 'put' : 'delete'}`, { items: 1, estimatedWriteUnits: 2 * kb(o.bytes) });
  }

  /** The batch as distinct item operations (last write wins, timer adds after deletes, as in memory). Validates sizes first. */
  private plan(batch: CommitBatch, next: number, logged: boolean): { ops: Op[]; blob?: { key: string; body: Uint8Array }; delta?: { value: LogDelta; bytes: number } } {
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
      const stored = L.storeOutbox(L.encodeValue(batch.outbox), batch.scope, next, { inlineBytes: this.outboxInlineBytes, blobs: this.blobs !== undefined });
      if (stored.kind === 'b') {
        blob = { key: stored.key, body: stored.body };
        add({ ...putOp({ pk: ctrl, sk: L.outboxSk(next, 0), b: stored.key }, '(outbox)', '0'), kind: 'outbox' });
      } else stored.chunks.forEach((chunk, i) => add({ ...putOp({ pk: ctrl, sk: L.outboxSk(next, i), [stored.kind]: chunk }, '(outbox)', String(i)), kind: 'outbox' }));
    }
    return { ops: [...ops.values()], blob, delta };
  }

  private async commitOne(batch: CommitBatch, head: Attrs, ops: readonly Op[]): Promise<void> {
    try {
      await this.db.transact([{ Put: { TableName: this.table, Item: head, ...fence(batch.expectedVersion), ReturnValuesOnConditionCheckFailure: 'ALL_OLD' } }, ...ops.map((o) => this.txOp(o))]);
    } catch (e) {
      throw this.commitError(e, batch, 'TransactWriteItems');
    }
  }

  private async commitLogged(batch: CommitBatch, head: Attrs, ops: readonly Op[]): Promise<void> {
    const id = randomUUID();
    const ctrl = String(head.pk);
    const chunks = L.splitText(JSON.stringify(ops.map((o) => (o.item ? { p: o.item } : { d: [o.pk, o.sk] }))));
    const expires = Math.floor(Date.now() / 1000) + this.logTtl;
    try {
      await this.db.batchWrite(chunks.map((v, i) => ({ PutRequest: { Item: { pk: ctrl, sk: L.logSk(id, i), v, expires } } })));
    } catch (e) {
      // Nothing is visible before the flip: the commit did not land, whatever the error.
      throw mapDynamoDbError(e, { operation: 'BatchWriteItem', table: this.table, write: false });
    }
    const flip = { ...head, pend: id, pn: chunks.length };
    try {
      await this.db.send('PutItem', 'write', new PutCommand({ TableName: this.table, Item: flip, ...fence(batch.expectedVersion), ReturnValuesOnConditionCheckFailure: 'ALL_OLD', ReturnConsumedCapacity: 'TOTAL' }), 1, 2 * kb(L.itemBytes(flip)));
    } catch (e) {
      const err = this.commitError(e, batch, 'PutItem');
      if (err instanceof CommitConflictError) void this.deleteLog(ctrl, id, chunks.length).catch(() => undefined);
      throw err;
    }
    try {
      await this.rollForward(ctrl, id, ops, chunks.length);
    } catch (e) {
      throw new CommitRollForwardError(scopeId(batch.scope), Number(head.ver), e);
    }
  }

  /** Apply a flipped batch's operations; idempotent, and harmless when another process finishes it first. */
  private async rollForward(ctrl: string, id: string, ops: readonly Op[], logChunks: number): Promise<void> {
    const groups = groupOps(ops);
    const check = { ConditionCheck: { TableName: this.table, Key: { pk: ctrl, sk: L.VERSION_SK }, ConditionExpression: '#pend = :id', ExpressionAttributeNames: { '#pend': 'pend' }, ExpressionAttributeValues: { ':id': id } } };
    let done = false;
    await pool(groups, this.writeConcurrency, async (g) => {
      if (done) return;
      try {
        await this.db.transact([check, ...g.map((o) => this.txOp(o))]);
      } catch (e) {
        // `pend` moved: whoever cleared it applied everything first.
        if (cancelCode(e, 0) === 'ConditionalCheckFailed') done = true;
        else throw mapDynamoDbError(e, { operation: 'TransactWriteItems', table: this.table, write: true });
      }
    });
    if (!done) {
      try {
        await this.db.send('UpdateItem', 'write', new UpdateCommand({ TableName: this.table, Key: { pk: ctrl, sk: L.VERSION_SK }, UpdateExpression: 'REMOVE #pend, #pn', ConditionExpression: '#pend = :id', ExpressionAttributeNames: { '#pend': 'pend', '#pn': 'pn' }, ExpressionAttributeValues: { ':id': id }, ReturnConsumedCapacity: 'TOTAL' }), 1, 1);
      } catch (e) {
        if ((e as { name?: string }).name !== 'ConditionalCheckFailedException') throw mapDynamoDbError(e, { operation: 'UpdateItem', table: this.table, write: true });
      }
    }
    // Best effort: TTL removes what this misses.
    await this.deleteLog(ctrl, id, logChunks).catch(() => undefined);
  }

  /** recover(): a batch flipped but not fully applied (the writer crashed): apply it from its log. */
  private async finishLogged(scope: PartitionScope, id: string, count: number): Promise<void> {
    const ctrl = L.controlPk(scope);
    const items = await this.db.query('#pk = :pk AND begins_with(#sk, :p)', { ':pk': ctrl, ':p': `${L.LOG_PREFIX}${id}#` });
    if (items.length !== count) {
      throw new InvariantError(`redo log ${id} of ${scopeId(scope)} has ${items.length} of ${count} chunks (expired by TTL?): the committed batch cannot be applied`);
    }
    const logged = JSON.parse(items.map((it) => String(it.v)).join('')) as ({ p: Attrs } | { d: [string, string] })[];
    const ops = logged.map((o) => ('p' in o ? { pk: String(o.p.pk), sk: String(o.p.sk), item: o.p, bytes: L.itemBytes(o.p) } : { pk: o.d[0], sk: o.d[1], bytes: 0 }));
    await this.rollForward(ctrl, id, ops, count);
  }

  private commitError(e: unknown, batch: CommitBatch, operation: string): SluiceError {
    // The version item is always first in the transaction, so reason 0 is the fence.
    const single = (e as { name?: string }).name === 'ConditionalCheckFailedException';
    if (single || cancelCode(e, 0) === 'ConditionalCheckFailed') {
      const old = single ? (e as { Item?: Record<string, unknown> }).Item : (e as { CancellationReasons?: { Item?: Record<string, unknown> }[] }).CancellationReasons?.[0]?.Item;
      const stored = old ? attrNumber(old.ver) : 0;
      const pending = old?.pend !== undefined ? ', a logged batch is still being applied' : '';
      return new CommitConflictError(scopeId(batch.scope), batch.expectedVersion, `stored version is ${stored}${pending}`);
    }
    return mapDynamoDbError(e, { operation, table: this.table, write: true });
  }

  async clearOutbox(scope: PartitionScope, version: number): Promise<void> {
    const ctrl = L.controlPk(scope);
    const items = await this.db.query('#pk = :pk AND #sk BETWEEN :a AND :b', { ':pk': ctrl, ':a': L.OUTBOX_PREFIX, ':b': L.outboxSkUpTo(version) }, 'sk');
    await this.db.batchWrite(items.map((it) => ({ DeleteRequest: { Key: { pk: ctrl, sk: it.sk } } })));
  }

  private txOp(o: Op): Record<string, unknown> {
    return o.item ? { Put: { TableName: this.table, Item: o.item } } : { Delete: { TableName: this.table, Key: { pk: o.pk, sk: o.sk } } };
  }

  /** Best effort (items nothing reads any more). */
  private async deleteItems(pk: string, sks: readonly string[]): Promise<void> {
    await this.db.batchWrite(sks.map((sk) => ({ DeleteRequest: { Key: { pk, sk } } }))).catch(() => undefined);
  }

  private async deleteLog(ctrl: string, id: string, count: number): Promise<void> {
    await this.db.batchWrite(Array.from({ length: count }, (_, i) => ({ DeleteRequest: { Key: { pk: ctrl, sk: L.logSk(id, i) } } })));
  }

  /** Other partitions of the stage keep their entries: their key groups are theirs, and they may be mid-batch. */
  private forgetPartition(scope: PartitionScope): void {
    const prefix = stagePrefix(scope);
    for (const [key, dir] of [...this.directories]) if (dir.partition === scope.partition && key.startsWith(prefix)) this.directories.delete(key);
    for (const [key, hit] of [...this.cache]) if (hit.partition === scope.partition && key.startsWith(prefix)) this.cache.delete(key);
  }
}

/** Above this many items a key group is not listed (one Query page holds up to 1 MB anyway). */
const MAX_DIRECTORY_ITEMS = 10_000;

function directoryKey(scope: PartitionScope, kg: number): string {
  return `${stagePrefix(scope)}${kg}`;
}

function stagePrefix(scope: PartitionScope): string {
  return `${scope.job.length}:${scope.job}/${scope.stage}/`;
}

/** State is shared by the partitions of a stage, as in the in-memory backend. */
function cacheKey(scope: PartitionScope, kg: number, entity: string): string {
  return `${stagePrefix(scope)}${kg}/${entity}`;
}

function stateOp(scope: PartitionScope, w: StateWrite): Op {
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

function putOp(item: Attrs, entity: string, field: string, kind?: L.ItemKind): Op {
  const bytes = L.itemBytes(item);
  if (bytes > L.MAX_ITEM_BYTES) throw new StateItemTooLargeError(entity, field, bytes, L.MAX_ITEM_BYTES);
  return { pk: String(item.pk), sk: String(item.sk), item, bytes, kind };
}

/** Operations in transaction-sized groups (leaving room for one condition check). */
function groupOps(ops: readonly Op[]): Op[][] {
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

function deleteOp(pk: string, sk: string): Op {
  return { pk, sk, bytes: L.itemBytes({ pk, sk }) };
}

/** The version fence: the stored version is the expected one and no logged batch is half applied. */
function fence(expected: number): { ConditionExpression: string; ExpressionAttributeNames: Record<string, string>; ExpressionAttributeValues?: Record<string, number> } {
  if (expected === 0) return { ConditionExpression: 'attribute_not_exists(#pk)', ExpressionAttributeNames: { '#pk': 'pk' } };
  return { ConditionExpression: '#ver = :e AND attribute_not_exists(#pend)', ExpressionAttributeNames: { '#ver': 'ver', '#pend': 'pend' }, ExpressionAttributeValues: { ':e': expected } };
}

function cancelCode(e: unknown, index: number): string | undefined {
  const err = e as { name?: string; CancellationReasons?: { Code?: string }[] };
  return err?.name === 'TransactionCanceledException' ? err.CancellationReasons?.[index]?.Code : undefined;
}

/** An attribute as returned raw in errors ({ N: '3' }) or unmarshalled (3). */
function attrNumber(v: unknown): number {
  if (v && typeof v === 'object' && 'N' in v) return Number((v as { N: string }).N);
  return Number(v ?? 0);
}
