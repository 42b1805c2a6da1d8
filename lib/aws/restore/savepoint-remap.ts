/**
 * A savepoint installed on AWS, into the plan that took it or a changed one (its state
 * descriptors fit: savepointFit). The in-place restore (restore.ts) installs a manifest of
 * the plan it runs, so the savepoint is rewritten into one (for the same plan too, for the
 * sequence numbers below):
 *
 *   - keyed state and timers move by state identity (uid) and key group to the partition
 *     of the new plan that owns them, by the remap both runtimes use
 *     (lib/checkpoint/savepoint-remap.ts); timers name their operator by the new node id;
 *   - channels start fresh (sequence numbers and watermarks), except source channels: each
 *     source partition keeps the record count the savepoint holds, so the input log replays
 *     what followed it. Sources must therefore keep their partitions (same sources, same
 *     source-stage parallelism, same channel numbering): otherwise RestoreError, never a
 *     silent skip of what was consumed after the savepoint;
 *   - one full snapshot object per participant of the new plan, and the manifest, under
 *     `${job}/savepoints/<label>/plans/<fingerprint>/` (deterministic: a restore run again
 *     writes the same bytes), out of the chain's garbage collection.
 *
 * After the install, adoptPlan() moves the coordinator record to the new plan (fingerprint,
 * participants), which restoreInPlace keeps from the old record.
 */
import { MIN_WATERMARK } from '../../api/types.ts';
import { toBytes } from '../../checkpoint/codec.ts';
import { RECORD_NAME } from '../../checkpoint/driver.ts';
import { RestoreError } from '../../checkpoint/driver-errors.ts';
import { participantsOf, planFingerprint } from '../../checkpoint/fingerprint.ts';
import { type ChainLink, type CoordinatorRecord, type Manifest, participantKey, sourcePartitionKey } from '../../checkpoint/protocol.ts';
import { encodeSnapshot, restoreManifest, type SnapshotObject, type SnapshotRow, toSnapshotTimer } from '../../checkpoint/snapshot.ts';
import type { BlobStore, PointerStore } from '../../checkpoint/storage.ts';
import { channelsInto, type PhysicalPlan } from '../../graph/compile.ts';
import { remapState } from '../../checkpoint/savepoint-remap.ts';
import { type ChannelProgress, emptyProgress, type PartitionProgress } from '../../state/backend.ts';
import type { DynamoDbTable } from '../dynamodb/dynamodb-table.ts';
import { type PartitionHead, readHead } from './restore-partition.ts';
import { type AwsRestorePoint, savepointPrefix } from './savepoints.ts';

/** The savepoint as a manifest of `plan`, written beside its copy; its key is what the pointer will name. */
export async function remapSavepoint(o: { blobs: BlobStore; db: DynamoDbTable; plan: PhysicalPlan; point: AwsRestorePoint }): Promise<{ manifest: Manifest; manifestKey: string }> {
  const { plan, point } = o;
  const meta = point.meta;
  if (!meta) throw new RestoreError(point.what, 'a savepoint (a checkpoint restores only into its own plan)', 'a checkpoint');
  const job = plan.job.name;
  const epoch = meta.epoch;
  const participants = participantsOf(plan);

  // Sources keep their partitions: the savepoint's positions name exactly the new plan's source partitions.
  const wanted = participants.flatMap((p) => p.sources.map((s) => sourcePartitionKey(s, p.partition))).sort();
  const saved = Object.keys(meta.positions).sort();
  if (wanted.join('\u0000') !== saved.join('\u0000')) {
    throw new RestoreError(point.what, `a changed job whose sources keep their partitions ([${saved.join(', ')}])`, `source partitions [${wanted.join(', ')}]`);
  }

  const targets = remapState(plan, meta, (await restoreManifest(point.manifest, point.blobs)).values(), point.what);

  const heads = new Map<string, PartitionHead>();
  for (const p of participants) heads.set(participantKey(p), await readHead(o.db, { job, stage: p.stage, partition: p.partition }));
  const progressOf = new Map(participants.map((p) => [participantKey(p), sourceProgress(plan, p, heads.get(participantKey(p))!, meta.positions, epoch, point.what)]));
  continueSequences(plan, heads, progressOf);

  const base = `${savepointPrefix(job, meta.label)}plans/${planFingerprint(plan)}/`;
  const partitions: Record<string, { stage: number; partition: number; chain: ChainLink[] }> = {};
  for (const p of participants) {
    const key = participantKey(p);
    const progress = progressOf.get(key)!;
    const t = targets.get(key) ?? { entities: new Map(), timers: new Map() };
    const entities = [...new Set([...t.entities.keys(), ...t.timers.keys()])].sort();
    const rows: SnapshotRow[] = entities.map((entity) => {
      const f = t.entities.get(entity);
      const timers = t.timers.get(entity) ?? [];
      return [f?.kg ?? timers[0].kg, entity, f ? [...f.fields] : [], timers.map(toSnapshotTimer)];
    });
    const object: SnapshotObject = { format: 1, job, stage: p.stage, partition: p.partition, epoch, baseEpoch: 0, full: true, progress, entities: rows };
    const bytes = encodeSnapshot(object);
    const objectKey = `${base}${p.stage}-${p.partition}.json`;
    await o.blobs.put(objectKey, bytes);
    partitions[key] = { stage: p.stage, partition: p.partition, chain: [{ epoch, key: objectKey, bytes: bytes.byteLength, entities: rows.length, full: true }] };
  }
  const manifest: Manifest = { format: 1, job, fingerprint: planFingerprint(plan), epoch, baseEpoch: 0, createdAt: meta.createdAt, partitions, positions: meta.positions, savepoint: { label: meta.label } };
  const manifestKey = `${base}manifest.json`;
  await o.blobs.put(manifestKey, toBytes(manifest));
  return { manifest, manifestKey };
}

/**
 * Fresh progress; on a source-stage partition its source channels at the savepoint's record
 * counts. The channel must be the one the partition consumed before (its version item names
 * it), or what it consumed after the savepoint could not be replayed.
 */
function sourceProgress(plan: PhysicalPlan, p: { stage: number; partition: number; sources: readonly string[] }, head: PartitionHead, positions: Readonly<Record<string, number>>, epoch: number, what: string): PartitionProgress {
  const inputs: Record<string, ChannelProgress> = {};
  if (p.sources.length) {
    for (const e of plan.stages[p.stage].inputs) {
      const edge = plan.edges[e];
      if (edge.from.kind !== 'source') continue;
      for (const c of channelsInto(plan, edge, p.partition)) {
        if (head.progress && Object.keys(head.progress.inputs).length && !head.progress.inputs[c]) {
          throw new RestoreError(what, `source channel ${c} of ${p.stage}/${p.partition} as the job consumed it before (same source stages and numbering)`, `channels [${Object.keys(head.progress.inputs).join(', ')}]`);
        }
        inputs[c] = { seq: 0, watermark: MIN_WATERMARK, idle: false, records: positions[sourcePartitionKey(edge.from.source, p.partition)] ?? 0 };
      }
    }
  }
  return { ...emptyProgress(), inputs, lastBarrier: epoch };
}

/**
 * Inter-stage channels start fresh, but not at sequence 1: SQS FIFO deduplicates by
 * (target, channel, seq) for 5 minutes (sqs-codec.ts dedupId), so envelopes numbered as
 * the abandoned timeline's were would be dropped as duplicates and leave a gap. Each
 * channel continues above the highest sequence number the table shows for it (the
 * producer's last output, the consumer's last input), on both ends.
 */
function continueSequences(plan: PhysicalPlan, heads: ReadonlyMap<string, PartitionHead>, progressOf: Map<string, PartitionProgress>): void {
  for (const edge of plan.edges) {
    if (edge.from.kind === 'source') continue;
    for (let t = 0; t < plan.stages[edge.toStage].parallelism; t++) {
      for (const c of channelsInto(plan, edge, t)) {
        const producer = `${edge.from.stage}/${Number(c.slice(c.lastIndexOf(':') + 1))}`;
        const consumer = `${edge.toStage}/${t}`;
        // The producer numbers its output per edge and target (runtime/outputs.ts); the consumer per channel.
        const k = `${edge.id}>${t}`;
        const seq = Math.max(heads.get(producer)?.progress?.outputs[k] ?? 0, heads.get(consumer)?.progress?.inputs[c]?.seq ?? 0);
        const out = progressOf.get(producer);
        const inp = progressOf.get(consumer);
        if (seq === 0 || !out || !inp) continue;
        progressOf.set(producer, { ...out, outputs: { ...out.outputs, [k]: seq } });
        progressOf.set(consumer, { ...inp, inputs: { ...inp.inputs, [c]: { seq, watermark: MIN_WATERMARK, idle: false } } });
      }
    }
  }
}

/** The coordinator record continues under `plan` (restoreInPlace keeps the old record's fingerprint and participants). */
export async function adoptPlan(pointers: PointerStore, plan: PhysicalPlan): Promise<void> {
  const fingerprint = planFingerprint(plan);
  for (let attempt = 0; attempt < 5; attempt++) {
    const rec = await pointers.read<CoordinatorRecord>(RECORD_NAME);
    if (!rec || rec.value.fingerprint === fingerprint) return;
    if (await pointers.compareAndSet(RECORD_NAME, rec.version, { ...rec.value, fingerprint, participants: participantsOf(plan) })) return;
  }
  throw new RestoreError('coordinator record', `to move to plan ${fingerprint}`, 'it kept changing (is a coordinator running?)');
}
