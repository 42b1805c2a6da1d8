/**
 * Source readers for the embedded runtime and the partitioner that turns read
 * events into envelopes: timestamps, per-partition watermarks (bounded
 * out-of-orderness), idleness, and the final +infinity watermark of a bounded input.
 */
import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { validateWithSchema, type SourceBinding, type SourceDef } from '../api/sources.ts';
import { type Clock, MAX_WATERMARK, MIN_WATERMARK, type StreamRecord } from '../api/types.ts';
import { FieldError } from '../errors.ts';
import { channelId } from '../graph/compile.ts';
import { extrapolatedWatermark } from '../runtime/idleness.ts';
import { checkEventTime } from '../transport/ingest-validation.ts';
import { type Barrier, columnarEnvelope, type Envelope, type RecordColumns, type SourceStamp, stampedOnApplyEnvelope } from '../transport/envelope.ts';

/** An event a source could not turn into a record (bad line, bad timestamp). Counted and reported, never dropped silently. */
export interface RejectedInput {
  readonly source: string;
  readonly position: string;
  readonly error: string;
}

/** What a reader's pull returns. */
export interface PullResult {
  readonly events: unknown[];
  readonly done: boolean;
  readonly rejected?: RejectedInput[];
  readonly positions?: string[];
}

export interface SourceReader {
  /**
   * Up to `max` events; `done` once a bounded source is exhausted. `positions`, when
   * given, names where each event came from (file:line) for error reports. The events
   * array is a fresh one, the caller's to keep and change (it may become a chunk's column).
   * Readers of memory answer synchronously, the others with a promise.
   */
  pull(max: number): PullResult | Promise<PullResult>;
  readonly bounded: boolean;
  close?(): void;
  /**
   * Replayable readers (file, items, generator): how far the reader has read, in its own
   * units (file line, item index, generator n), and a way to start again from there.
   * A checkpoint records the cursor at its barrier; a restore seeks back to it.
   */
  cursor?(): number;
  seek?(cursor: number): void;
  /**
   * The reader answers pull() synchronously (memory): the feed then pulls one chunk at a
   * time, and each pull's fresh array becomes a chunk's column without a copy.
   */
  readonly synchronous?: boolean;
}

class ItemsReader implements SourceReader {
  readonly bounded = true;
  readonly synchronous = true;
  private i = 0;
  constructor(private readonly items: readonly unknown[]) {}
  cursor(): number {
    return this.i;
  }
  seek(cursor: number): void {
    this.i = cursor;
  }
  pull(max: number): PullResult {
    const events = this.items.slice(this.i, this.i + max);
    this.i += events.length;
    return { events, done: this.i >= this.items.length };
  }
}

/** A generator's generateBatch returned something else than the events asked for. */
export class GeneratorBatchError extends FieldError {
  readonly code = 'SOURCE_GENERATOR_BATCH';
  constructor(source: string, start: number, end: number, received: unknown) {
    super(
      `source "${source}": generateBatch(${start}, ${end})`,
      `an array of ${end - start} events`,
      Array.isArray(received) ? `an array of ${received.length}` : `${received === null ? 'null' : typeof received}`,
    );
  }
}

class GeneratorReader implements SourceReader {
  readonly bounded: boolean;
  readonly synchronous = true;
  private n = 0;
  private startedAt?: number;
  constructor(
    private readonly gen: { generate: (n: number) => unknown; generateBatch?: (start: number, end: number) => unknown[]; count?: number; ratePerSec?: number },
    private readonly clock: Clock,
    private readonly source: string,
  ) {
    this.bounded = gen.count !== undefined;
  }
  cursor(): number {
    return this.n;
  }
  seek(cursor: number): void {
    this.n = cursor;
  }
  pull(max: number): PullResult {
    let limit = this.gen.count ?? Number.POSITIVE_INFINITY;
    if (this.gen.ratePerSec) {
      this.startedAt ??= this.clock.now();
      limit = Math.min(limit, Math.floor(((this.clock.now() - this.startedAt) * this.gen.ratePerSec) / 1000));
    }
    const start = this.n;
    const end = Math.max(start, Math.min(limit, start + max));
    if (this.gen.generateBatch !== undefined && end > start) {
      // One call for the pull; a throw leaves the cursor at start (nothing of it was read).
      const events = this.gen.generateBatch(start, end);
      if (!Array.isArray(events) || events.length !== end - start) throw new GeneratorBatchError(this.source, start, end, events);
      this.n = end;
      return { events, done: this.gen.count !== undefined && end >= this.gen.count };
    }
    const events: unknown[] = new Array(end - start);
    // Locals in the loop (no field write per event); a throw leaves the cursor at the event that threw, as before.
    const gen = this.gen;
    let n = start;
    try {
      for (; n < end; n++) events[n - start] = gen.generate(n);
    } finally {
      this.n = n;
    }
    return { events, done: this.gen.count !== undefined && n >= this.gen.count };
  }
}

class FileReader implements SourceReader {
  readonly bounded = true;
  private lines?: AsyncIterator<string>;
  private lineNo = 0;
  /** Lines to skip on open (a restore: line numbers are the positions). */
  private skipTo = 0;
  constructor(
    private readonly path: string,
    private readonly source: string,
  ) {}
  cursor(): number {
    return this.lineNo;
  }
  seek(cursor: number): void {
    if (this.lines) throw new Error('FileReader.seek after the first pull');
    this.skipTo = cursor;
  }
  async pull(max: number): Promise<PullResult> {
    if (!this.lines) {
      this.lines = createInterface({ input: createReadStream(this.path), crlfDelay: Infinity })[Symbol.asyncIterator]();
      while (this.lineNo < this.skipTo && !(await this.lines.next()).done) this.lineNo++;
    }
    const events: unknown[] = [];
    const positions: string[] = [];
    const rejected: RejectedInput[] = [];
    while (events.length < max) {
      const next = await this.lines.next();
      if (next.done) return { events, done: true, rejected, positions };
      this.lineNo++;
      const line = next.value.trim();
      if (!line) continue;
      try {
        events.push(JSON.parse(line));
        positions.push(`${this.path}:${this.lineNo}`);
      } catch (e) {
        rejected.push({ source: this.source, position: `${this.path}:${this.lineNo}`, error: `expected one JSON value per line: ${(e as Error).message}` });
      }
    }
    return { events, done: false, rejected, positions };
  }
}

/** Events accepted at the ingestion endpoint wait here until the scheduler pulls them. */
export class IngestBuffer implements SourceReader {
  readonly bounded = false;
  readonly synchronous = true;
  private buffer: unknown[] = [];
  private head = 0;
  pull(max: number): PullResult {
    const events = this.buffer.slice(this.head, this.head + max);
    this.head += events.length;
    if (this.head > 4096 && this.head * 2 > this.buffer.length) {
      this.buffer = this.buffer.slice(this.head);
      this.head = 0;
    }
    return { events, done: false };
  }
  push(events: readonly unknown[]): void {
    for (const e of events) this.buffer.push(e);
  }
  get size(): number {
    return this.buffer.length - this.head;
  }
}

export function createReader(binding: SourceBinding<unknown>, source: string, clock: Clock): SourceReader {
  switch (binding.kind) {
    case 'items':
      return new ItemsReader(binding.items);
    case 'generator':
      return new GeneratorReader(binding, clock, source);
    case 'file':
      return new FileReader(binding.path, source);
    case 'ingest':
      return new IngestBuffer();
  }
}

/** Validate an event and read its timestamp; an error message when it cannot become a record. */
export function toRecord(def: SourceDef<any>, event: unknown, clock: Clock): StreamRecord | string {
  const invalid = validateWithSchema(def.schema, event);
  if (invalid) return invalid;
  let timestamp: unknown;
  try {
    timestamp = def.timestamp ? def.timestamp(event) : clock.now();
  } catch (e) {
    return `timestamp: the extractor threw: ${(e as Error).message}`;
  }
  if (typeof timestamp !== 'number' || !Number.isFinite(timestamp)) return `timestamp: expected a finite number of epoch milliseconds, received ${JSON.stringify(timestamp) ?? String(timestamp)} (${typeof timestamp})`;
  return { value: event, timestamp };
}

/**
 * toRecord for an event arriving at an ingestion endpoint (the embedded HTTP server and
 * the AWS ingest function alike), at `arrival`: its event time must also be an integer
 * within the source's maxFutureMs of arrival. Only there: a file or a log replayed later
 * has no arrival to be measured against. (The endpoints bound its depth before this.)
 */
export function toIngestRecord(def: SourceDef<any>, event: unknown, clock: Clock, arrival = clock.now()): StreamRecord | string {
  const r = toRecord(def, event, clock);
  if (typeof r === 'string') return r;
  return checkEventTime(r.timestamp, arrival, def.maxFutureMs) ?? r;
}

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
