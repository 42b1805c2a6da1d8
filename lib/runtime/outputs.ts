/**
 * A partition's outputs between two commits: records buffered per edge and target
 * partition, sealed into sequenced channel envelopes (with the output watermark) at each
 * watermark advance and at commit, and one sequenced delivery per sink.
 *
 * Channel records are buffered as columns (values, timestamps; on hash edges also the
 * key, its string form and key group, computed once here) and sealed into columnar
 * envelopes (lib/transport/envelope.ts): no record object per record, and the receiver
 * sets its current key from the carried key string and key group.
 *
 * On a combined edge (StageEdge.combine: the hash edge into a window that pre-aggregates,
 * lib/operators/window-combiner.ts) a buffer holds one partial aggregate per (key, pane)
 * instead of records: a record of a (key, pane) already in the buffer is added to its
 * partial. A buffer is sealed whenever the watermark moves, so its records all meet the
 * same watermark downstream, which is what makes one partial decide as its records would.
 */
import { type Key, keyToString } from '../api/types.ts';
import { channelId, type PhysicalPlan, type StageEdge, type StagePlan } from '../graph/compile.ts';
import { keyGroupOfString, partitionOfKeyGroup } from '../graph/keygroups.ts';
import { columnarEnvelope, type OutboxEntry } from '../transport/envelope.ts';
import { InvariantError } from '../errors.ts';
import type { Push } from './context.ts';
import { ChannelBuffer } from './channel-buffer.ts';
import type { MutableProgress } from './checkpoints.ts';
import { combiningSender, type FailureOf } from './combining-sender.ts';

/** No key seen yet (a key selector may return anything, undefined included). */
const NO_KEY = Symbol('no key');

/** A sink's records between two seals. */
export interface SinkSlot {
  readonly sink: string;
  records: unknown[];
}

/** One output edge of the stage (bound once): per target partition, its open buffer. */
class EdgeOutput {
  readonly keyed: boolean;
  readonly targetParallelism: number;
  /** Per target partition (undefined: nothing since the last seal). */
  readonly buffers: (ChannelBuffer | undefined)[];
  /** Per target partition, its buffer between seals (reopened: its arrays keep their room). */
  private readonly kept: (ChannelBuffer | undefined)[];

  constructor(
    readonly edge: StageEdge,
    targetParallelism: number,
  ) {
    this.keyed = edge.partitioning === 'hash';
    this.targetParallelism = targetParallelism;
    this.buffers = new Array(targetParallelism).fill(undefined);
    this.kept = new Array(targetParallelism).fill(undefined);
  }

  open(p: number): ChannelBuffer {
    const kept = this.kept[p];
    return (this.buffers[p] = kept !== undefined ? kept.reopen() : (this.kept[p] = new ChannelBuffer(this.keyed)));
  }
}

export class Outputs {
  /** Per output edge of the stage, in stage.outputs order: its buffers. */
  private readonly edgeOutputs: EdgeOutput[];
  /** Some buffer holds records (reset must clear them). */
  private buffered = false;
  /** Per sink, its records since the last seal (a slot bound once by the chain: no lookup per record). */
  private readonly sinkSlots = new Map<string, SinkSlot>();
  /** Slots with records, in the order of their first record since the last seal. */
  private activeSinks: SinkSlot[] = [];
  /** The output watermark or idleness changed: every channel must hear of it. */
  watermarkMoved = false;

  constructor(
    private readonly plan: PhysicalPlan,
    private readonly stage: StagePlan,
    private readonly partition: number,
    private readonly progress: () => MutableProgress,
    private readonly push: (e: OutboxEntry) => void,
    /** Checkpointed runs: sink deliveries carry the last barrier they follow. */
    private readonly tagged: () => boolean,
    /** A combined edge's add() threw: the error that attributes it to the window and the input. */
    private readonly failure: FailureOf,
  ) {
    this.edgeOutputs = stage.outputs.map((e) => new EdgeOutput(plan.edges[e], plan.stages[plan.edges[e].toStage].parallelism));
  }

  /** The slot a sink's records are buffered in (stable for the life of this object). */
  sinkSlot(sink: string): SinkSlot {
    let slot = this.sinkSlots.get(sink);
    if (!slot) this.sinkSlots.set(sink, (slot = { sink, records: [] }));
    return slot;
  }

  toSink(sink: string, value: unknown): void {
    this.pushTo(this.sinkSlot(sink), value);
  }

  pushTo(slot: SinkSlot, value: unknown): void {
    if (slot.records.length === 0) this.activeSinks.push(slot);
    slot.records.push(value);
  }

  /**
   * Where values emitted on `edge` go (bound once by the chain): into the buffer of the
   * target partition; on hash edges with the key, key string and key group, computed here
   * once for routing and for the receiver.
   */
  sender(edge: StageEdge): Push {
    const out = this.edgeOutputs.find((o) => o.edge.id === edge.id);
    if (!out) throw new InvariantError(`stage ${this.stage.name} has no output edge ${edge.id}`);
    const buffers = out.buffers;
    if (!out.keyed) {
      const p = this.partition % out.targetParallelism;
      return (value, timestamp) => {
        const b = buffers[p] ?? this.open(out, p);
        const i = b.count++;
        b.values[i] = value;
        b.timestamps[i] = timestamp;
        if (timestamp > b.maxTimestamp) b.maxTimestamp = timestamp;
      };
    }
    if (edge.combine) {
      const window = this.plan.job.nodes[edge.toNode];
      return combiningSender(edge, window, this.plan.job.maxParallelism, out.targetParallelism, buffers, (p) => this.open(out, p), this.failure);
    }
    const keyOf = edge.key!;
    const maxP = this.plan.job.maxParallelism;
    const targetP = out.targetParallelism;
    // Consecutive records often share a key (a window's number, a hot auction): for a
    // primitive key equal to the last one, its string, key group and partition are the
    // last ones. (Not for arrays: the same array may hold another key by now.)
    let lastKey: unknown = NO_KEY;
    let ks = '';
    let kg = 0;
    let p = 0;
    return (value, timestamp) => {
      const key = keyOf(value) as Key;
      if (key !== lastKey || typeof key === 'object') {
        ks = keyToString(key);
        kg = keyGroupOfString(ks, maxP);
        p = partitionOfKeyGroup(kg, targetP, maxP);
        lastKey = key;
      }
      const b = buffers[p] ?? this.open(out, p);
      const i = b.count++;
      b.values[i] = value;
      b.timestamps[i] = timestamp;
      if (timestamp > b.maxTimestamp) b.maxTimestamp = timestamp;
      b.keys![i] = key;
      b.keyStrings![i] = ks;
      b.keyGroups![i] = kg;
    };
  }

  private open(out: EdgeOutput, p: number): ChannelBuffer {
    this.buffered = true;
    return out.open(p);
  }

  /**
   * Seal the records buffered so far into envelopes carrying the current output
   * watermark. Called before every watermark advance, so the envelopes a partition
   * sends depend only on its input, never on how many envelopes one batch held.
   */
  flushChannels(): void {
    if (!this.buffered && !this.watermarkMoved) return;
    const self = this.partition;
    const progress = this.progress();
    for (const out of this.edgeOutputs) {
      const eId = out.edge.id;
      const targetP = out.targetParallelism;
      const buffers = out.buffers;
      for (let p = 0; p < targetP; p++) {
        if (!out.keyed && p !== self % targetP) continue;
        const b = buffers[p];
        if (b === undefined && !this.watermarkMoved) continue;
        const id = `${eId}>${p}`;
        const seq = (progress.outputs[id] ?? 0) + 1;
        progress.outputs[id] = seq;
        const channel = channelId(eId, self);
        const watermark = progress.outputWatermark;
        const idle = progress.outputIdle || undefined;
        // A buffer without records: a combined edge's records that lay in no window.
        if (b === undefined || b.count === 0) {
          buffers[p] = undefined;
          this.push({ kind: 'channel', envelope: { channel, edge: eId, toPartition: p, seq, records: [], watermark, idle } });
        } else {
          buffers[p] = undefined;
          this.push({ kind: 'channel', envelope: columnarEnvelope({ channel, edge: eId, toPartition: p, seq, watermark, idle }, b.seal()) });
        }
      }
    }
    this.buffered = false;
    this.watermarkMoved = false;
  }

  /** One delivery per sink with what was emitted so far. */
  sealSinks(): void {
    const progress = this.progress();
    for (const slot of this.activeSinks) {
      const { sink, records } = slot;
      slot.records = [];
      const id = `sink:${sink}`;
      const seq = (progress.outputs[id] ?? 0) + 1;
      progress.outputs[id] = seq;
      const tag = this.tagged() ? { afterBarrier: progress.lastBarrier ?? 0 } : {};
      this.push({ kind: 'sink', delivery: { sink, producer: `${this.stage.id}:${this.partition}`, seq, records, ...tag } });
    }
    if (this.activeSinks.length) this.activeSinks = [];
  }

  /** Drop what was not sealed (after a commit everything was). */
  reset(): void {
    if (this.buffered) {
      for (const out of this.edgeOutputs) {
        for (const b of out.buffers) b?.discard();
        out.buffers.fill(undefined);
      }
    }
    this.buffered = false;
    for (const slot of this.activeSinks) slot.records = [];
    if (this.activeSinks.length) this.activeSinks = [];
    this.watermarkMoved = false;
  }
}
