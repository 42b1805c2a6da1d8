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
 * and recover()'s timers include it. compact() writes the net change into the field and
 * timer items (dynamodb-state-log-store.ts); moving key groups (rescaling) must call it first.
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
 * Batches over 100 items or ~3.5 MB go through a redo log (dynamodb-redo-log.ts), so
 * they stay atomic for every reader that goes through recover().
 * A single value over 400 KB is rejected (StateItemTooLargeError) before anything is written.
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { CommitConflictError, InvariantError } from '../../errors.ts';
import type { BlobStore } from '../../checkpoint/storage.ts';
import type { CommitBatch, PartitionScope, RecoveredPartition, StateBackend, TimerEntry, TrackedInterval } from '../../state/backend.ts';
import { emptyProgress, scopeId } from '../../state/backend.ts';
import type { OutboxEntry } from '../../transport/envelope.ts';
import { AwsAccounting } from '../cost/accounting.ts';
import * as L from './dynamodb-layout.ts';
import { type Attrs, commitError, fence, type Op, planCommit, putOp, txOp } from './dynamodb-commit-ops.ts';
import { commitLogged, finishLogged } from './dynamodb-redo-log.ts';
import type { PartitionLog } from './dynamodb-state-log.ts';
import { compactPartitionLog, loadPartitionLog } from './dynamodb-state-log-store.ts';
import { DynamoDbTable, kb, pool } from './dynamodb-table.ts';
import { KeyGroupDirectories, stagePrefix } from './dynamodb-directories.ts';
import { INPUT_LOG_SERVICE, type InputLogSegment, inputLogSegment } from '../operator/input-log.ts';
import { entityOfStateItem, INTERVALS_ATTR, PartitionTracking, TRACK_PREFIX } from './dynamodb-tracking.ts';
import { StateItemTooLargeError, StateNotPrefetchedError } from '../errors.ts';
import { RESTORING_ATTR, RestoreInProgressError } from '../restore/restore-partition.ts';

export { createStateTable } from './dynamodb-table.ts';

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
  /**
   * Logged input (input-log.ts): where the segments of commits with CommitBatch.inputLog
   * go (keys `${job}/input-log/...`, so a store without prefix on the snapshot bucket).
   * Without it such a commit is an InvariantError.
   */
  readonly inputLogStore?: BlobStore;
  /** Input log segments stay inline in their item up to this size (default 4 KB; 0: always an object). */
  readonly inputLogInlineBytes?: number;
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
  private readonly inputLogStore?: BlobStore;
  private readonly inputLogInlineBytes?: number;
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
  /** Per key group: the entity keys that have field items (dynamodb-directories.ts). */
  private readonly directories: KeyGroupDirectories;
  /** Commits applied (for tests and metrics), as in the in-memory backend. */
  commits = 0;

  constructor(options: DynamoDbStateBackendOptions) {
    this.table = options.tableName;
    this.accounting = options.accounting ?? new AwsAccounting();
    this.db = new DynamoDbTable(options.client, options.tableName, this.accounting);
    this.directories = new KeyGroupDirectories(this.db);
    this.readConcurrency = options.readConcurrency ?? 16;
    this.writeConcurrency = options.writeConcurrency ?? 4;
    this.maxCached = options.maxCachedEntities ?? 10_000;
    this.logTtl = options.logTtlSeconds ?? 7 * 24 * 3600;
    this.blobs = options.blobs;
    this.outboxInlineBytes = options.outboxInlineBytes;
    this.inputLogStore = options.inputLogStore;
    this.inputLogInlineBytes = options.inputLogInlineBytes;
    this.stateLog = options.stateLog ?? true;
    this.compactAfterCommits = options.compactAfterCommits ?? 1000;
    this.compactAfterBytes = options.compactAfterBytes ?? 2 * 1024 * 1024;
  }

  // ---- reads -------------------------------------------------------------------------

  async recover(scope: PartitionScope): Promise<RecoveredPartition> {
    this.forgetPartition(scope);
    const ctrl = L.controlPk(scope);
    const head = await this.db.get(ctrl, L.VERSION_SK);
    if (head?.[RESTORING_ATTR] !== undefined) throw new RestoreInProgressError(scopeId(scope), Number(head[RESTORING_ATTR]));
    if (head?.pend !== undefined) await finishLogged(this.db, this.writeConcurrency, scope, String(head.pend), Number(head.pn));
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
    const log = await this.loadLog(scope, { head, logItems: items.filter((it) => String(it.sk).startsWith(L.STATE_LOG_PREFIX)), baseTimers: timers });
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

  /** The partition's state log (recover() passes what it read; a first prefetch reads it), kept in `logs`. */
  private async loadLog(scope: PartitionScope, stored?: Parameters<typeof loadPartitionLog>[3]): Promise<PartitionLog> {
    const log = await loadPartitionLog(this.db, scope, (key) => this.outboxObject(key), stored);
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
    await pool([...new Set(missing.map((m) => m.kg))], this.readConcurrency, (kg) => this.directories.load(scope, kg).then(() => undefined));
    await pool(missing, this.readConcurrency, async ({ kg, entity, key }) => {
      const items = this.directories.mayHaveItems(scope, kg, entity) ? await this.db.query('#pk = :pk AND begins_with(#sk, :p)', { ':pk': L.statePk(scope, kg), ':p': L.entityPrefix(entity) }) : [];
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

  peek(scope: PartitionScope, kg: number, entity: string): ReadonlyMap<string, unknown> | undefined {
    const hit = this.cache.get(cacheKey(scope, kg, entity));
    if (!hit) throw new StateNotPrefetchedError(scopeId(scope), kg, entity);
    return hit.fields.size ? hit.fields : undefined;
  }

  // ---- commit ------------------------------------------------------------------------

  async commit(batch: CommitBatch): Promise<void> {
    const { scope } = batch;
    const next = batch.expectedVersion + 1;
    const log = this.stateLog ? this.logs.get(scopeId(scope)) : undefined;
    // Writing fields directly (stateLog off) over a log that still holds changes would let the log win on recovery.
    if (!this.stateLog && this.logs.get(scopeId(scope))?.versions.length && !(await this.compact(scope, batch.expectedVersion))) {
      throw new CommitConflictError(scopeId(scope), batch.expectedVersion, 'its state log could not be compacted before a direct write');
    }
    const { ops, blob, delta } = planCommit(batch, next, log !== undefined, { inlineBytes: this.outboxInlineBytes, blobs: this.blobs !== undefined });
    let segment: InputLogSegment | undefined;
    if (batch.inputLog?.length) {
      if (!this.inputLogStore) throw new InvariantError(`commit of ${scopeId(scope)} carries logged input, but the backend has no inputLogStore`);
      segment = inputLogSegment(scope, next, batch.inputLog, this.inputLogInlineBytes);
      ops.push(putOp({ pk: L.controlPk(scope), ...segment.item }, '(input log)', segment.item.sk, 'input'));
    }
    const head: Attrs = { pk: L.controlPk(scope), sk: L.VERSION_SK, ver: next, prog: L.encodeValue(batch.progress) };
    let applyTracking: (() => string[]) | undefined;
    if (batch.tracking) {
      const t = this.tracking.get(scopeId(scope));
      if (!t) throw new InvariantError(`commit with tracking on ${scopeId(scope)}: recover() the partition on this backend first`);
      const planned = t.plan(next, batch.writes, batch.tracking, batch.progress.lastBarrier ?? 0);
      for (const it of planned.items) ops.push(putOp({ pk: head.pk, ...it }, '(tracked keys)', it.sk));
      head[INTERVALS_ATTR] = planned.intervals;
      applyTracking = planned.apply;
    }
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
      // The same for logged input: an object no committed item names is never replayed.
      if (segment?.object) await this.inputLogStore!.put(segment.object.key, segment.object.body);
      if (ops.length + 1 <= L.MAX_TX_ITEMS && total <= L.MAX_TX_BYTES) await this.commitOne(batch, head, ops);
      else await commitLogged(this.db, { writeConcurrency: this.writeConcurrency, logTtlSeconds: this.logTtl }, batch, head, ops);
    } catch (e) {
      // Outcome unknown or rejected: drop what the cache may now get wrong (and the tracking: recover reloads it).
      for (const w of batch.writes) this.cache.delete(cacheKey(scope, w.kg, w.entity));
      if (!delta) this.directories.listed(scope, batch.writes, false);
      if (batch.tracking) this.tracking.delete(scopeId(scope));
      throw e;
    }
    if (!delta) this.directories.listed(scope, batch.writes, true);
    // Descriptive (not priced: the PutObject is, under 's3', and the item under 'dynamodb').
    if (segment) this.accounting.record(INPUT_LOG_SERVICE, segment.object ? 'segment object' : 'segment inline', { requests: 1, items: batch.inputLog!.reduce((n, a) => n + a.records.length, 0), bytes: segment.object?.body.byteLength ?? 0 });
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
   * Write the partition's logged changes into their own items and drop the log
   * (dynamodb-state-log-store.ts). False when that failed: the log stays in place (it
   * stays the truth for recover) and is retried after a later commit; it does not fail
   * the commit, which is already durable.
   */
  async compact(scope: PartitionScope, version?: number): Promise<boolean> {
    const log = this.logs.get(scopeId(scope));
    if (!log || !log.versions.length) return true;
    const concurrency = { readConcurrency: this.readConcurrency, writeConcurrency: this.writeConcurrency };
    return compactPartitionLog(this.db, concurrency, scope, log, version ?? log.committedVersion, (writes, landed) => this.directories.listed(scope, writes, landed));
  }

  /** Transactional write units by item kind (not priced: the requests themselves are, under 'dynamodb'). */
  private recordKinds(ops: readonly Op[], headBytes: number): void {
    this.accounting.record(L.ITEM_KINDS_SERVICE, 'progress', { items: 1, estimatedWriteUnits: 2 * kb(headBytes) });
    for (const o of ops) this.accounting.record(L.ITEM_KINDS_SERVICE, `${o.kind ?? 'other'} ${o.item ? 'put' : 'delete'}`, { items: 1, estimatedWriteUnits: 2 * kb(o.bytes) });
  }

  private async commitOne(batch: CommitBatch, head: Attrs, ops: readonly Op[]): Promise<void> {
    try {
      await this.db.transact([{ Put: { TableName: this.table, Item: head, ...fence(batch.expectedVersion), ReturnValuesOnConditionCheckFailure: 'ALL_OLD' } }, ...ops.map((o) => txOp(this.table, o))]);
    } catch (e) {
      throw commitError(e, batch, 'TransactWriteItems', this.table);
    }
  }

  async clearOutbox(scope: PartitionScope, version: number): Promise<void> {
    const ctrl = L.controlPk(scope);
    const items = await this.db.query('#pk = :pk AND #sk BETWEEN :a AND :b', { ':pk': ctrl, ':a': L.OUTBOX_PREFIX, ':b': L.outboxSkUpTo(version) }, 'sk');
    await this.db.batchWrite(items.map((it) => ({ DeleteRequest: { Key: { pk: ctrl, sk: it.sk } } })));
  }

  /** Best effort (items nothing reads any more). */
  private async deleteItems(pk: string, sks: readonly string[]): Promise<void> {
    await this.db.batchWrite(sks.map((sk) => ({ DeleteRequest: { Key: { pk, sk } } }))).catch(() => undefined);
  }

  /** Other partitions of the stage keep their entries: their key groups are theirs, and they may be mid-batch. */
  private forgetPartition(scope: PartitionScope): void {
    const prefix = stagePrefix(scope);
    this.directories.forget(scope);
    for (const [key, hit] of [...this.cache]) if (hit.partition === scope.partition && key.startsWith(prefix)) this.cache.delete(key);
  }
}

/** State is shared by the partitions of a stage, as in the in-memory backend. */
function cacheKey(scope: PartitionScope, kg: number, entity: string): string {
  return `${stagePrefix(scope)}${kg}/${entity}`;
}
