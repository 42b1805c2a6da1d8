/**
 * In-place restore on the AWS path: roll a job back to a checkpoint (or a savepoint of
 * the same plan) in its own state table, queues and bucket, the ones CDK created once.
 *
 * Precondition: the job's stage consumers are stopped and their running invocations
 * have ended, and no checkpoint execution runs (the caller stops them: on AWS, disable
 * the event source mappings or set their concurrency to zero, and wait for the function
 * timeout). The restore fences off a writer that was not stopped, but cannot recall what
 * it already sent.
 *
 * What restoreInPlace does, in this order (each step idempotent: a restore that dies is
 * run again with the same manifest; it takes a new restore epoch, which is harmless):
 *
 *   1. read and check, writing nothing: the manifest's snapshots, every partition's
 *      version item, the coordinator record and pointer, and for each source partition
 *      the input log from the checkpoint's position to the records it consumed (a gap
 *      fails the restore here, before anything changed: RestoreError);
 *   2. the restore epoch R = 1 + every epoch the job ever saw (coordinator, pointer,
 *      partitions' barriers): barriers of the abandoned timeline still in a source queue
 *      are at or below R, and partitions ignore them (their lastBarrier is R);
 *   3. every partition rolled back (restore-partition.ts): fenced at a version above any
 *      the table held, state, timers and outbox replaced by the snapshot's, progress
 *      installed as below;
 *   4. the inter-stage queues purged (their envelopes belong to the abandoned timeline;
 *      consumers were given the snapshot's sequence numbers), and the source queues the
 *      caller feeds again (`refedSourceStages`); other source queues keep their messages:
 *      accepted input is durable (contract point 4);
 *   5. the job's transactional sinks recovered to the epoch (S3 files: the pointer back,
 *      everything staged after it deleted);
 *   6. the coordinator continues from the manifest: pointer and record name it as the
 *      last completed checkpoint, with epochs numbered above R (its next epoch's
 *      snapshots are deltas against it); the activity item is touched, so the next
 *      execution opens an epoch for the replayed input;
 *   7. an empty message to every source partition that has records to replay, so a
 *      partition whose queue is silent is still invoked.
 *
 * Installed progress of a partition: the snapshot's, except
 *   - lastBarrier R (stale barriers are ignored; sink deliveries are tagged R);
 *   - source channels: the record count of the checkpoint, the SQS offset of the last
 *     message consumed before the restore (the queue continues right after it), and
 *     `replay[channel]` = the records consumed before the restore: the records between
 *     are replayed from the input log first (restore-replay.ts, in the operator function);
 *   - inter-stage channels continue above the highest sequence number the abandoned
 *     timeline used on them (sender and receiver alike): SQS FIFO would drop a reused
 *     number's message as a duplicate for 5 minutes, purge or not;
 *   - sink sequence numbers continue above the highest the abandoned timeline used, so
 *     the upsert sink's `sluice_seq <` condition and the sinks' in-memory high-water marks
 *     (in containers that stayed warm) accept the restored timeline's deliveries.
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { S3Client } from '@aws-sdk/client-s3';
import { PurgeQueueCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { Job } from '../../api/stream.ts';
import { MIN_WATERMARK } from '../../api/types.ts';
import { createCoordinator, toRecord } from '../../checkpoint/coordinator.ts';
import { POINTER_NAME, RECORD_NAME } from '../../checkpoint/driver.ts';
import { RestoreError } from '../../checkpoint/driver-errors.ts';
import { participantsOf, planFingerprint } from '../../checkpoint/fingerprint.ts';
import { participantKey, sourcePartitionKey, type CommitPointer, type CoordinatorRecord, type Manifest } from '../../checkpoint/protocol.ts';
import { type RestoredPartition, restoreManifest } from '../../checkpoint/snapshot.ts';
import { channelId, channelsInto, compile, type PhysicalPlan } from '../../graph/compile.ts';
import { isTransactional, type TransactionalSink } from '../../api/sinks.ts';
import { keyGroupsOf } from '../../runtime/snapshots.ts';
import { type ChannelProgress, emptyProgress, type PartitionProgress, type PartitionScope } from '../../state/backend.ts';
import { AwsAccounting } from '../cost/accounting.ts';
import { DynamoDbAckStore } from '../checkpoint/checkpoint-acks.ts';
import { DynamoDbPointerStore } from '../dynamodb/dynamodb-pointers.ts';
import { DynamoDbTable, pool } from '../dynamodb/dynamodb-table.ts';
import { AwsInputLog } from '../operator/input-log.ts';
import { type PartitionHead, readHead, RestoreFencedError, rollBackPartition } from './restore-partition.ts';
import { replayEnvelopes } from './restore-replay.ts';
import { S3BlobStore } from '../s3/s3-blob-store.ts';
import { bindAwsSinks } from '../sinks/sink-options.ts';
import type { QueueResolver } from '../sqs/sqs-queues.ts';
import { WAKE_BODY } from '../sqs/sqs-codec.ts';
import { SqsTransport } from '../sqs/sqs-transport.ts';
import { mapSqsError } from '../transport-errors.ts';

export { RestoreFencedError, RestoreInProgressError } from './restore-partition.ts';

export interface RestoreInPlaceOptions {
  readonly job: Job;
  /** Default compile(job.graph). */
  readonly plan?: PhysicalPlan;
  readonly clients: { readonly dynamodb: DynamoDBClient; readonly sqs: SQSClient; readonly s3: S3Client };
  /** The job's state table: partitions, input log items, coordinator control items, S3 file sink pointers. */
  readonly tableName: string;
  /** The snapshot bucket: manifests, snapshots, input log objects (and the job's S3 file sinks by default). */
  readonly bucket: string;
  readonly queues: QueueResolver;
  /**
   * What to install: a committed checkpoint's manifest, or a savepoint's (of the same
   * plan). Epoch 0 with no partitions (initialManifest): the start, every partition empty
   * (what a run that never completed a checkpoint resumes from; the whole input log is replayed).
   */
  readonly manifest: Manifest;
  /** Its key in the bucket: the coordinator's pointer will name it ('' for epoch 0). */
  readonly manifestKey: string;
  /**
   * Source stages whose queues are emptied too, because the caller sends their input
   * again from a replayable origin (local-AWS: files, items, generators), skipping the
   * records each source partition consumed (result `sources[..].consumed`). Default none.
   */
  readonly refedSourceStages?: readonly number[];
  /**
   * Transactional sinks to roll back to the epoch. Default: the job's own (S3 file sinks),
   * bound to `bucket` and `tableName` as the checkpoint task binds them.
   */
  readonly sinks?: readonly TransactionalSink[];
  readonly accounting?: AwsAccounting;
  readonly now?: () => number;
  readonly log?: (line: string) => void;
}

/** Per source partition (`${source}#${p}`). */
export interface RestoredSource {
  /** Records the checkpoint holds (its position). */
  readonly position: number;
  /** Records consumed after it before the restore, replayed from the input log first. */
  readonly replayed: number;
  /** position + replayed: where the partition's queue input continues. */
  readonly consumed: number;
}

export interface RestoreInPlaceResult {
  /** The installed checkpoint's epoch. */
  readonly epoch: number;
  /** The restore's own epoch number: above every epoch the job saw; the next checkpoint is above it. */
  readonly restoreEpoch: number;
  /** Per participant (`stage/partition`): the version installed (above every version the table held for it). */
  readonly versions: Readonly<Record<string, number>>;
  readonly sources: Readonly<Record<string, RestoredSource>>;
  /** Queue URLs purged. */
  readonly purged: readonly string[];
  /**
   * When the purges were asked for (epoch ms; undefined: none). SQS takes up to 60 s to
   * purge and may delete what is sent meanwhile: on AWS start the consumers 60 s after
   * this (fauxqs purges at once). Nothing else is sent to a purged queue before then.
   */
  readonly purgedAt?: number;
  /** Source partitions sent an empty message to wake them for their replay (`stage/partition`). */
  readonly woken: readonly string[];
}

interface Planned {
  readonly scope: PartitionScope;
  readonly head: PartitionHead;
  readonly restored: RestoredPartition;
  readonly progress: PartitionProgress;
}

export async function restoreInPlace(o: RestoreInPlaceOptions): Promise<RestoreInPlaceResult> {
  const plan = o.plan ?? compile(o.job.graph);
  const job = plan.job.name;
  const m = o.manifest;
  const accounting = o.accounting ?? new AwsAccounting();
  const now = (o.now ?? Date.now)();
  const what = `${m.savepoint ? `savepoint "${m.savepoint.label}"` : 'checkpoint'} ${m.epoch} (${o.manifestKey})`;
  if (m.job !== job) throw new RestoreError(what, `a checkpoint of job "${job}"`, `one of job "${m.job}"`);
  if (m.fingerprint !== planFingerprint(plan)) throw new RestoreError(what, 'a checkpoint of this job as it is now (same operators, stages and parallelism): an in-place restore keeps the plan', 'one of a changed job');
  const refed = new Set(o.refedSourceStages ?? []);
  const purge = purgedStages(plan, refed, what);

  // 1. Read and check.
  const db = new DynamoDbTable(o.clients.dynamodb, o.tableName, accounting);
  const blobs = new S3BlobStore({ s3: o.clients.s3, bucket: o.bucket, accounting });
  const pointers = new DynamoDbPointerStore({ client: o.clients.dynamodb, tableName: o.tableName, job, accounting });
  const snapshots = m.epoch === 0 ? new Map<string, RestoredPartition>() : await restoreManifest(m, blobs);
  const participants = participantsOf(plan);
  const heads = new Map<string, PartitionHead>();
  await pool(participants, 8, async (p) => {
    heads.set(participantKey(p), await readHead(db, { job, stage: p.stage, partition: p.partition }));
  });
  const rec = await pointers.read<CoordinatorRecord>(RECORD_NAME);
  const ptr = await pointers.read<CommitPointer>(POINTER_NAME);

  // 2. The restore epoch.
  let highest = Math.max(m.epoch, rec?.value.highestEpoch ?? 0, ptr?.value.epoch ?? 0);
  for (const h of heads.values()) highest = Math.max(highest, h.restoring ?? 0, h.progress?.lastBarrier ?? 0, h.progress?.aligning?.barrier.epoch ?? 0);
  const restoreEpoch = highest + 1;

  const sources: Record<string, RestoredSource> = {};
  const planned: Planned[] = [];
  for (const p of participants) {
    const key = participantKey(p);
    const restored = m.epoch === 0 ? emptyPartition(p) : snapshots.get(key);
    if (!restored) throw new RestoreError(what, `a snapshot of every partition of the job (stage ${p.stage} partition ${p.partition})`, 'none in the manifest');
    const scope = { job, stage: p.stage, partition: p.partition };
    const head = heads.get(key)!;
    planned.push({ scope, head, restored, progress: installedProgress(plan, scope, restored.progress, head.progress, restoreEpoch, sources, what) });
  }
  continueChannels(plan, planned);
  const log = new AwsInputLog(db, blobs);
  await pool(planned, 4, async ({ scope, progress }) => {
    const pending = Object.entries(progress.replay ?? {}).map(([channel, upTo]) => ({ channel, from: progress.inputs[channel]?.records ?? 0, upTo }));
    try {
      await replayEnvelopes(plan, scope, pending, log);
    } catch (e) {
      throw new RestoreError(what, `the input log of ${scope.stage}/${scope.partition} from the checkpoint's position to what the partition consumed`, (e as Error).message);
    }
  });

  // 3. Partitions.
  const versions: Record<string, number> = {};
  await pool(planned, 4, async ({ scope, head, restored, progress }) => {
    const stage = plan.stages[scope.stage];
    versions[participantKey(scope)] = await rollBackPartition(db, head, {
      scope,
      keyGroups: keyGroupsOf(scope.partition, stage.parallelism, plan.job.maxParallelism),
      progress,
      timers: [...restored.timers.values()],
      entities: [...restored.entities].map(([entity, { kg, fields }]) => ({ kg, entity, fields })),
      epoch: m.epoch,
      restoreEpoch,
    });
  });

  // 4. Queues.
  const purged: string[] = [];
  const purgedAt = purge.length ? (o.now ?? Date.now)() : undefined;
  for (const stage of purge) {
    const url = await o.queues.queueUrl(stage);
    await purgeQueue(o.clients.sqs, url, accounting);
    purged.push(url);
  }

  // 5. Sinks.
  for (const s of o.sinks ?? jobSinks(o, plan, accounting)) await s.recover(m.epoch);

  // 6. Coordinator.
  // Epoch 0: the pointer names nothing (a tombstone when one was written).
  const pointer: CommitPointer = { epoch: m.epoch, manifestKey: m.epoch ? o.manifestKey : '', committedAt: m.epoch ? m.createdAt : now };
  if ((ptr || m.epoch > 0) && (ptr?.value.epoch !== pointer.epoch || ptr.value.manifestKey !== pointer.manifestKey)) {
    if (!(await pointers.compareAndSet(POINTER_NAME, ptr?.version ?? 0, pointer))) throw new RestoreFencedError('coordinator pointer', ptr?.version ?? 0);
  }
  const base = rec?.value ?? toRecord(createCoordinator({ job, fingerprint: m.fingerprint, participants }));
  const record: CoordinatorRecord = {
    ...base,
    highestEpoch: restoreEpoch,
    inFlight: null,
    lastCompleted: m.epoch ? { epoch: m.epoch, pointer, completedAt: now } : null,
    history: m.epoch ? [...base.history.filter((h) => h.epoch < m.epoch), { epoch: m.epoch, completedAt: now, positions: m.positions }] : [],
  };
  if (!(await pointers.compareAndSet(RECORD_NAME, rec?.version ?? 0, record))) throw new RestoreFencedError('coordinator record', rec?.version ?? 0);
  await new DynamoDbAckStore({ client: o.clients.dynamodb, tableName: o.tableName, job, accounting }).touch(now);

  // 7. Wake the partitions that replay.
  const transport = new SqsTransport({ sqs: o.clients.sqs, job, queues: o.queues, accounting });
  const woken: string[] = [];
  for (const { scope, progress } of planned) {
    if (!progress.replay) continue;
    const body = WAKE_BODY;
    await transport.sendAll(await o.queues.queueUrl(scope.stage), [{ groupId: String(scope.partition), body, bytes: body.length, dedupId: `${job}/restore/${restoreEpoch}/${scope.stage}/${scope.partition}`.slice(-128) }], true);
    woken.push(participantKey(scope));
  }
  o.log?.(`restored ${what} in place as restore epoch ${restoreEpoch}: ${planned.length} partitions, ${Object.values(sources).reduce((n, s) => n + s.replayed, 0)} logged records to replay, ${purged.length} queues purged`);
  return { epoch: m.epoch, restoreEpoch, versions, sources, purged, ...(purgedAt !== undefined ? { purgedAt } : {}), woken };
}

/** The start of a job (epoch 0): a manifest with no partitions, which restoreInPlace installs as empty ones. */
export function initialManifest(plan: PhysicalPlan): Manifest {
  return { format: 1, job: plan.job.name, fingerprint: planFingerprint(plan), epoch: 0, baseEpoch: 0, createdAt: 0, partitions: {}, positions: {}, savepoint: null };
}

function emptyPartition(p: { stage: number; partition: number }): RestoredPartition {
  return { stage: p.stage, partition: p.partition, epoch: 0, progress: emptyProgress(), entities: new Map(), timers: new Map(), bytes: 0 };
}

/**
 * Inter-stage channels continue above the highest sequence number the abandoned timeline
 * used on them, on both ends: SQS FIFO drops a message whose deduplication id (a hash of
 * channel and sequence numbers) it saw in the last 5 minutes, even after a purge, so the
 * restored timeline must never send a channel's old numbers again.
 */
function continueChannels(plan: PhysicalPlan, planned: Planned[]): void {
  const byKey = new Map(planned.map((x) => [participantKey(x.scope), x]));
  for (const up of planned) {
    for (const eId of plan.stages[up.scope.stage].outputs) {
      const edge = plan.edges[eId];
      for (let t = 0; t < plan.stages[edge.toStage].parallelism; t++) {
        const out = `${eId}>${t}`;
        const down = byKey.get(participantKey({ stage: edge.toStage, partition: t }));
        const channel = channelId(eId, up.scope.partition);
        const seq = Math.max(up.progress.outputs[out] ?? 0, up.head.progress?.outputs[out] ?? 0, down?.head.progress?.inputs[channel]?.seq ?? 0);
        if (seq === 0) continue;
        (up.progress.outputs as Record<string, number>)[out] = seq;
        if (down) {
          const ch = down.progress.inputs[channel];
          (down.progress.inputs as Record<string, ChannelProgress>)[channel] = { ...(ch ?? { watermark: MIN_WATERMARK, idle: false }), seq };
        }
      }
    }
  }
}

/** Inter-stage queues, and the source queues the caller feeds again. A queue holding both accepted input and envelopes cannot be purged. */
function purgedStages(plan: PhysicalPlan, refed: ReadonlySet<number>, what: string): number[] {
  const out: number[] = [];
  for (const stage of plan.stages) {
    const fromSource = stage.inputs.some((e) => plan.edges[e].from.kind === 'source');
    const fromStages = stage.inputs.some((e) => plan.edges[e].from.kind !== 'source');
    if (refed.has(stage.id) && !fromSource) throw new RestoreError(what, `refedSourceStages naming source stages`, `stage ${stage.id} (${stage.name}), which no source feeds`);
    if (fromSource && fromStages && !refed.has(stage.id)) {
      throw new RestoreError(what, 'a job whose source stages take no input from other stages (their queue keeps accepted input, and envelopes of the abandoned timeline cannot be told apart)', `stage ${stage.id} (${stage.name}) fed by both`);
    }
    if (fromStages || refed.has(stage.id)) out.push(stage.id);
  }
  return out;
}

/**
 * The snapshot's progress as the restored partition starts from (see the module comment).
 * Adds each source partition's counts to `sources`.
 */
function installedProgress(plan: PhysicalPlan, scope: PartitionScope, snap: PartitionProgress, old: PartitionProgress | undefined, restoreEpoch: number, sources: Record<string, RestoredSource>, what: string): PartitionProgress {
  const inputs: Record<string, ChannelProgress> = { ...snap.inputs };
  const replay: Record<string, number> = {};
  for (const e of plan.stages[scope.stage].inputs) {
    const edge = plan.edges[e];
    if (edge.from.kind !== 'source') continue;
    for (const c of channelsInto(plan, edge, scope.partition)) {
      const s = snap.inputs[c];
      const o = old?.inputs[c];
      const position = s?.records ?? 0;
      // A partition a restore marked but did not finish still shows what it consumed before.
      const consumed = old?.replay?.[c] ?? o?.records ?? position;
      const key = sourcePartitionKey(edge.from.source, scope.partition);
      if (consumed < position) throw new RestoreError(what, `a checkpoint at or behind what ${key} consumed (${consumed} records)`, `one at record ${position}`);
      const offset = o?.offset ?? s?.offset;
      inputs[c] = { ...(s ?? { seq: 0, watermark: MIN_WATERMARK, idle: false }), records: position, ...(offset !== undefined ? { offset } : {}) };
      if (consumed > position) replay[c] = consumed;
      sources[key] = { position, replayed: consumed - position, consumed };
    }
  }
  const outputs = { ...snap.outputs };
  for (const [k, n] of Object.entries(old?.outputs ?? {})) if (k.startsWith('sink:')) outputs[k] = Math.max(n, outputs[k] ?? 0);
  const { aligning: _a, held: _h, replay: _r, ...rest } = snap;
  return { ...rest, inputs, outputs, lastBarrier: restoreEpoch, ...(Object.keys(replay).length ? { replay } : {}) };
}

/** The job's transactional sinks (S3 files), bound as the checkpoint task binds them. */
function jobSinks(o: RestoreInPlaceOptions, plan: PhysicalPlan, accounting: AwsAccounting): TransactionalSink[] {
  const nodes = plan.job.sinks().flatMap((n) => (n.spec.kind === 'sink' ? [[n.name, n.spec.sink] as const] : []));
  bindAwsSinks(nodes, { job: plan.job.name, s3: o.clients.s3, dynamodb: o.clients.dynamodb, bucket: o.bucket, tableName: o.tableName, accounting });
  return nodes.flatMap(([, s]) => (isTransactional(s) ? [s] : []));
}

/** PurgeQueue; one already in progress (a restore run again within AWS's 60 s) purges the same messages. */
async function purgeQueue(sqs: SQSClient, url: string, accounting: AwsAccounting): Promise<void> {
  try {
    await sqs.send(new PurgeQueueCommand({ QueueUrl: url }));
    accounting.record('sqs', 'PurgeQueue', { requests: 1 });
  } catch (e) {
    accounting.record('sqs', 'PurgeQueue', { requests: 1, errors: 1 });
    if ((e as { name?: string }).name === 'PurgeQueueInProgress') return;
    throw mapSqsError(e, 'PurgeQueue', url);
  }
}
