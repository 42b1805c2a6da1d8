/**
 * What travels between partitions. One envelope carries a batch of records from one
 * producer partition to one consumer partition over one edge (a channel), with the
 * producer's sequence number and watermark. Consumers drop any envelope at or below
 * the channel's high-water mark, so redeliveries never count twice.
 */
import { type Key, keyToString, type StreamRecord } from '../api/types.ts';

export interface Envelope {
  /** `${edge}:${fromPartition}`: unique per (edge, producer partition); the consumer's dedup scope. */
  readonly channel: string;
  readonly edge: number;
  readonly toPartition: number;
  /** 1, 2, 3, ... per (channel, consumer partition). */
  readonly seq: number;
  /**
   * Source channels fed by a log whose positions increase but are not contiguous
   * (an SQS FIFO SequenceNumber): the position as a decimal string. When present it,
   * not seq, decides what is a redelivery, and gaps are expected.
   */
  readonly offset?: string;
  readonly records: readonly StreamRecord[];
  /**
   * The producer's watermark after these records. On source channels the consumer
   * also derives it from the records (max timestamp - out-of-orderness - 1), so a
   * producer that cannot know it (the ingest function) sends -Infinity.
   */
  readonly watermark: number;
  /** The producer has no data and does not hold event time back. */
  readonly idle?: boolean;
  /**
   * Source channels on AWS: when the ingest function received these records (its clock),
   * or sent this probe. Decides idleness by probe (runtime/idleness.ts).
   */
  readonly arrivedAt?: number;
  /** Source channels on AWS: no records; asks whether the partition has been idle for its source's timeout. */
  readonly probe?: true;
  /** A checkpoint barrier (no records): everything before it on this channel belongs to checkpoint `barrier.epoch`. */
  readonly barrier?: Barrier;
  /**
   * Source channels after an in-place restore on AWS (lib/aws/restore/restore.ts): records the
   * input log replays, consumed before anything of the queue (PartitionProgress.replay).
   * They move the channel's record count, never its offset, and are not logged again.
   */
  readonly replayed?: true;
}

/**
 * Checkpoint barrier `epoch`, injected into every source partition and forwarded on
 * every output channel once a partition has aligned it on all its input channels.
 */
export interface Barrier {
  readonly epoch: number;
  /** The last completed checkpoint: snapshots are deltas against it (0: none). */
  readonly baseEpoch: number;
  /** Participants (`${stage}/${partition}`) asked for a full snapshot. */
  readonly full: readonly string[];
  readonly savepoint: boolean;
  /** Source channels only: per source partition (`${source}#${p}`), the records that precede the barrier. */
  readonly positions?: Readonly<Record<string, number>>;
}

/** A partition's acknowledgement of a barrier, delivered to the checkpoint coordinator after what precedes it. */
export interface BarrierAck {
  readonly epoch: number;
  readonly stage: number;
  readonly partition: number;
  readonly baseEpoch: number;
  readonly snapshot: { readonly key: string; readonly bytes: number; readonly entities: number; readonly full: boolean } | null;
  readonly positions: Readonly<Record<string, number>>;
  readonly alignedAt: number;
  readonly ackedAt: number;
  /** A partition with event-time timers pending: the earliest and its watermark at the barrier (AckTimers). */
  readonly timers?: AckTimers;
}

/** What a partition's ack says about its event-time timers, for the coordinator's wake-up on AWS. */
export interface AckTimers {
  readonly earliest: number;
  readonly watermark: number;
}

/** A committed batch for a sink, named for idempotent delivery. */
export interface SinkDelivery {
  readonly sink: string;
  readonly producer: string;
  readonly seq: number;
  readonly records: readonly unknown[];
  /**
   * Checkpointed runs: the last barrier the producer processed before these records, so
   * a transactional sink publishes them with the first checkpoint above it.
   */
  readonly afterBarrier?: number;
}

/**
 * User code that threw past its retries, parked with its error: a record (channel, seq,
 * index, offset, record), or a timer or watermark callback (timer / watermark).
 */
export interface DeadLetter {
  /** The operator whose code threw (a chained one may throw on what another emitted). */
  readonly operator: string;
  /** Records: the input channel, envelope and position of the record in it. */
  readonly channel?: string;
  readonly seq?: number;
  readonly index?: number;
  /** Records from a log-fed source channel (on AWS the SQS SequenceNumber of the record's message): where to find it in the input. */
  readonly offset?: string;
  /** Records: the record as it entered the stage. */
  readonly record?: StreamRecord;
  /** A timer whose callback (or what it emitted) threw: it counts as consumed and will not fire again. */
  readonly timer?: DeadTimer;
  /** An onWatermark callback that threw at this watermark. */
  readonly watermark?: number;
  readonly error: string;
  /** The stack of what user code threw, where the runtime kept it. */
  readonly stack?: string;
  readonly attempts: number;
}

export interface DeadTimer {
  /** The operator that owns the timer. */
  readonly operator: string;
  readonly domain: 'event' | 'processing';
  readonly time: number;
  readonly key: Key;
  /** The timer's namespace: for window operators, the window. */
  readonly namespace: string;
  readonly consumed: true;
}

/**
 * Identity of a dead letter within its stage partition (a redelivered outbox may carry
 * it twice). Not unique across partitions: a channel's sequence numbers count per
 * consumer partition, so two partitions' letters can share channel, seq and index.
 */
export function deadLetterId(d: DeadLetter): string {
  if (d.timer) return `${d.operator}/timer/${d.timer.operator}/${d.timer.domain}/${d.timer.time}/${keyToString(d.timer.key)}/${d.timer.namespace}`;
  if (d.watermark !== undefined) return `${d.operator}/watermark/${d.watermark}`;
  return `${d.operator}/${d.channel}#${d.offset ?? d.seq}#${d.index}`;
}

/** Identity of a dead letter across a job: its stage partition and deadLetterId. */
export function jobDeadLetterId(stage: number, partition: number, d: DeadLetter): string {
  return `${stage}/${partition}/${deadLetterId(d)}`;
}

export type OutboxEntry =
  | { readonly kind: 'channel'; readonly envelope: Envelope }
  | { readonly kind: 'sink'; readonly delivery: SinkDelivery }
  | { readonly kind: 'deadLetter'; readonly deadLetter: DeadLetter }
  | { readonly kind: 'ack'; readonly ack: BarrierAck };

/**
 * The checkpoint epoch of the dead letter (or sink delivery) at outbox[e]: a partition's
 * outbox puts what it parked before a barrier ahead of that barrier's ack, so the first
 * ack after it names it; after the last ack, the epoch after the partition's last barrier.
 */
export function outboxEpochAt(outbox: readonly OutboxEntry[], e: number, lastBarrier: number): number {
  for (let i = e + 1; i < outbox.length; i++) {
    const entry = outbox[i];
    if (entry.kind === 'ack') return entry.ack.epoch;
  }
  return lastBarrier + 1;
}

/** Order of two decimal position strings (no sign, no leading zeros). */
export function compareOffsets(a: string, b: string): number {
  return a.length !== b.length ? a.length - b.length : a < b ? -1 : a > b ? 1 : 0;
}

/**
 * An envelope's records as columns: a source chunk (embedded sources), or what a
 * partition sends on a channel to another stage (lib/runtime/outputs.ts). The partition
 * applies them without a record object per event; on hash channels the sender's key,
 * key string and key group go with each record, so the receiver need not compute them
 * again. `records` is built on first access (a dead letter, a log, a prefetch) and kept.
 * Columnar envelopes live only inside one process: a partition keeps a plain copy of one
 * it holds (toPlainEnvelope), and JSON (the outbox in DynamoDB, SQS bodies) sees an
 * ordinary envelope, so whatever stores, clones or encodes envelopes sees the plain form.
 */
export interface RecordColumns {
  readonly values: readonly unknown[];
  readonly timestamps: readonly number[];
  /** The largest timestamp (on source channels, the source watermark's input). */
  readonly maxTimestamp: number;
  /** Hash channels: each record's key (absent on other channels, whose records carry none). */
  readonly keys?: readonly Key[];
  /** Hash channels: keyToString of each key. */
  readonly keyStrings?: readonly string[];
  /** Hash channels: the key group of each key (keyGroupOfString with the job's maxParallelism). */
  readonly keyGroups?: readonly number[];
}

type EnvelopeHead = Omit<Envelope, 'records'>;

/**
 * A source chunk whose timestamps are read when its partition applies it, in the same pass
 * as the chain (lib/local/source-feed.ts): each event's memory is touched once, not by a
 * timestamp pass and again by the chain. `stamp` reads every event's timestamp (events
 * that cannot become records are taken out of the values, in place, and reported by the
 * source) and returns the columns; it runs once, later calls return the same columns.
 * `emit`, when given, receives each accepted event as it is stamped, `at.index` set to
 * its index among the accepted ones first; if `emit` throws, `failed` gets the error
 * (`at.index` stays on that event) and the rest is stamped without emit, so that the
 * columns are complete and the source's accounting is done once. What `stamp` itself
 * throws comes from that accounting (the source's callbacks), never from `emit`.
 */
export interface SourceStamp {
  readonly stamped: boolean;
  stamp(emit?: (value: unknown, timestamp: number) => void, at?: { index: number }, failed?: (error: unknown) => void): RecordColumns;
}

/** A class, not a literal with a getter: V8 builds those in its runtime, at ~10x the cost. */
class ColumnarEnvelope implements Envelope {
  readonly channel: string;
  readonly edge: number;
  readonly toPartition: number;
  readonly seq: number;
  readonly watermark: number;
  readonly idle: boolean | undefined;
  /** recordCount: fixed when made (a source chunk not stamped yet: its events, rejected ones included), so that queue accounting adds and removes the same. */
  readonly size: number;
  #columns: RecordColumns | undefined;
  readonly #stamp: SourceStamp | undefined;
  #records: StreamRecord[] | undefined;

  constructor(head: EnvelopeHead, columns: RecordColumns | undefined, stamp: SourceStamp | undefined, size: number) {
    this.channel = head.channel;
    this.edge = head.edge;
    this.toPartition = head.toPartition;
    this.seq = head.seq;
    this.watermark = head.watermark;
    this.idle = head.idle;
    this.size = size;
    this.#columns = columns;
    this.#stamp = stamp;
  }

  get columns(): RecordColumns {
    return (this.#columns ??= this.#stamp!.stamp());
  }

  /** The source chunk's stamp while it has not run (undefined otherwise). */
  get pendingStamp(): SourceStamp | undefined {
    return this.#columns === undefined && this.#stamp !== undefined && !this.#stamp.stamped ? this.#stamp : undefined;
  }

  /** The records as the record path builds them: `{value, timestamp}`, and `key` (own, even if undefined) on hash channels. */
  get records(): readonly StreamRecord[] {
    if (this.#records === undefined) {
      const { values, timestamps, keys } = this.columns;
      const records: StreamRecord[] = new Array(values.length);
      if (keys) for (let i = 0; i < values.length; i++) records[i] = { value: values[i], timestamp: timestamps[i], key: keys[i] };
      else for (let i = 0; i < values.length; i++) records[i] = { value: values[i], timestamp: timestamps[i] };
      this.#records = records;
    }
    return this.#records;
  }

  toJSON(): Envelope {
    return toPlainEnvelope(this);
  }

  /** console.log and util.inspect (logs, test diffs) show the plain form too. */
  [Symbol.for('nodejs.util.inspect.custom')](): Envelope {
    return toPlainEnvelope(this);
  }
}

/** An envelope over columns (at least one record; keyed columns all as long as values). */
export function columnarEnvelope(head: EnvelopeHead, columns: RecordColumns): Envelope {
  return new ColumnarEnvelope(head, columns, undefined, columns.values.length);
}

/** An envelope over a source chunk of `size` events, stamped when applied (or when its columns or records are first read). */
export function stampedOnApplyEnvelope(head: EnvelopeHead, stamp: SourceStamp, size: number): Envelope {
  return new ColumnarEnvelope(head, undefined, stamp, size);
}

/** The stamp of a source chunk that has not been stamped yet (undefined for any other envelope). */
export function pendingStampOf(env: Envelope): SourceStamp | undefined {
  return env instanceof ColumnarEnvelope ? env.pendingStamp : undefined;
}

/** The columns of an envelope made by columnarEnvelope (undefined for any other). */
export function columnsOf(env: Envelope): RecordColumns | undefined {
  return env instanceof ColumnarEnvelope ? env.columns : undefined;
}

/** An ordinary envelope (own data properties only) with the same content: what may be stored or cloned. */
export function toPlainEnvelope(env: Envelope): Envelope {
  if (!(env instanceof ColumnarEnvelope)) return env;
  return { channel: env.channel, edge: env.edge, toPartition: env.toPartition, seq: env.seq, records: env.records, watermark: env.watermark, idle: env.idle };
}

/**
 * How many records an envelope carries, without materialising columnar ones (a source
 * chunk not stamped yet: its events, the ones it will reject included, for as long as it lives).
 */
export function recordCount(env: Envelope): number {
  return env instanceof ColumnarEnvelope ? env.size : env.records.length;
}

/** Records on the channel entries of an outbox: what a batch sent downstream. */
export function channelRecords(outbox: readonly OutboxEntry[]): number {
  let n = 0;
  for (const e of outbox) if (e.kind === 'channel') n += recordCount(e.envelope);
  return n;
}
