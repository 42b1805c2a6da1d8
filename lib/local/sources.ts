/**
 * The partitioner that turns a source's read events (lib/transport/sources.ts) into
 * envelopes for the embedded runtime: per-partition watermarks (bounded
 * out-of-orderness), idleness, and the final +infinity watermark of a bounded input.
 */
import type { SourceDef } from '../api/sources.ts';
import { type Clock, MAX_WATERMARK, MIN_WATERMARK, type StreamRecord } from '../api/types.ts';
import { channelId } from '../graph/compile.ts';
import { extrapolatedWatermark } from '../runtime/idleness.ts';
import { type Barrier, columnarEnvelope, type Envelope, type RecordColumns, type SourceStamp, stampedOnApplyEnvelope } from '../transport/envelope.ts';

interface PartitionCursor {
  seq: number;
  maxTimestamp: number;
  watermark: number;
  lastDataAt: number;
  idle: boolean;
  /** Idle and advancing: when its last idle envelope went out. */
  idleAt: number;
  /** Records sent to this partition so far: its log position. */
  records: number;
}

/** What a restore tells a partitioner about one source partition (from the restored source-stage partition). */
export interface PartitionCursorState {
  readonly seq: number;
  readonly watermark: number;
  readonly idle: boolean;
  readonly records: number;
}

/**
 * Spreads a source's records over its partitions in chunks (chunk i goes to
 * partition i mod P: deterministic), and stamps each envelope with the partition's
 * watermark. A source partition is its own producer: channel = `${edge}:${p}`.
 */
export class SourcePartitioner {
  private readonly cursors: PartitionCursor[];
  /** channelId(edge, p) per partition, built once. */
  private readonly channels: string[];
  /** Idleness needs each partition's last data time; without an idle timeout the clock is not read per chunk. */
  private readonly tracksIdleness: boolean;
  private next = 0;

  constructor(
    readonly def: SourceDef<any>,
    readonly edge: number,
    readonly partitions: number,
    private readonly clock: Clock,
    /** The source advances while idle (SourceDef.idleAdvance on a live input): idle envelopes go out again every timeout. */
    private readonly advancesWhileIdle = false,
  ) {
    const now = clock.now();
    this.cursors = Array.from({ length: partitions }, () => ({ seq: 0, maxTimestamp: MIN_WATERMARK, watermark: MIN_WATERMARK, lastDataAt: now, idle: false, idleAt: now, records: 0 }));
    this.channels = Array.from({ length: partitions }, (_, p) => channelId(edge, p));
    this.tracksIdleness = def.watermark.idleTimeoutMs !== undefined;
  }

  /** The partition the next chunk goes to. */
  get nextPartition(): number {
    return this.next;
  }

  /** One envelope for the next partition in turn. */
  envelopeFor(records: StreamRecord[]): Envelope {
    const p = this.next;
    this.next = (this.next + 1) % this.partitions;
    return this.envelopeTo(p, records);
  }

  /** One envelope of columns (at least one record) for the next partition in turn. */
  envelopeOfColumns(columns: RecordColumns): Envelope {
    const p = this.next;
    this.next = (this.next + 1) % this.partitions;
    const c = this.advance(p, columns.maxTimestamp, columns.values.length);
    return columnarEnvelope({ channel: this.channels[p], edge: this.edge, toPartition: p, seq: ++c.seq, watermark: c.watermark, idle: c.idle || undefined }, columns);
  }

  /**
   * One envelope of a chunk of `size` events for the next partition in turn, stamped when
   * applied (SourceStamp): its watermark is the partition's so far, and the partition
   * derives the chunk's own from its records, as on every source channel. Once stamped,
   * recordStamped moves the partition's cursor.
   */
  envelopeToStamp(stamp: SourceStamp, size: number): Envelope {
    const p = this.next;
    this.next = (this.next + 1) % this.partitions;
    const c = this.cursors[p];
    // Sent data: the partition is active from now (a chunk all of whose events are rejected counts too).
    if (this.tracksIdleness) c.lastDataAt = this.clock.now();
    c.idle = false;
    return stampedOnApplyEnvelope({ channel: this.channels[p], edge: this.edge, toPartition: p, seq: ++c.seq, watermark: c.watermark, idle: c.idle || undefined }, stamp, size);
  }

  /** A chunk sent to partition p was stamped: `count` records, the largest timestamp `max`. */
  recordStamped(p: number, max: number, count: number): void {
    const c = this.cursors[p];
    if (max > c.maxTimestamp) c.maxTimestamp = max;
    const wm = c.maxTimestamp - this.def.watermark.maxOutOfOrdernessMs - 1;
    if (wm > c.watermark) c.watermark = wm;
    c.records += count;
  }

  /** One envelope for partition p (a replay of its logged records). */
  envelopeTo(p: number, records: StreamRecord[]): Envelope {
    let max = MIN_WATERMARK;
    for (const r of records) if (r.timestamp > max) max = r.timestamp;
    this.advance(p, max, records.length);
    return this.make(p, records);
  }

  /** Partition p's cursor after `count` more records whose largest timestamp is `max`. */
  private advance(p: number, max: number, count: number): PartitionCursor {
    const c = this.cursors[p];
    if (this.tracksIdleness) c.lastDataAt = this.clock.now();
    c.idle = false;
    this.recordStamped(p, max, count);
    return c;
  }

  /** Records sent to each partition so far (the positions a barrier carries). */
  positions(): number[] {
    return this.cursors.map((c) => c.records);
  }

  /** Barrier envelopes, one per partition, after everything sent so far. */
  barrierEnvelopes(barrier: Omit<Barrier, 'positions'>): Envelope[] {
    // A literal with make()'s fields in the same order (not a spread): barrier envelopes then
    // share one shape with the runtime's forwarded ones, and the code that handles both stays optimised.
    return this.cursors.map((c, p) => {
      const b: Barrier = { epoch: barrier.epoch, baseEpoch: barrier.baseEpoch, full: barrier.full, savepoint: barrier.savepoint, positions: { [`${this.def.name}#${p}`]: c.records } };
      return { channel: this.channels[p], edge: this.edge, toPartition: p, seq: ++c.seq, records: [], watermark: c.watermark, idle: c.idle || undefined, barrier: b };
    });
  }

  /** Continue from a checkpoint: sequence numbers, watermarks and positions as of its barrier. */
  restore(states: readonly PartitionCursorState[], next: number): void {
    const now = this.clock.now();
    states.forEach((st, p) => {
      const c = this.cursors[p];
      c.seq = st.seq;
      c.watermark = st.watermark;
      // The watermark came from max timestamp - delay - 1; keep deriving it the same way.
      c.maxTimestamp = Number.isFinite(st.watermark) ? st.watermark + this.def.watermark.maxOutOfOrdernessMs + 1 : st.watermark;
      c.idle = st.idle;
      c.records = st.records;
      c.lastDataAt = now;
    });
    this.next = next % this.partitions;
  }

  /**
   * Envelopes marking partitions idle that received nothing for the idle timeout. An
   * advancing source sends them again every timeout while the partition stays idle, each
   * with the watermark extrapolated to now (runtime/idleness.ts), so event time keeps
   * moving when every partition is silent.
   */
  idleEnvelopes(): Envelope[] {
    const timeout = this.def.watermark.idleTimeoutMs;
    if (timeout === undefined) return [];
    const now = this.clock.now();
    const out: Envelope[] = [];
    this.cursors.forEach((c, p) => {
      if (c.watermark >= MAX_WATERMARK) return;
      const first = !c.idle && now - c.lastDataAt >= timeout;
      if (!first && !(this.advancesWhileIdle && c.idle && now - c.idleAt >= timeout)) return;
      c.idle = true;
      c.idleAt = now;
      if (!this.advancesWhileIdle) return void out.push(this.make(p, []));
      const watermark = extrapolatedWatermark(c.watermark, c.lastDataAt, now);
      out.push({ channel: this.channels[p], edge: this.edge, toPartition: p, seq: ++c.seq, records: [], watermark, idle: true, arrivedAt: now });
    });
    return out;
  }

  /** End of a bounded input: every partition's watermark goes to +infinity, so every window fires. */
  finalEnvelopes(): Envelope[] {
    return this.cursors.map((c, p) => {
      c.watermark = MAX_WATERMARK;
      c.idle = false;
      return this.make(p, []);
    });
  }

  private make(p: number, records: StreamRecord[]): Envelope {
    const c = this.cursors[p];
    return { channel: this.channels[p], edge: this.edge, toPartition: p, seq: ++c.seq, records, watermark: c.watermark, idle: c.idle || undefined };
  }
}
