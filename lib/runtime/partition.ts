/**
 * The runtime core: one partition of one stage processing a batch of envelopes.
 * The same code runs in the embedded runtime and in the Lambda operator handler.
 *
 * A batch: drop envelopes at or below each channel's high-water mark; push records
 * through the stage's operator chain; advance the watermark (min over input
 * channels, idle ones excluded) and fire timers; then commit state writes, timer
 * changes, progress and the outbox in one atomic commit. Any failure leaves the
 * committed state as it was: the caller discards this object and reopens.
 *
 * Checkpoint barriers (checkpoints.ts) align per input channel; an aligned barrier
 * commits on its own (snapshot handle, forwarded barriers and the ack with the state
 * they describe), then the batch goes on with the envelopes that waited behind it.
 */
import { type Clock, type Key, MIN_WATERMARK, type StreamRecord } from '../api/types.ts';
import { InvariantError, UserCodeError } from '../errors.ts';
import { channelsInto, type StagePlan } from '../graph/compile.ts';
import { KEYED_KINDS, type LogicalNode, stateIdOf } from '../api/logical.ts';
import type { ChannelProgress, PartitionScope, TrackingUpdate } from '../state/backend.ts';
import { StateTxn } from '../state/txn.ts';
import { columnsOf, type Envelope, type OutboxEntry, pendingStampOf, toPlainEnvelope } from '../transport/envelope.ts';
import { applyColumns, applySourceStamp } from './apply-columns.ts';
import { buildChains } from './chain.ts';
import { BarrierAligner, copyProgress, type MutableProgress } from './checkpoints.ts';
import { entityId, newNodeRuntime, type NodeRuntime } from './context.ts';
import { ConsumedInput } from './consumed-input.ts';
import { type ParkedFailure, RecordFailedError } from './failures.ts';
import { BatchPosition } from './position.ts';
import type { BatchResult, OperatorStats, PartitionDeps } from './partition-deps.ts';
import { sourceIdlenessAfter } from './idleness.ts';
import { allIdle, entitiesToPrefetch, freshEnvelopes, inputWatermark, sourceWatermark, sourceWatermarkAt } from './inputs.ts';
import { Outputs } from './outputs.ts';
import { allTimerEntities, changedTimerEntities, timersOfEntity } from './snapshots.ts';
import { consumeReplayed, pendingReplayOf } from './replay.ts';
import { commitBatchOf } from './partition-commit.ts';
import { earliestEventTime, earliestProcessingTime, fireEventTimers, fireProcessingTimers } from './fire-timers.ts';

const NONE_LATE: Readonly<Record<string, number>> = Object.freeze({});

export { entityId };
export type { BatchResult, OperatorStats, PartitionDeps } from './partition-deps.ts';
export { type CallbackLocation, failedEnvelope, type FailureLocation, isRecordLocation, locationId, type ParkedFailure, RecordFailedError, type RecordLocation } from './failures.ts';

export class PartitionRuntime {
  readonly scope: PartitionScope;
  readonly stage: StagePlan;
  private version = 0;
  private progress!: MutableProgress;
  private readonly txn: StateTxn;
  private readonly nodes = new Map<number, NodeRuntime>();
  private readonly order: NodeRuntime[] = [];
  /** Per node of `order`: its droppedLate count as last reported in a BatchResult. */
  private readonly lateReported: number[] = [];
  private readonly expectedChannels: string[] = [];
  private inputWatermark = MIN_WATERMARK;
  private readonly outputs: Outputs;
  /** Outbox entries sealed during this commit, in order. */
  private pendingOutbox: OutboxEntry[] = [];
  /** Source records consumed since the last commit (logInput). */
  private readonly consumed = new ConsumedInput();
  /** Outbox committed before a crash, to deliver again first. */
  recoveredOutbox: OutboxEntry[] = [];
  /** The record or callback being applied, and the failures this batch parks. */
  private readonly at = new BatchPosition();
  /** What this process() call committed so far (an aligned barrier commits mid-batch). */
  private acc = { outbox: [] as OutboxEntry[], recordsIn: 0, committed: false };
  /** Checkpointed runs: commits mark the entities they changed (incremental snapshots). */
  private tracking = false;
  private aligner: BarrierAligner | undefined;
  /** Nodes by state identity (stateIdOf): the operator part of an entity. */
  private readonly byStateId = new Map<string, NodeRuntime>();
  /** This partition in error messages. */
  private readonly where: string;
  /** Idle probes in this batch that changed nothing (they need no commit of their own). */
  private readonly unchangedProbes = new Set<Envelope>();

  private constructor(private readonly deps: PartitionDeps) {
    this.stage = deps.plan.stages[deps.stage];
    this.scope = { job: deps.plan.job.name, stage: deps.stage, partition: deps.partition };
    this.txn = new StateTxn(deps.backend, this.scope);
    this.where = `${this.scope.job}/${this.stage.name}#${this.scope.partition}`;
    for (const e of this.stage.inputs) this.expectedChannels.push(...channelsInto(deps.plan, deps.plan.edges[e], deps.partition));
    this.outputs = new Outputs(deps.plan, this.stage, deps.partition, () => this.progress, (e) => this.pendingOutbox.push(e), () => this.tracking, (operator, value, cause) => new RecordFailedError(operator, value, cause, this.at.location()));
  }

  static async open(deps: PartitionDeps): Promise<PartitionRuntime> {
    const rt = new PartitionRuntime(deps);
    await rt.recover();
    return rt;
  }

  private async recover(): Promise<void> {
    const rec = await this.deps.backend.recover(this.scope);
    this.version = rec.version;
    this.progress = copyProgress(rec.progress as MutableProgress) as MutableProgress;
    this.recoveredOutbox = [...rec.outbox];
    for (const id of this.stage.nodes) this.createNode(this.deps.plan.job.nodes[id]);
    buildChains(this.deps.plan, this.order, this.nodes, {
      outputs: this.outputs,
      dispatch: (n, rec, input) => this.dispatch(n, rec, input),
      failure: (n, value, cause) => new RecordFailedError(n.node.name, value, cause, this.at.location()),
    });
    for (const t of rec.timers) this.nodes.get(t.node)?.timers[t.domain].load(t);
    this.inputWatermark = this.computeInputWatermark();
    if (this.deps.checkpointStore) {
      if (!this.deps.backend.tracksChanges || !this.deps.backend.tracked) {
        throw new InvariantError(`partition ${this.stage.name}#${this.scope.partition}: checkpoints need a state backend that tracks changed keys (tracksChanges, tracked)`);
      }
      this.tracking = true;
      this.aligner = new BarrierAligner(this.deps.plan, this.scope, this.expectedChannels, this.deps.checkpointStore, this.deps.backend, this.txn, {
        progress: () => this.progress,
        now: () => this.deps.clock.now(),
        sealOutputs: () => {
          this.outputs.flushChannels();
          this.outputs.sealSinks();
        },
        push: (e) => this.pendingOutbox.push(e),
        timerEntities: () => changedTimerEntities(this.order),
        timersOf: (e) => timersOfEntity(this.byStateId, e),
        allTimerEntities: () => allTimerEntities(this.order),
        eventTimers: () => ({ earliest: earliestEventTime(this.order), watermark: this.inputWatermark }),
        commit: (next) => this.commitPart(true, next) ?? Promise.resolve(),
        take: (env) => this.take(env, false) ?? Promise.resolve(),
        prefetch: (envs) => (this.deps.backend.needsPrefetch ? this.prefetchFor(envs) : Promise.resolve()),
      });
    }
  }

  private createNode(node: LogicalNode): void {
    const rt = newNodeRuntime(this.deps.plan, node, this);
    this.nodes.set(node.id, rt);
    this.byStateId.set(stateIdOf(node), rt);
    this.order.push(rt);
  }

  get currentVersion(): number {
    return this.version;
  }

  get watermark(): number {
    return this.inputWatermark;
  }

  /** Every input is idle: downstream does not wait for this partition's watermark. */
  get idle(): boolean {
    return this.progress.outputIdle;
  }

  /** The epoch whose barrier this partition is aligning, if any (tests, metrics). */
  get aligningEpoch(): number | undefined {
    return this.progress.aligning?.barrier.epoch;
  }

  /** Envelopes waiting behind an early barrier (tests, metrics). */
  get heldEnvelopes(): number {
    return this.progress.held?.length ?? 0;
  }

  /** The last barrier this partition snapshotted (0: none). */
  get lastBarrier(): number {
    return this.progress.lastBarrier ?? 0;
  }

  operatorStats(): OperatorStats[] {
    return this.order.map((n) => ({ name: n.node.name, recordsIn: n.recordsIn }));
  }

  /** Process envelopes and commit. `skip`: records (by locationId) to park in the dead-letter queue instead. */
  async process(envelopes: readonly Envelope[], skip?: ReadonlyMap<string, ParkedFailure>): Promise<BatchResult> {
    const { fresh, dups } = freshEnvelopes(envelopes, this.progress.inputs, this.where);
    if (fresh.length === 0 && dups > 0 && (this.progress.aligning || !this.progress.held)) {
      return { outbox: [], version: this.version, recordsIn: 0, duplicatesDropped: dups, committed: false, parked: [], lateDropped: NONE_LATE };
    }
    this.acc = { outbox: [], recordsIn: 0, committed: false };
    this.at.begin(skip);
    if (this.deps.backend.needsPrefetch) await this.prefetchFor(fresh);
    this.unchangedProbes.clear();
    // Not awaited when there is nothing left (the common case): a batch stays one promise.
    let progressMoved = this.progress.held !== undefined && (await this.applyLeftHeld());
    for (let i = 0; i < fresh.length; i++) {
      const env = fresh[i];
      // Only a barrier waits for anything (its snapshot): other envelopes apply synchronously.
      const taken = this.take(env, true);
      if (taken) await taken;
      progressMoved ||= !this.unchangedProbes.has(env);
    }
    fireProcessingTimers(this.order, this.deps.clock, this.at);
    const committing = this.commitPart(progressMoved);
    if (committing) await committing;
    const parked = this.at.end();
    return { outbox: this.acc.outbox, version: this.version, recordsIn: this.acc.recordsIn, committed: this.acc.committed, duplicatesDropped: dups, parked, lateDropped: this.lateSinceLastBatch() };
  }

  /**
   * What each operator dropped as late since the last batch returned. A failed batch
   * returns nothing and its runtime is discarded, so every drop is reported once.
   */
  private lateSinceLastBatch(): Readonly<Record<string, number>> {
    let out: Record<string, number> | undefined;
    for (let i = 0; i < this.order.length; i++) {
      const n = this.order[i].op.droppedLate ?? 0;
      const d = n - (this.lateReported[i] ?? 0);
      if (d <= 0) continue;
      this.lateReported[i] = n;
      (out ??= {})[this.order[i].node.name] = (out[this.order[i].node.name] ?? 0) + d;
    }
    return out ?? NONE_LATE;
  }

  /**
   * One envelope: consume its position (fresh ones), hold it when its channel already
   * delivered the barrier being aligned, otherwise apply it (records or barrier).
   */
  private take(env: Envelope, fresh: boolean): Promise<void> | undefined {
    const ch = this.channel(env.channel);
    const a = this.progress.aligning;
    if (fresh && env.replayed) consumeReplayed(this.progress, env, ch, this.stage.name, this.scope.partition);
    else if (fresh) {
      ch.seq = env.seq;
      if (env.offset !== undefined) {
        const from = ch.records ?? 0;
        ch.offset = env.offset;
        ch.records = from + env.records.length;
        if (this.deps.logInput && env.records.length) this.consumed.append(this.deps.plan, this.scope.partition, env, from, a && a.arrived[env.channel] ? a.barrier.epoch : (this.progress.lastBarrier ?? 0));
      }
    }
    if (a && a.arrived[env.channel]) {
      // Held envelopes are committed with the progress (cloned, snapshotted): a plain copy.
      (this.progress.held ??= []).push(toPlainEnvelope(env));
      return undefined;
    }
    if (env.barrier) {
      if (!this.aligner) throw new InvariantError(`partition ${this.stage.name}#${this.scope.partition} received barrier ${env.barrier.epoch} but checkpoints are not configured (no checkpointStore)`);
      return this.aligner.onBarrier(env);
    }
    this.apply(env, ch);
    return undefined;
  }

  /**
   * Envelopes held behind a barrier whose commit came just before a crash (the commit keeps
   * them, their positions consumed): applied before anything else, as they would have been
   * right after that commit. True when there were any.
   */
  private async applyLeftHeld(): Promise<boolean> {
    const held = this.progress.aligning ? undefined : this.progress.held;
    if (!held) return false;
    delete this.progress.held;
    if (this.deps.backend.needsPrefetch) await this.prefetchFor(held);
    for (const h of held) await this.take(h, false);
    return true;
  }

  /** The input log replay an in-place restore on AWS left (per source channel: records `from` .. `upTo - 1`); empty: none. */
  get pendingReplay(): { readonly channel: string; readonly from: number; readonly upTo: number }[] {
    return pendingReplayOf(this.progress);
  }

  private channel(id: string): ChannelProgress {
    return (this.progress.inputs[id] ??= { seq: 0, watermark: MIN_WATERMARK, idle: false });
  }

  private apply(env: Envelope, ch: ChannelProgress): void {
    const edge = this.deps.plan.edges[env.edge];
    const target = this.nodes.get(edge.toNode)!;
    const source = edge.partitioning === 'source';
    const at = this.at;
    at.enter(env);
    // Columns (source chunks, shuffled records) go in without a record object each; with
    // failures to park, the record path checks each record against them.
    // A source chunk not stamped yet is stamped in the chain's pass (each event touched once).
    const stamp = at.skip || !source ? undefined : pendingStampOf(env);
    const columns = stamp ? applySourceStamp(stamp, target, at) : columnsOf(env);
    if (columns && !at.skip && (stamp !== undefined || applyColumns(columns, target, edge.toInput, at))) {
      this.acc.recordsIn += columns.values.length;
      at.leave();
      this.afterRecords(env, ch, source ? sourceWatermarkAt(this.deps.plan, edge, columns.maxTimestamp) : MIN_WATERMARK);
      return;
    }
    const keyed = KEYED_KINDS.has(target.node.spec.kind);
    const entry = target.entry;
    const records = env.records;
    for (let i = 0; i < records.length; i++) {
      const rec = records[i];
      at.index = i;
      if (at.skip && at.parkRecord(target.node.name, rec)) continue;
      if (entry) {
        entry(rec.value, rec.timestamp);
        continue;
      }
      if (keyed) target.ctx.setCurrentKey(rec.key as Key);
      this.dispatch(target, rec, edge.toInput);
    }
    this.acc.recordsIn += records.length;
    at.leave();
    this.afterRecords(env, ch, source ? sourceWatermark(this.deps.plan, edge, records) : MIN_WATERMARK);
  }

  /** After an envelope's records: its watermark (at least `derived` on source channels), idleness, timers. */
  private afterRecords(env: Envelope, ch: ChannelProgress, derived: number): void {
    const edge = this.deps.plan.edges[env.edge];
    const target = this.nodes.get(edge.toNode)!;
    const source = edge.partitioning === 'source';
    const wm = Math.max(env.watermark, derived);
    if (wm > ch.watermark) ch.watermark = wm;
    if (source) {
      const spec = target.node.spec;
      const src = spec.kind === 'source' ? spec.source : undefined;
      const next = sourceIdlenessAfter(ch, env, src?.watermark.idleTimeoutMs, src?.idleAdvance === 'processing-time');
      // A probe that changes nothing need not be committed: applied again, it still changes nothing.
      if (env.probe && next.idle === ch.idle && next.lastDataAt === ch.lastDataAt && next.idleAt === ch.idleAt) this.unchangedProbes.add(env);
      ch.idle = next.idle;
      if (next.lastDataAt !== undefined) ch.lastDataAt = next.lastDataAt;
      if (next.idleAt !== undefined) ch.idleAt = next.idleAt;
      else delete ch.idleAt;
    } else ch.idle = env.idle === true;
    this.at.applying = env;
    this.advanceWatermark();
    this.at.applying = undefined;
  }

  /** Fire due processing-time timers (a periodic tick when no input arrives). */
  async tick(skip?: ReadonlyMap<string, ParkedFailure>): Promise<BatchResult> {
    this.acc = { outbox: [], recordsIn: 0, committed: false };
    this.at.begin(skip);
    if (this.deps.backend.needsPrefetch) await this.prefetchFor([]);
    const moved = this.progress.held !== undefined && (await this.applyLeftHeld());
    fireProcessingTimers(this.order, this.deps.clock, this.at);
    const committing = this.commitPart(moved);
    if (committing) await committing;
    const parked = this.at.end();
    return { outbox: this.acc.outbox, version: this.version, recordsIn: 0, committed: this.acc.committed, duplicatesDropped: 0, parked, lateDropped: this.lateSinceLastBatch() };
  }

  /** The earliest pending processing-time timer (for scheduling ticks). */
  nextProcessingTime(): number {
    return earliestProcessingTime(this.order);
  }

  async outboxDelivered(version: number): Promise<void> {
    await this.deps.backend.clearOutbox(this.scope, version);
  }

  private computeInputWatermark(): number {
    return inputWatermark(this.expectedChannels, this.progress.inputs, this.inputWatermark);
  }

  private advanceWatermark(): void {
    const idle = allIdle(this.expectedChannels, this.progress.inputs);
    if (idle !== this.progress.outputIdle) {
      this.progress.outputIdle = idle;
      this.outputs.watermarkMoved = true;
    }
    const wm = this.computeInputWatermark();
    if (wm <= this.inputWatermark) return;
    // Downstream must see the same watermark sequence as this partition, whatever the
    // batching: records so far go out with the old watermark, then what the timers emit
    // with the new one, before any later record.
    this.outputs.flushChannels();
    this.inputWatermark = wm;
    fireEventTimers(this.order, wm, this.at);
    this.progress.outputWatermark = wm;
    this.outputs.watermarkMoved = true;
    this.outputs.flushChannels();
  }

  /** @internal Deliver a record to a node of this stage. */
  dispatch(n: NodeRuntime, rec: StreamRecord, input: number): void {
    n.recordsIn++;
    try {
      n.op.processElement(rec, input);
    } catch (e) {
      if (e instanceof UserCodeError) throw e;
      throw new RecordFailedError(n.node.name, rec.value, e, this.at.location());
    }
  }

  /** @internal */
  get stateTxn(): StateTxn {
    return this.txn;
  }

  /** @internal */
  get reusesTimerEntries(): boolean {
    return this.deps.backend.releasesTimerEntries === true;
  }

  /** @internal */
  get clock(): Clock {
    return this.deps.clock;
  }

  private async prefetchFor(envelopes: readonly Envelope[]): Promise<void> {
    const want = entitiesToPrefetch(this.deps.plan, envelopes, this.order, this.inputWatermark, this.deps.clock.now());
    if (want.length) await this.deps.backend.prefetch(this.scope, want);
  }

  /** Commit what was processed since the last commit of this call (commitBatchOf: `progressMoved`, `next`). */
  private commitPart(progressMoved: boolean, next?: TrackingUpdate['next']): Promise<void> | undefined {
    this.outputs.flushChannels();
    this.outputs.sealSinks();
    const outbox = this.pendingOutbox;
    this.pendingOutbox = [];
    // Dead letters go ahead of the part's barrier ack (they were parked before its barrier):
    // whoever delivers the outbox can tell each one's epoch by the next ack after it.
    const letters = this.at.deadLetters;
    if (letters.length) outbox.unshift(...letters.map((d): OutboxEntry => ({ kind: 'deadLetter', deadLetter: d })));
    const batch = commitBatchOf({
      scope: this.scope,
      version: this.version,
      txn: this.txn,
      order: this.order,
      progress: this.progress,
      outbox,
      inputLog: this.consumed.take(),
      tracking: this.tracking,
      progressMoved,
      next,
      beforeCommit: this.deps.beforeCommit,
    });
    if (!batch) {
      this.afterCommit(outbox, false);
      return undefined;
    }
    // An in-memory store commits synchronously: no promise, no turn of the event loop per batch.
    const backend = this.deps.backend;
    if (backend.commitSync) {
      backend.commitSync(batch);
      this.version++;
      this.afterCommit(outbox, true);
      return undefined;
    }
    return backend.commit(batch).then(() => {
      this.version++;
      this.afterCommit(outbox, true);
    });
  }

  /** After a commit (or none, when nothing changed): the next one starts clean. */
  private afterCommit(outbox: OutboxEntry[], committed: boolean): void {
    // Timers first: an entry whose last timer the commit deleted is forgotten by the reset.
    for (const n of this.order) {
      n.timers.event.clearChanges();
      n.timers.processing.clearChanges();
    }
    this.txn.reset();
    this.outputs.reset();
    this.at.deadLetters = [];
    const acc = this.acc.outbox;
    for (let i = 0; i < outbox.length; i++) acc.push(outbox[i]);
    this.acc.committed ||= committed;
  }
}
