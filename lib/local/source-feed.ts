/**
 * One source of the embedded runtime: its reader, its partitioner, and in checkpointed
 * runs its log. Pulls events while the source stage has room, turns them into records
 * (rejecting what cannot be read, with its position), logs what is accepted when the
 * source cannot be read again, and injects barriers after everything sent so far.
 */
import type { SourceDef } from '../api/sources.ts';
import type { Clock, StreamRecord } from '../api/types.ts';
import { RestoreError } from '../checkpoint/driver-errors.ts';
import type { Barrier, Envelope, RecordColumns, SourceStamp } from '../transport/envelope.ts';
import { type BarrierEntry, encodeRecords, type LogAppend, type SourceLog } from './input-log.ts';
import { createReader, type PullResult, type RejectedInput, type SourceReader } from '../transport/sources.ts';
import { type PartitionCursorState, SourcePartitioner } from './sources.ts';
import { anyStampable, stampColumns, UNSTORED, withTimestamps } from './stamp-columns.ts';
import { channelId, type PhysicalPlan, type StageEdge } from '../graph/compile.ts';
import type { EmbeddedOptions } from './embedded-options.ts';

/** The log line of a keyed request, given its records' appends (written in the same batch, first). */
export type KeyAppend = (records: readonly LogAppend[]) => LogAppend;

export interface FeedHost {
  readonly clock: Clock;
  /** Records per chunk (read at every chunk: time slicing may change it). */
  readonly batchSize: number;
  /** Whether the source stage's queues have room. */
  room(): boolean;
  /** `arrivedAt`: when the endpoint accepted the chunk's first event (its queue age is the lag). */
  enqueue(env: Envelope, arrivedAt?: number): void;
  rejected(r: RejectedInput): void;
  /** Records accepted from the source (counted once, not again on replay). */
  accepted(n: number): void;
}

export class SourceFeed {
  done = false;
  /** Events read so far (the index of the next one). */
  read = 0;
  /**
   * Logged records still to replay after a restore, per partition: `start` is the log
   * position of records[0]; events accepted during the replay are logged after them and
   * join them here, so each partition's log and its channel keep one order.
   */
  private replay = new Map<number, { start: number; records: StreamRecord[]; i: number }>();
  /** The partition the next chunk accepted during a replay goes to (round-robin). */
  private replayNext = 0;
  /**
   * Chunks are stamped when their partition applies them, in the chain's pass (SourceStamp),
   * in every job where the source allows it:
   * timestamps from the events alone (an extractor, no schema), records not logged (the log
   * needs them before they are sent). A chunk whose events are all rejected is not sent,
   * as before (anyStampable), so partitions' turns and idleness are those of chunks stamped
   * before they are sent; rejections and counts reach the host at the feed's next pull, in
   * input order.
   */
  readonly stampOnApply: boolean;
  /** Chunks sent whose stamping has not been accounted yet, and reader rejections queued behind them, in input order. */
  private unsettled: (SourceChunk | { readonly host: FeedHost; readonly rejected: RejectedInput })[] = [];
  /** When the endpoint accepted events: those before index `end` (in `read`'s count) at `at`, oldest first. */
  private readonly arrivals: { end: number; at: number }[] = [];
  /** Events the endpoint offered so far (the `end` of the next arrival mark). */
  private offered = 0;
  /** Logged requests whose appends wait for the log's fsync, in log order: not sent, not counted, until then. */
  private readonly pending: PendingAccept[] = [];

  constructor(
    readonly def: SourceDef<any>,
    readonly reader: SourceReader,
    readonly partitioner: SourcePartitioner,
    readonly stage: number,
    /** Checkpointed runs: barrier entries always, records too when `logRecords`. */
    readonly log?: SourceLog,
    readonly logRecords = false,
  ) {
    this.stampOnApply = !logRecords && !def.schema && def.timestamp !== undefined;
  }

  /** Replayable readers can seek back to a checkpoint's cursor; others need the log. */
  get replayable(): boolean {
    return this.reader.seek !== undefined && this.reader.cursor !== undefined;
  }

  /** One round of input: true when something was sent. A promise only when the reader answers asynchronously (a file). */
  pull(host: FeedHost): boolean | Promise<boolean> {
    if (this.unsettled.length) this.flush();
    if (this.replay.size) {
      if (!host.room()) return false;
      // One chunk per partition per round, like live input: bounded queues stay bounded.
      for (const [p, r] of this.replay) {
        host.enqueue(this.partitioner.envelopeTo(p, r.records.slice(r.i, r.i + host.batchSize)));
        r.i += host.batchSize;
        if (r.i >= r.records.length) this.replay.delete(p);
      }
      return true;
    }
    if (this.done) return false;
    if (!host.room()) return this.idleOnly(host, false);
    // A chunk per partition per round.
    const want = host.batchSize * this.partitioner.partitions;
    // One partition: the pull is one chunk, taken whole already.
    if (this.reader.synchronous === true && this.partitioner.partitions > 1) return this.pullChunks(host, want);
    const pulled = this.reader.pull(want);
    return pulled instanceof Promise ? pulled.then((r) => this.pulled(r, host)) : this.pulled(pulled, host);
  }

  /**
   * A synchronous reader's round, one pull per chunk: each pull's array is the chunk's
   * (accept takes it without a copy). The same chunks in the same round as one large pull
   * cut into chunks, and idle envelopes once, after all of them, as after that pull.
   */
  private pullChunks(host: FeedHost, want: number): boolean {
    const batch = host.batchSize;
    let progressed = false;
    for (let left = want; left > 0; left -= batch) {
      const asked = Math.min(batch, left);
      const r = this.reader.pull(asked) as PullResult;
      // Counted before take(): the chunk is the pull's array, and stamping removes rejected events from it.
      const read = r.events.length;
      if (this.take(r, host)) return true;
      if (read === 0) break;
      progressed = true;
      if (read < asked) break;
    }
    return this.idleOnly(host, progressed);
  }

  private pulled(r: PullResult, host: FeedHost): boolean {
    // Read after take(), as it always was: a one-chunk pull taken whole has lost its rejected events by then.
    return this.take(r, host) || this.idleOnly(host, r.events.length > 0);
  }

  /** A pull's events and rejections accepted; true when the reader is done (the final envelopes are sent). */
  private take({ events, done, rejected, positions }: PullResult, host: FeedHost): boolean {
    // Behind chunks not stamped yet, a reader's rejections wait for theirs (reports keep the input's order).
    if (rejected) for (const r of rejected) this.unsettled.length ? this.unsettled.push({ host, rejected: r }) : host.rejected(r);
    this.accept(events, positions, host, true);
    if (!done) return false;
    this.done = true;
    for (const env of this.partitioner.finalEnvelopes()) host.enqueue(env);
    return true;
  }

  /** Idle envelopes for partitions that received nothing for the idle timeout. */
  private idleOnly(host: FeedHost, progressed: boolean): boolean {
    for (const env of this.partitioner.idleEnvelopes()) {
      host.enqueue(env);
      progressed = true;
    }
    return progressed;
  }

  /**
   * Events into records, chunks round-robin over the partitions, logged first when this
   * source is logged. Called for pulled events, and directly by the ingestion endpoint of
   * a logged source, so that an event is in the log before its request is answered.
   * `owned`: `events` is this call's to keep (a reader's fresh array): a single chunk
   * becomes the envelope's values column as it is, without a copy.
   */
  accept(events: readonly unknown[], positions: readonly string[] | undefined, host: FeedHost, owned = false, keyed?: KeyAppend): Promise<void> | undefined {
    if (this.logRecords) return this.acceptLogged(events, positions, host, keyed);
    const batch = host.batchSize;
    const marked = this.arrivals.length > 0;
    const total = events.length;
    for (let i = 0; i < total; i += batch) {
      const end = Math.min(i + batch, total);
      const values = owned && i === 0 && end === total ? (events as unknown[]) : events.slice(i, end);
      // A chunk sent unstamped must have a record: one without (all rejected) is stamped
      // here, sends nothing and takes no partition's turn, as when stamped before it is sent.
      if (this.stampOnApply && anyStampable(values, this.def.timestamp!)) {
        const chunk = new SourceChunk(this, host, values, this.read + i, positions, i);
        this.unsettled.push(chunk);
        host.enqueue((chunk.env = this.partitioner.envelopeToStamp(chunk, values.length)), marked ? this.arrivalOf(this.read + i) : undefined);
        continue;
      }
      // Behind chunks not stamped yet, rejections wait for theirs (reports keep the input's order).
      const rejected = this.unsettled.length ? (r: RejectedInput) => this.unsettled.push({ host, rejected: r }) : (r: RejectedInput) => host.rejected(r);
      const columns = stampColumns(this.def, host.clock, values, this.read + i, positions, i, rejected, this.def.schema ? undefined : this.def.timestamp);
      const n = columns.values.length;
      host.accepted(n);
      if (n === 0) continue;
      host.enqueue(this.partitioner.envelopeOfColumns(columns), marked ? this.arrivalOf(this.read + i) : undefined);
    }
    this.read += total;
    return undefined;
  }

  /** `count` events offered by the endpoint at `at` (in the order accept() or the reader will take them). */
  arrived(count: number, at: number): void {
    this.offered += count;
    const last = this.arrivals.at(-1);
    if (last && last.at === at) last.end = this.offered;
    else this.arrivals.push({ end: this.offered, at });
  }

  /** When event `index` arrived (undefined for events the endpoint did not offer); indexes asked only grow. */
  private arrivalOf(index: number): number | undefined {
    const a = this.arrivals;
    while (a.length && a[0].end <= index) a.shift();
    return a.length ? a[0].at : undefined;
  }

  /** When the oldest offered event not yet read into a chunk arrived (undefined: none waits). */
  oldestUnread(): number | undefined {
    return this.offered > this.read ? this.arrivalOf(this.read) : undefined;
  }

  /**
   * A logged source's events: every chunk is stamped and encoded, then all of them are
   * written to the log in one batch. An event that cannot be encoded, or a write that
   * fails, throws with nothing written, sent or counted: no position and no sequence
   * number is skipped, and later events go on. When the log fsyncs, the chunks wait for
   * it (pending) and only then take sequence numbers and go out; the promise returned
   * settles with them. A failed fsync cuts them off the log (input-log.ts) and drops
   * them with every request behind them: a request answered with an error never reaches
   * the job. During a replay they are logged after the replayed records and queued
   * behind them.
   */
  private acceptLogged(events: readonly unknown[], positions: readonly string[] | undefined, host: FeedHost, keyed?: KeyAppend): Promise<void> | undefined {
    const batch = host.batchSize;
    const total = events.length;
    const rejected = (r: RejectedInput) => host.rejected(r);
    const chunks: RecordColumns[] = [];
    const arrivals: (number | undefined)[] = [];
    const marked = this.arrivals.length > 0;
    for (let i = 0; i < total; i += batch) {
      const columns = stampColumns(this.def, host.clock, events.slice(i, Math.min(i + batch, total)), this.read + i, positions, i, rejected, this.def.schema ? undefined : this.def.timestamp);
      if (columns.values.length) {
        chunks.push(columns);
        arrivals.push(marked ? this.arrivalOf(this.read + i) : undefined);
      }
    }
    this.read += total;
    if (chunks.length === 0) return undefined;
    const parts = this.partitioner.partitions;
    // Behind pending requests, positions and turns continue from the last of them.
    const last = this.pending.at(-1);
    const replaying = last ? last.replaying : this.replay.size > 0;
    let heads: number[];
    let first: number;
    if (last) [heads, first] = [[...last.heads], last.next];
    else {
      heads = this.partitioner.positions();
      if (replaying) for (const [p, r] of this.replay) heads[p] = r.start + r.records.length;
      first = replaying ? this.replayNext : this.partitioner.nextPartition;
    }
    const appends: LogAppend[] = chunks.map((c, k) => {
      const p = (first + k) % parts;
      const at = heads[p];
      heads[p] += c.values.length;
      return { p, at, text: encodeRecords(c.timestamps, c.values) };
    });
    // An Idempotency-Key's line goes first: written without its records, it is dropped when read back (ingest-keys.ts).
    this.log!.appendAll(keyed ? [keyed(appends), ...appends] : appends);
    const entry: PendingAccept = { host, chunks, arrivals, appends, heads, next: (first + chunks.length) % parts, replaying, done: deferred() };
    if (!this.log!.fsyncs) {
      this.release(entry);
      return undefined;
    }
    this.pending.push(entry);
    // Handled here too: a caller that does not wait (a test offering directly) leaves no unhandled rejection.
    entry.done.promise.catch(() => undefined);
    this.log!.durable().then(
      () => this.releaseThrough(entry),
      (e: Error) => this.dropPending(e),
    );
    return entry.done.promise;
  }

  /** A pending request's chunks go out: into the channel, or behind the replay. */
  private release(e: PendingAccept): void {
    const { host, chunks } = e;
    if (e.replaying) this.replayNext = e.next;
    chunks.forEach((c, k) => {
      host.accepted(c.values.length);
      if (!e.replaying) return host.enqueue(this.partitioner.envelopeOfColumns(c), e.arrivals[k]);
      const p = e.appends[k].p;
      let r = this.replay.get(p);
      if (!r) this.replay.set(p, (r = { start: e.appends[k].at, records: [], i: 0 }));
      for (let j = 0; j < c.values.length; j++) r.records.push({ timestamp: c.timestamps[j], value: c.values[j] });
    });
  }

  /** The log is on disk up to `entry`'s appends: it and every request before it go out. */
  private releaseThrough(entry: PendingAccept): void {
    if (!this.pending.includes(entry)) return;
    for (;;) {
      const e = this.pending.shift()!;
      this.release(e);
      e.done.resolve();
      if (e === entry) return;
    }
  }

  /** An fsync failed: the log cut off every pending request's appends; they fail and never go out. */
  private dropPending(error: Error): void {
    for (const e of this.pending.splice(0)) e.done.reject(error);
  }

  /** Before a barrier: the pending requests fsynced now and sent, so the barrier follows them (or dropped, if the fsync fails). */
  private flushPending(): void {
    if (this.pending.length === 0) return;
    try {
      this.log!.syncNow();
    } catch (e) {
      // The log cut them off; the barrier goes in after what was sent before them.
      this.dropPending(e as Error);
      return;
    }
    const last = this.pending.at(-1)!;
    this.releaseThrough(last);
  }

  /**
   * The chunks stamped so far (by their partitions, or by settle()), in the order they were
   * read, now count: their partitions' cursors move, their rejections are reported, their
   * records counted. A chunk stamped ahead of an earlier one waits for it, so reports keep
   * the order of the input. Called by the feed itself (at each pull, and when it settles),
   * so the host hears of its records where it always did: while the source is read, never
   * from inside a partition's batch.
   */
  private flush(): void {
    const q = this.unsettled;
    while (q.length > 0) {
      const c = q[0];
      if (c instanceof SourceChunk && !c.stamped) return;
      // Out of the queue before its reports: a callback that throws does not report it twice.
      q.shift();
      if (c instanceof SourceChunk) {
        const { values, maxTimestamp } = c.columns!;
        this.partitioner.recordStamped(c.env!.toPartition, maxTimestamp, values.length);
        if (c.rejected) for (const r of c.rejected) c.host.rejected(r);
        c.host.accepted(values.length);
      } else c.host.rejected(c.rejected);
    }
  }

  /** Stamp every chunk sent and not applied yet (a barrier's positions and watermarks, heads and counts must include them). */
  settle(): void {
    if (this.unsettled.length === 0) return;
    for (const c of this.unsettled) if (c instanceof SourceChunk && !c.stamped) c.stamp();
    this.flush();
  }

  /** Barrier `epoch` on every partition, recorded first (cursor and positions) in the log. */
  inject(barrier: Omit<Barrier, 'positions'>, host: FeedHost): void {
    this.settle();
    this.flushPending();
    this.log?.barrier({ epoch: barrier.epoch, cursor: this.reader.cursor?.() ?? null, next: this.partitioner.nextPartition, positions: this.partitioner.positions() });
    for (const env of this.partitioner.barrierEnvelopes(barrier)) host.enqueue(env);
  }

  /** Records sent per source partition (`${source}#${p}`): the coordinator's activity heads. */
  heads(out: Record<string, number>): void {
    this.settle();
    this.partitioner.positions().forEach((n, p) => (out[`${this.def.name}#${p}`] = n));
  }

  /**
   * Continue after a checkpoint. `states`: the source partitions' channel positions from
   * the restored source-stage partitions (absent when the plan changed: the partitioner
   * starts fresh, since the restored partitions start with fresh channels too).
   */
  restore(entry: BarrierEntry | undefined, positions: readonly number[], states: readonly PartitionCursorState[] | undefined, epoch: number): void {
    if (states) this.partitioner.restore(states, entry?.next ?? 0);
    if (this.replayable) {
      // Epoch 0: no checkpoint completed; the source is read again from its start.
      if (!entry && epoch === 0) {
        if (this.log) for (let p = 0; p < this.partitioner.partitions; p++) this.log.cutAt(p, 0);
        return;
      }
      if (!entry) throw new RestoreError(`source "${this.def.name}"`, `a barrier record of epoch ${epoch} with the reader's position`, 'none (log/<source>/barriers.jsonl lost?)');
      // A null cursor: the checkpoint read this source from the ingestion endpoint; a file now bound to it is new input, read from its start.
      if (entry.cursor !== null) {
        this.reader.seek!(entry.cursor);
        this.read = entry.cursor;
      }
      if (this.log) positions.forEach((at, p) => this.log!.cutAt(p, at));
      return;
    }
    if (!this.log) throw new RestoreError(`source "${this.def.name}"`, 'an input log to replay', 'none');
    if (!states) return; // A changed plan: logged positions belong to the old partitioning; new input only.
    // Every partition: one without a position (no checkpoint yet) replays its whole log.
    for (let p = 0; p < this.partitioner.partitions; p++) {
      const at = positions[p] ?? 0;
      const records = this.log.readFrom(p, at);
      if (records.length) this.replay.set(p, { start: at, records, i: 0 });
    }
    this.replayNext = this.partitioner.nextPartition;
  }

  /** Restored records not sent yet (with what was accepted during the replay): they count against the queues' capacity. */
  get backlog(): number {
    let n = 0;
    for (const r of this.replay.values()) n += r.records.length - r.i;
    for (const e of this.pending) for (const c of e.chunks) n += c.values.length;
    return n;
  }

  /** Whether no logged request waits for an fsync. */
  get settledLog(): boolean {
    return this.pending.length === 0;
  }

  /** Whether restored input is still waiting to be replayed. */
  get replaying(): boolean {
    return this.replay.size > 0;
  }
}

/** A logged request waiting for the log's fsync (acceptLogged). */
interface PendingAccept {
  readonly host: FeedHost;
  readonly chunks: readonly RecordColumns[];
  readonly arrivals: readonly (number | undefined)[];
  readonly appends: readonly LogAppend[];
  /** Log positions per partition and the next partition in turn, after this request. */
  readonly heads: readonly number[];
  readonly next: number;
  readonly replaying: boolean;
  readonly done: { readonly promise: Promise<void>; resolve(): void; reject(e: Error): void };
}

function deferred(): PendingAccept['done'] {
  let resolve!: () => void;
  let reject!: (e: Error) => void;
  const promise = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}

/**
 * A chunk of read events whose timestamps are read when its partition applies it
 * (SourceStamp). Its rejections wait here until the feed reports them, in input order.
 */
class SourceChunk implements SourceStamp {
  stamped = false;
  columns: RecordColumns | undefined;
  rejected: RejectedInput[] | undefined;
  env: Envelope | undefined;

  constructor(
    private readonly feed: SourceFeed,
    readonly host: FeedHost,
    private readonly values: unknown[],
    /** The first event's index in the source's input (for positions without a reader's). */
    private readonly base: number,
    private readonly positions: readonly string[] | undefined,
    /** The first event's index in `positions`. */
    private readonly first: number,
  ) {}

  stamp(emit?: (value: unknown, timestamp: number) => void, at?: { index: number }, failed?: (error: unknown) => void): RecordColumns {
    const done = this.columns;
    if (done) return done.timestamps === UNSTORED ? (this.columns = withTimestamps(done, this.feed.def)) : done;
    const def = this.feed.def;
    this.columns = stampColumns(def, this.host.clock, this.values, this.base, this.positions, this.first, (r) => (this.rejected ??= []).push(r), def.timestamp, emit, at, failed);
    this.stamped = true;
    return this.columns;
  }
}

/**
 * The feed of a source edge (undefined for other edges): its reader from the binding
 * (or its override), its log in checkpointed runs, and its positions after a restore.
 */
export function openSourceFeed(plan: PhysicalPlan, edge: StageEdge, options: Pick<EmbeddedOptions, 'checkpoints' | 'restore' | 'sources'>, clock: Clock): SourceFeed | undefined {
  if (edge.from.kind !== 'source') return undefined;
  const node = plan.job.nodes[edge.toNode];
  if (node.spec.kind !== 'source') return undefined;
  const def = node.spec.source;
  const parallelism = plan.stages[edge.toStage].parallelism;
  const binding = options.sources?.[def.name] ?? def.binding;
  const reader = createReader(binding, def.name, clock);
  const logging = options.checkpoints?.logFor(def.name, reader.seek !== undefined);
  // Only a live input advances while idle: a bounded one ends with +infinity anyway.
  const live = binding.kind === 'ingest' || (binding.kind === 'generator' && binding.count === undefined);
  const partitioner = new SourcePartitioner(def, edge.id, parallelism, clock, live && def.idleAdvance === 'processing-time');
  const feed = new SourceFeed(def, reader, partitioner, edge.toStage, logging?.log, logging?.logRecords);
  const r = options.restore;
  if (r) {
    const at = r.sources[def.name] ?? { positions: [] };
    const states = r.sameTopology
      ? Array.from({ length: parallelism }, (_, p) => {
          const ch = r.partitions.get(`${edge.toStage}/${p}`)?.progress.inputs[channelId(edge.id, p)];
          return { seq: ch?.seq ?? 0, watermark: ch?.watermark ?? Number.NEGATIVE_INFINITY, idle: ch?.idle ?? false, records: at.positions[p] ?? 0 };
        })
      : undefined;
    feed.restore(at.entry, at.positions, states, r.epoch);
  }
  return feed;
}
