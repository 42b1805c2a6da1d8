/**
 * One source of the embedded runtime: its reader, its partitioner, and in checkpointed
 * runs its log. Pulls events while the source stage has room, turns them into records
 * (rejecting what cannot be read, with its position), logs what is accepted when the
 * source cannot be read again, and injects barriers after everything sent so far.
 */
import type { SourceDef } from '../api/sources.ts';
import type { Clock, StreamRecord } from '../api/types.ts';
import { RestoreError } from '../checkpoint/driver-errors.ts';
import type { Barrier, Envelope } from '../transport/envelope.ts';
import type { BarrierEntry, SourceLog } from './input-log.ts';
import { createReader, type PartitionCursorState, type RejectedInput, type SourceReader, SourcePartitioner, timestampReader } from './sources.ts';
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
  private timestampOf: ((event: unknown) => number | string) | undefined;

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

  async pull(host: FeedHost): Promise<boolean> {
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
    let progressed = false;
    if (host.room()) {
      const { events, done, rejected, positions } = await this.reader.pull(host.batchSize * this.partitioner.partitions);
      for (const r of rejected ?? []) host.rejected(r);
      this.accept(events, positions, host);
      progressed = events.length > 0;
      if (done) {
        this.done = true;
        for (const env of this.partitioner.finalEnvelopes()) host.enqueue(env);
        return true;
      }
    }
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
   */
  accept(events: readonly unknown[], positions: readonly string[] | undefined, host: FeedHost): void {
    const batch = host.batchSize;
    const timestampOf = (this.timestampOf ??= timestampReader(this.def, host.clock));
    for (let i = 0; i < events.length; i += batch) {
      const end = Math.min(i + batch, events.length);
      // Columns, not a record object per event (the envelope builds records only if asked).
      const values = events.slice(i, end);
      const timestamps: number[] = new Array(end - i);
      let max = Number.NEGATIVE_INFINITY;
      let n = 0;
      for (let j = i; j < end; j++) {
        const t = timestampOf(events[j]);
        if (typeof t === 'string') {
          host.rejected({ source: this.def.name, position: positions?.[j] ?? `event ${this.read + j}`, error: t });
          continue;
        }
        if (n !== j - i) values[n] = events[j];
        timestamps[n++] = t;
        if (t > max) max = t;
      }
      if (n < end - i) {
        values.length = n;
        timestamps.length = n;
      }
      host.accepted(n);
      if (n === 0) continue;
      const p = this.partitioner.nextPartition;
      const at = this.logRecords ? this.partitioner.positions()[p] : 0;
      const env = this.partitioner.envelopeOfColumns({ values, timestamps, maxTimestamp: max });
      if (this.logRecords) this.log!.append(p, at, env.records);
      host.enqueue(env);
    }
    this.read += events.length;
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
