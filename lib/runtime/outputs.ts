/**
 * A partition's outputs between two commits: records buffered per edge and target
 * partition, sealed into sequenced channel envelopes (with the output watermark) at each
 * watermark advance and at commit, and one sequenced delivery per sink.
 */
import { type Key, keyToString, type StreamRecord } from '../api/types.ts';
import { channelId, type PhysicalPlan, type StageEdge, type StagePlan } from '../graph/compile.ts';
import { keyGroupOfString, partitionOfKeyGroup } from '../graph/keygroups.ts';
import type { OutboxEntry } from '../transport/envelope.ts';
import type { MutableProgress } from './checkpoints.ts';

/** A sink's records between two seals. */
export interface SinkSlot {
  readonly sink: string;
  records: unknown[];
}

export class Outputs {
  /** Per edge, per target partition: records to send. */
  private buffers = new Map<number, StreamRecord[][]>();
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
  ) {}

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

  send(edge: StageEdge, value: unknown, timestamp: number): void {
    const target = this.plan.stages[edge.toStage];
    let rec: StreamRecord;
    let p: number;
    if (edge.partitioning === 'hash') {
      const key = edge.key!(value) as Key;
      const maxP = this.plan.job.maxParallelism;
      p = partitionOfKeyGroup(keyGroupOfString(keyToString(key), maxP), target.parallelism, maxP);
      rec = { value, timestamp, key };
    } else {
      p = this.partition % target.parallelism;
      rec = { value, timestamp };
    }
    let bufs = this.buffers.get(edge.id);
    if (!bufs) this.buffers.set(edge.id, (bufs = []));
    (bufs[p] ??= []).push(rec);
  }

  /**
   * Seal the records buffered so far into envelopes carrying the current output
   * watermark. Called before every watermark advance, so the envelopes a partition
   * sends depend only on its input, never on how many envelopes one batch held.
   */
  flushChannels(): void {
    const self = this.partition;
    const progress = this.progress();
    for (const eId of this.stage.outputs) {
      const edge = this.plan.edges[eId];
      const targetP = this.plan.stages[edge.toStage].parallelism;
      const bufs = this.buffers.get(eId);
      for (let p = 0; p < targetP; p++) {
        if (edge.partitioning !== 'hash' && p !== self % targetP) continue;
        const records = bufs?.[p];
        if (!records?.length && !this.watermarkMoved) continue;
        const seq = (progress.outputs[`${eId}>${p}`] ?? 0) + 1;
        progress.outputs[`${eId}>${p}`] = seq;
        this.push({
          kind: 'channel',
          envelope: { channel: channelId(eId, self), edge: eId, toPartition: p, seq, records: records ?? [], watermark: progress.outputWatermark, idle: progress.outputIdle || undefined },
        });
      }
    }
    if (this.buffers.size) this.buffers = new Map();
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
    if (this.buffers.size) this.buffers = new Map();
    for (const slot of this.activeSinks) slot.records = [];
    if (this.activeSinks.length) this.activeSinks = [];
    this.watermarkMoved = false;
  }
}
