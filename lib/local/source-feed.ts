/**
 * One source of the embedded runtime: its reader, its partitioner, and in checkpointed
 * runs its log. Pulls events while the source stage has room, turns them into records
 * (rejecting what cannot be read, with its position), logs what is accepted when the
 * source cannot be read again, and injects barriers after everything sent so far.
 */
import type { SourceDef } from '../api/sources.ts';
import type { Clock, StreamRecord } from '../api/types.ts';
import { RestoreError } from '../checkpoint/driver-errors.ts';
import type { Barrier, Envelope, RecordColumns } from '../transport/envelope.ts';
import type { BarrierEntry, SourceLog } from './input-log.ts';
import { createReader, type PartitionCursorState, type PullResult, type RejectedInput, type SourceReader, SourcePartitioner, toRecord } from './sources.ts';
import { channelId, type PhysicalPlan, type StageEdge } from '../graph/compile.ts';
import type { EmbeddedOptions } from './embedded-options.ts';

export interface FeedHost {
  readonly clock: Clock;
  readonly batchSize: number;
  /** Whether the source stage's queues have room. */
  room(): boolean;
  enqueue(env: Envelope): void;
  rejected(r: RejectedInput): void;
  /** Records accepted from the source (counted once, not again on replay). */
  accepted(n: number): void;
}

export class SourceFeed {
  done = false;
  /** Events read so far (the index of the next one). */
  read = 0;
  /** Logged records still to replay after a restore, per partition. */
  private replay = new Map<number, { records: StreamRecord[]; i: number }>();

  constructor(
    readonly def: SourceDef<any>,
    readonly reader: SourceReader,
    readonly partitioner: SourcePartitioner,
    readonly stage: number,
    /** Checkpointed runs: barrier entries always, records too when `logRecords`. */
    readonly log?: SourceLog,
    readonly logRecords = false,
  ) {}

  /** Replayable readers can seek back to a checkpoint's cursor; others need the log. */
  get replayable(): boolean {
    return this.reader.seek !== undefined && this.reader.cursor !== undefined;
  }

  /** One round of input: true when something was sent. A promise only when the reader answers asynchronously (a file). */
  pull(host: FeedHost): boolean | Promise<boolean> {
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
    const pulled = this.reader.pull(host.batchSize * this.partitioner.partitions);
    return pulled instanceof Promise ? pulled.then((r) => this.pulled(r, host)) : this.pulled(pulled, host);
  }

  private pulled({ events, done, rejected, positions }: PullResult, host: FeedHost): boolean {
    if (rejected) for (const r of rejected) host.rejected(r);
    this.accept(events, positions, host, true);
    if (done) {
      this.done = true;
      for (const env of this.partitioner.finalEnvelopes()) host.enqueue(env);
      return true;
    }
    return this.idleOnly(host, events.length > 0);
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
  accept(events: readonly unknown[], positions: readonly string[] | undefined, host: FeedHost, owned = false): void {
    const batch = host.batchSize;
    const total = events.length;
    for (let i = 0; i < total; i += batch) {
      const end = Math.min(i + batch, total);
      const values = owned && i === 0 && end === total ? (events as unknown[]) : events.slice(i, end);
      const columns = this.columnsOf(values, i, positions, host);
      const n = columns.values.length;
      host.accepted(n);
      if (n === 0) continue;
      const p = this.partitioner.nextPartition;
      const at = this.logRecords ? this.partitioner.positions()[p] : 0;
      const env = this.partitioner.envelopeOfColumns(columns);
      if (this.logRecords) this.log!.append(p, at, env.records);
      host.enqueue(env);
    }
    this.read += total;
  }

  /**
   * A chunk's columns (not a record object per event): each event's timestamp, in one
   * pass; events that cannot become records are reported with their position and
   * removed from `values` (in place). `first`: the chunk's index in the pulled events.
   */
  private columnsOf(values: unknown[], first: number, positions: readonly string[] | undefined, host: FeedHost): RecordColumns {
    const m = values.length;
    const timestamps: number[] = new Array(m);
    // Without a schema the extractor is called here directly, in a loop that stops at the
    // first event it cannot stamp (a throw, or not a finite number); that event goes
    // through toRecord, which says what is wrong, and the loop goes on after it. (One
    // try around the loop, not one per event: a timestamp that may also be undefined
    // would be boxed, a heap number per event.)
    const extract = this.def.schema ? undefined : this.def.timestamp;
    let max = Number.NEGATIVE_INFINITY;
    let n = 0;
    let j = 0;
    while (j < m) {
      if (extract !== undefined) {
        try {
          for (; j < m; j++) {
            const event = values[j];
            const t = extract(event);
            if (typeof t !== 'number' || t - t !== 0) break;
            if (n !== j) values[n] = event;
            timestamps[n++] = t;
            if (t > max) max = t;
          }
        } catch {
          // Event j threw: toRecord below names the error.
        }
        if (j === m) break;
      }
      const event = values[j];
      const r = toRecord(this.def, event, host.clock);
      if (typeof r === 'string') host.rejected({ source: this.def.name, position: positions?.[first + j] ?? `event ${this.read + first + j}`, error: r });
      else {
        if (n !== j) values[n] = event;
        timestamps[n++] = r.timestamp;
        if (r.timestamp > max) max = r.timestamp;
      }
      j++;
    }
    if (n < m) {
      values.length = n;
      timestamps.length = n;
    }
    return { values, timestamps, maxTimestamp: max };
  }

  /** Barrier `epoch` on every partition, recorded first (cursor and positions) in the log. */
  inject(barrier: Omit<Barrier, 'positions'>, host: FeedHost): void {
    this.log?.barrier({ epoch: barrier.epoch, cursor: this.reader.cursor?.() ?? null, next: this.partitioner.nextPartition, positions: this.partitioner.positions() });
    for (const env of this.partitioner.barrierEnvelopes(barrier)) host.enqueue(env);
  }

  /** Records sent per source partition (`${source}#${p}`): the coordinator's activity heads. */
  heads(out: Record<string, number>): void {
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
    positions.forEach((at, p) => {
      const records = this.log!.readFrom(p, at);
      if (records.length) this.replay.set(p, { records, i: 0 });
    });
  }

  /** Whether restored input is still waiting to be replayed. */
  get replaying(): boolean {
    return this.replay.size > 0;
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
  const reader = createReader(options.sources?.[def.name] ?? def.binding, def.name, clock);
  const logging = options.checkpoints?.logFor(def.name, reader.seek !== undefined);
  const feed = new SourceFeed(def, reader, new SourcePartitioner(def, edge.id, parallelism, clock), edge.toStage, logging?.log, logging?.logRecords);
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
