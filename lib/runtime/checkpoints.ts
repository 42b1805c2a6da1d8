/**
 * Barrier alignment in the runtime core. Barrier `e` arrives once on every input
 * channel; a channel that delivered it is blocked: its later envelopes are held in the
 * partition's committed progress (their positions consumed, so a crash loses nothing)
 * until the barrier has come on every expected channel. Then the partition, in one
 * commit: writes the snapshot object (state as of the barrier), forwards the barrier
 * on every output channel after the records that precede it, and puts its ack in the
 * outbox behind them. The held envelopes follow, in arrival order.
 *
 * A barrier above the one being aligned means that epoch was given up before all its
 * barriers went out (a coordinator restart): the old alignment is dropped, its held
 * envelopes are applied, and the new barrier starts over. Barriers at or below the last
 * snapshotted epoch are stale and ignored.
 */
import { participantKey, sourcePartitionKey } from '../checkpoint/protocol.ts';
import { encodeSnapshot, snapshotKey } from '../checkpoint/snapshot.ts';
import type { BlobStore } from '../checkpoint/storage.ts';
import { channelId, type PhysicalPlan } from '../graph/compile.ts';
import type { ChannelProgress, PartitionProgress, PartitionScope, StateBackend, TimerEntry, TrackingUpdate } from '../state/backend.ts';
import type { StateTxn } from '../state/txn.ts';
import type { Barrier, Envelope, OutboxEntry } from '../transport/envelope.ts';
import { MAX_WATERMARK } from '../api/types.ts';
import { buildSnapshot, type DirtyEntity, keyGroupsOf, PresentEntities } from './snapshots.ts';

interface Aligning {
  barrier: Barrier;
  arrived: Record<string, { seq: number; offset?: string; records?: number }>;
  startedAt: number;
  positions: Record<string, number>;
}

/** The partition's progress as the runtime mutates it between commits. */
export interface MutableProgress {
  inputs: Record<string, ChannelProgress>;
  outputs: Record<string, number>;
  outputWatermark: number;
  outputIdle: boolean;
  lastBarrier?: number;
  aligning?: Aligning;
  held?: Envelope[];
  replay?: Record<string, number>;
}

/**
 * A copy of the progress to commit. Envelopes are immutable once sealed, so held ones are
 * shared, not cloned: an alignment behind a deep queue holds many, and a deep clone per
 * commit would make every batch pay for all of them.
 */
export function copyProgress(p: MutableProgress): PartitionProgress {
  const inputs: Record<string, ChannelProgress> = {};
  for (const c in p.inputs) inputs[c] = { ...p.inputs[c] };
  const out: MutableProgress = { inputs, outputs: { ...p.outputs }, outputWatermark: p.outputWatermark, outputIdle: p.outputIdle };
  if (p.lastBarrier !== undefined) out.lastBarrier = p.lastBarrier;
  if (p.aligning) out.aligning = { ...p.aligning, arrived: { ...p.aligning.arrived }, positions: { ...p.aligning.positions } };
  if (p.held) out.held = [...p.held];
  if (p.replay) out.replay = { ...p.replay };
  return out;
}

/** What the aligner needs from its partition runtime. */
export interface AlignerHost {
  progress(): MutableProgress;
  now(): number;
  /** Seal buffered records into channel envelopes and sink deliveries (they precede the barrier). */
  sealOutputs(): void;
  push(entry: OutboxEntry): void;
  /** Entities whose timers changed since the last commit. */
  timerEntities(): DirtyEntity[];
  timersOf(entity: string): TimerEntry[];
  allTimerEntities(): DirtyEntity[];
  /** The earliest pending event-time timer and the partition's watermark (the ack reports them: checkpoint wake-ups on AWS). */
  eventTimers(): { readonly earliest: number; readonly watermark: number };
  commit(next: NonNullable<TrackingUpdate['next']>): Promise<void>;
  /** Apply a held envelope (its position is already consumed). */
  take(env: Envelope): Promise<void>;
  prefetch(envs: readonly Envelope[]): Promise<void>;
}

export class BarrierAligner {
  private readonly key: string;
  private readonly keyGroups: number[];
  /** What this partition's last snapshot held (deltas leave out entities that came and went since their base). */
  private readonly present = new PresentEntities();

  constructor(
    private readonly plan: PhysicalPlan,
    private readonly scope: PartitionScope,
    private readonly expected: readonly string[],
    private readonly store: BlobStore,
    private readonly backend: StateBackend,
    private readonly txn: StateTxn,
    private readonly host: AlignerHost,
  ) {
    this.key = participantKey(scope);
    this.keyGroups = keyGroupsOf(scope.partition, plan.stages[scope.stage].parallelism, plan.job.maxParallelism);
  }

  async onBarrier(env: Envelope): Promise<void> {
    const b = env.barrier!;
    const p = this.host.progress();
    if (b.epoch <= (p.lastBarrier ?? 0)) return;
    let a = p.aligning;
    if (a && b.epoch < a.barrier.epoch) return;
    if (a && b.epoch > a.barrier.epoch) {
      const held = p.held ?? [];
      delete p.aligning;
      delete p.held;
      for (const h of held) await this.host.take(h);
      await this.host.take(env);
      return;
    }
    if (!a) a = p.aligning = { barrier: b, arrived: {}, startedAt: this.host.now(), positions: {} };
    if (env.offset === undefined) a.arrived[env.channel] = { seq: env.seq };
    else {
      // A log channel (SQS FIFO): its producers cannot count, so the partition reports the
      // records it consumed on the channel before the barrier as the source position.
      const records = p.inputs[env.channel]?.records ?? 0;
      a.arrived[env.channel] = { seq: env.seq, offset: env.offset, records };
      const edge = this.plan.edges[env.edge];
      if (edge.from.kind === 'source') a.positions[sourcePartitionKey(edge.from.source, this.scope.partition)] = records;
    }
    if (b.positions) Object.assign(a.positions, b.positions);
    if (this.expected.every((c) => a.arrived[c])) await this.complete(a);
  }

  private async complete(a: Aligning): Promise<void> {
    const p = this.host.progress();
    const b = a.barrier;
    const alignedAt = this.host.now();
    this.host.sealOutputs();
    this.forward({ epoch: b.epoch, baseEpoch: b.baseEpoch, full: b.full, savepoint: b.savepoint });

    // The cut: each input channel at its barrier, outputs including the forwarded barriers.
    const inputs: Record<string, ChannelProgress> = {};
    for (const [c, ch] of Object.entries(p.inputs)) {
      const at = a.arrived[c];
      if (!at) inputs[c] = { ...ch };
      else {
        const { offset: _drop, records: _count, ...rest } = ch;
        inputs[c] = { ...rest, seq: at.seq, ...(at.offset !== undefined ? { offset: at.offset } : {}), ...(at.records !== undefined ? { records: at.records } : {}) };
      }
    }
    const cut: PartitionProgress = { inputs, outputs: { ...p.outputs }, outputWatermark: p.outputWatermark, outputIdle: p.outputIdle, lastBarrier: b.epoch };
    const full = b.baseEpoch === 0 || b.full.includes(this.key);
    const object = await buildSnapshot({
      job: this.scope.job,
      scope: this.scope,
      epoch: b.epoch,
      baseEpoch: b.baseEpoch,
      full,
      progress: cut,
      backend: this.backend,
      txn: this.txn,
      keyGroups: this.keyGroups,
      writes: this.txn.writes(),
      timerEntities: this.host.timerEntities(),
      timersOf: (e) => this.host.timersOf(e),
      allTimerEntities: () => this.host.allTimerEntities(),
      aliveAtBase: this.present.at(b.baseEpoch),
    });
    this.present.update(object);
    const bytes = encodeSnapshot(object);
    const key = snapshotKey(this.scope.job, this.scope.stage, this.scope.partition, b.epoch, bytes);
    await this.store.put(key, bytes);
    const timers = this.host.eventTimers();
    this.host.push({
      kind: 'ack',
      ack: {
        epoch: b.epoch,
        stage: this.scope.stage,
        partition: this.scope.partition,
        baseEpoch: b.baseEpoch,
        snapshot: { key, bytes: bytes.length, entities: object.entities.length, full },
        positions: a.positions,
        alignedAt,
        ackedAt: this.host.now(),
        // Only a partition with event-time timers pending: what the coordinator may wake up for.
        ...(timers.earliest < MAX_WATERMARK ? { timers } : {}),
      },
    });
    p.lastBarrier = b.epoch;
    delete p.aligning;
    // The held envelopes stay in the progress this commit writes (their positions are
    // consumed): a crash before the next commit finds them there (PartitionRuntime applies
    // held envelopes left without an alignment first), not dropped as duplicates.
    await this.host.commit({ after: b.epoch, dropBefore: b.baseEpoch });
    const held = p.held ?? [];
    delete p.held;
    if (held.length) {
      await this.host.prefetch(held);
      for (const h of held) await this.host.take(h);
    }
  }

  /** The barrier on every output channel, in order after what the partition sent before it. */
  private forward(barrier: Barrier): void {
    const p = this.host.progress();
    const self = this.scope.partition;
    const stage = this.plan.stages[this.scope.stage];
    for (const eId of stage.outputs) {
      const edge = this.plan.edges[eId];
      const targetP = this.plan.stages[edge.toStage].parallelism;
      for (let t = 0; t < targetP; t++) {
        if (edge.partitioning !== 'hash' && t !== self % targetP) continue;
        const seq = (p.outputs[`${eId}>${t}`] ?? 0) + 1;
        p.outputs[`${eId}>${t}`] = seq;
        this.host.push({
          kind: 'channel',
          envelope: { channel: channelId(eId, self), edge: eId, toPartition: t, seq, records: [], watermark: p.outputWatermark, idle: p.outputIdle || undefined, barrier },
        });
      }
    }
  }
}
