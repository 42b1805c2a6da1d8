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
import { type Clock, type Key, keyFromString, MAX_WATERMARK, MIN_WATERMARK, type StreamRecord } from '../api/types.ts';
import type { BlobStore } from '../checkpoint/storage.ts';
import { sourcePartitionKey } from '../checkpoint/protocol.ts';
import { InvariantError, UserCodeError } from '../errors.ts';
import { channelsInto, type PhysicalPlan, type StagePlan, type Successor } from '../graph/compile.ts';
import { KEYED_KINDS, type LogicalNode } from '../graph/logical.ts';
import { createOperator } from '../operators/registry.ts';
import type { ChannelProgress, InputLogAppend, PartitionScope, StateBackend, TimerEntry, TrackingUpdate } from '../state/backend.ts';
import { StateTxn } from '../state/txn.ts';
import type { DeadLetter, Envelope, OutboxEntry } from '../transport/envelope.ts';
import { buildChains } from './chain.ts';
import { BarrierAligner, copyProgress, type MutableProgress } from './checkpoints.ts';
import { entityId, NodeContext, type NodeRuntime } from './context.ts';
import { type CallbackLocation, type FailureLocation, locationId, type ParkedFailure, RecordFailedError, type RecordLocation } from './failures.ts';
import { sourceIdlenessAfter } from './idleness.ts';
import { allIdle, entitiesToPrefetch, freshEnvelopes, inputWatermark, sourceWatermark } from './inputs.ts';
import { Outputs } from './outputs.ts';
import { allTimerEntities, changedTimerEntities, timerChanges, timersOfEntity } from './snapshots.ts';
import { TimerQueue } from './timers.ts';

export { entityId };
export { type CallbackLocation, failedEnvelope, type FailureLocation, isRecordLocation, locationId, type ParkedFailure, RecordFailedError, type RecordLocation } from './failures.ts';

export interface PartitionDeps {
  readonly plan: PhysicalPlan;
  readonly stage: number;
  readonly partition: number;
  readonly backend: StateBackend;
  readonly clock: Clock;
  /** Fault-injection hook: runs after processing, before the commit. */
  readonly beforeCommit?: () => void;
  /**
   * Checkpointed runs: where snapshot objects go. With it the partition tracks changed
   * keys durably (the backend must have tracksChanges) and handles barriers; without
   * it a barrier is an InvariantError.
   */
  readonly checkpointStore?: BlobStore;
  /**
   * Log the records consumed on source log channels (those with offsets: SQS) with each
   * commit (CommitBatch.inputLog), so a restore can replay what the queue no longer holds.
   */
  readonly logInput?: boolean;
}

export interface BatchResult {
  /** Outputs committed with this batch; deliver them, then call outboxDelivered(version). */
  readonly outbox: OutboxEntry[];
  readonly version: number;
  readonly recordsIn: number;
  readonly duplicatesDropped: number;
  readonly committed: boolean;
  /** Location ids of the records and callbacks parked as dead letters in this commit. */
  readonly parked: readonly string[];
}

export interface OperatorStats {
  readonly name: string;
  readonly recordsIn: number;
}

export class PartitionRuntime {
  readonly scope: PartitionScope;
  readonly stage: StagePlan;
  private version = 0;
  private progress!: MutableProgress;
  private readonly txn: StateTxn;
  private readonly nodes = new Map<number, NodeRuntime>();
  private readonly order: NodeRuntime[] = [];
  private readonly expectedChannels: string[] = [];
  private inputWatermark = MIN_WATERMARK;
  private readonly outputs: Outputs;
  private deadLetters: DeadLetter[] = [];
  /** Outbox entries sealed during this commit, in order. */
  private pendingOutbox: OutboxEntry[] = [];
  /** Source records consumed since the last commit (logInput). */
  private pendingInput: InputLogAppend[] = [];
  /** Outbox committed before a crash, to deliver again first. */
  recoveredOutbox: OutboxEntry[] = [];
  /** The input record being applied (fields, not an object per record; see location()). */
  private curChannel: string | undefined;
  private curSeq = 0;
  private curIndex = 0;
  private curOffset: string | undefined;
  /** The envelope being applied, whose watermark may fire timers. */
  private applying: Envelope | undefined;
  /** The callback running (timer, or watermark), for attributing a throw; built into a location only when needed. */
  private firing: { node: NodeRuntime | undefined; timer: TimerEntry | undefined; watermark: number } = { node: undefined, timer: undefined, watermark: 0 };
  private skip: ReadonlyMap<string, ParkedFailure> | undefined;
  private parked: string[] = [];
  /** What this process() call committed so far (an aligned barrier commits mid-batch). */
  private acc = { outbox: [] as OutboxEntry[], recordsIn: 0, committed: false };
  /** Checkpointed runs: commits mark the entities they changed (incremental snapshots). */
  private tracking = false;
  private aligner: BarrierAligner | undefined;
  private readonly byName = new Map<string, NodeRuntime>();
  /** Idle probes in this batch that changed nothing (they need no commit of their own). */
  private readonly unchangedProbes = new Set<Envelope>();

  private constructor(private readonly deps: PartitionDeps) {
    this.stage = deps.plan.stages[deps.stage];
    this.scope = { job: deps.plan.job.name, stage: deps.stage, partition: deps.partition };
    this.txn = new StateTxn(deps.backend, this.scope);
    for (const e of this.stage.inputs) this.expectedChannels.push(...channelsInto(deps.plan, deps.plan.edges[e], deps.partition));
    this.outputs = new Outputs(deps.plan, this.stage, deps.partition, () => this.progress, (e) => this.pendingOutbox.push(e), () => this.tracking);
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
      failure: (n, value, cause) => new RecordFailedError(n.node.name, value, cause, this.location()),
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
        timersOf: (e) => timersOfEntity(this.byName, e),
        allTimerEntities: () => allTimerEntities(this.order),
        commit: (next) => this.commitPart(true, next),
        take: (env) => this.take(env, false),
        prefetch: (envs) => (this.deps.backend.needsPrefetch ? this.prefetchFor(envs) : Promise.resolve()),
      });
    }
  }

  private createNode(node: LogicalNode): void {
    const routes = new Map<string, Successor[]>();
    for (const s of this.deps.plan.successors[node.id]) {
      const list = routes.get(s.port) ?? [];
      list.push(s);
      routes.set(s.port, list);
    }
    const rt: NodeRuntime = {
      node,
      ctx: undefined as unknown as NodeContext,
      op: undefined as unknown as NodeRuntime['op'],
      routes,
      timers: { event: new TimerQueue(), processing: new TimerQueue() },
      recordsIn: 0,
      emitters: new Map(),
      emitMain: () => {},
      entry: undefined,
    };
    (rt as { ctx: NodeContext }).ctx = new NodeContext(this, rt, this.deps.plan.job.maxParallelism);
    rt.op = createOperator(rt.ctx);
    this.nodes.set(node.id, rt);
    this.byName.set(node.name, rt);
    this.order.push(rt);
  }

  get currentVersion(): number {
    return this.version;
  }

  get watermark(): number {
    return this.inputWatermark;
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
    const { fresh, dups } = freshEnvelopes(envelopes, this.progress.inputs, `${this.scope.job}/${this.stage.name}#${this.scope.partition}`);
    if (fresh.length === 0 && dups > 0) {
      return { outbox: [], version: this.version, recordsIn: 0, duplicatesDropped: dups, committed: false, parked: [] };
    }
    this.acc = { outbox: [], recordsIn: 0, committed: false };
    this.skip = skip;
    this.parked = [];
    if (this.deps.backend.needsPrefetch) await this.prefetchFor(fresh);
    this.unchangedProbes.clear();
    for (const env of fresh) await this.take(env, true);
    this.fireProcessingTimers();
    await this.commitPart(fresh.some((e) => !this.unchangedProbes.has(e)));
    this.skip = undefined;
    return { outbox: this.acc.outbox, version: this.version, recordsIn: this.acc.recordsIn, committed: this.acc.committed, duplicatesDropped: dups, parked: this.parked };
  }

  /**
   * One envelope: consume its position (fresh ones), hold it when its channel already
   * delivered the barrier being aligned, otherwise apply it (records or barrier).
   */
  private async take(env: Envelope, fresh: boolean): Promise<void> {
    const ch = this.channel(env.channel);
    const a = this.progress.aligning;
    if (fresh && env.replayed) this.consumeReplayed(env, ch);
    else if (fresh) {
      ch.seq = env.seq;
      if (env.offset !== undefined) {
        const from = ch.records ?? 0;
        ch.offset = env.offset;
        ch.records = from + env.records.length;
        if (this.deps.logInput && env.records.length) this.logInput(env, from, a && a.arrived[env.channel] ? a.barrier.epoch : (this.progress.lastBarrier ?? 0));
      }
    }
    if (a && a.arrived[env.channel]) {
      (this.progress.held ??= []).push(env);
      return;
    }
    if (env.barrier) {
      if (!this.aligner) throw new InvariantError(`partition ${this.stage.name}#${this.scope.partition} received barrier ${env.barrier.epoch} but checkpoints are not configured (no checkpointStore)`);
      await this.aligner.onBarrier(env);
      return;
    }
    this.apply(env, ch);
  }

  /** The input log replay an in-place restore on AWS left (per source channel: records `from` .. `upTo - 1`); empty: none. */
  get pendingReplay(): { readonly channel: string; readonly from: number; readonly upTo: number }[] {
    return Object.entries(this.progress.replay ?? {}).map(([channel, upTo]) => ({ channel, from: this.progress.inputs[channel]?.records ?? 0, upTo }));
  }

  /** A replayed envelope: its records follow the channel's count exactly and stay within the replay; the offset stays. */
  private consumeReplayed(env: Envelope, ch: ChannelProgress): void {
    const upTo = this.progress.replay?.[env.channel];
    const from = ch.records ?? 0;
    const to = from + env.records.length;
    if (upTo === undefined || to > upTo) {
      throw new InvariantError(`partition ${this.stage.name}#${this.scope.partition}: replayed records ${from}..${to - 1} of channel ${env.channel}, but the restore left ${upTo === undefined ? 'no replay' : `a replay up to record ${upTo - 1}`} on it`);
    }
    ch.records = to;
    if (to === upTo) {
      const { [env.channel]: _done, ...rest } = this.progress.replay!;
      if (Object.keys(rest).length) this.progress.replay = rest;
      else delete this.progress.replay;
    }
  }

  private logInput(env: Envelope, from: number, after: number): void {
    const last = this.pendingInput[this.pendingInput.length - 1];
    if (last && last.channel === env.channel && last.after === after && last.from + last.records.length === from) {
      (last.records as StreamRecord[]).push(...env.records);
      return;
    }
    const edge = this.deps.plan.edges[env.edge];
    const source = edge.from.kind === 'source' ? sourcePartitionKey(edge.from.source, this.scope.partition) : env.channel;
    this.pendingInput.push({ channel: env.channel, source, from, after, records: [...env.records] });
  }

  private channel(id: string): ChannelProgress {
    return (this.progress.inputs[id] ??= { seq: 0, watermark: MIN_WATERMARK, idle: false });
  }

  private apply(env: Envelope, ch: ChannelProgress): void {
    const edge = this.deps.plan.edges[env.edge];
    const target = this.nodes.get(edge.toNode)!;
    const keyed = KEYED_KINDS.has(target.node.spec.kind);
    const entry = target.entry;
    const records = env.records;
    this.curChannel = env.channel;
    this.curSeq = env.seq;
    this.curOffset = env.offset;
    for (let i = 0; i < records.length; i++) {
      const rec = records[i];
      this.curIndex = i;
      if (this.skip) {
        const here = this.recordLocation();
        const id = locationId(here);
        const parked = this.skip.get(id);
        if (parked) {
          this.deadLetters.push({ operator: parked.operator ?? target.node.name, ...here, record: rec, error: parked.error, attempts: parked.attempts });
          this.parked.push(id);
          continue;
        }
      }
      if (entry) {
        entry(rec.value, rec.timestamp);
        continue;
      }
      if (keyed) target.ctx.setCurrentKey(rec.key as Key);
      this.dispatch(target, rec, edge.toInput);
    }
    this.acc.recordsIn += records.length;
    this.curChannel = undefined;
    const source = edge.partitioning === 'source';
    const wm = source ? Math.max(env.watermark, sourceWatermark(this.deps.plan, edge, records)) : env.watermark;
    if (wm > ch.watermark) ch.watermark = wm;
    if (source) {
      const spec = target.node.spec;
      const next = sourceIdlenessAfter(ch, env, spec.kind === 'source' ? spec.source.watermark.idleTimeoutMs : undefined);
      // A probe that changes nothing need not be committed: applied again, it still changes nothing.
      if (env.probe && next.idle === ch.idle && next.lastDataAt === ch.lastDataAt) this.unchangedProbes.add(env);
      ch.idle = next.idle;
      if (next.lastDataAt !== undefined) ch.lastDataAt = next.lastDataAt;
    } else ch.idle = env.idle === true;
    this.applying = env;
    this.advanceWatermark();
    this.applying = undefined;
  }

  /** Fire due processing-time timers (a periodic tick when no input arrives). */
  async tick(skip?: ReadonlyMap<string, ParkedFailure>): Promise<BatchResult> {
    this.acc = { outbox: [], recordsIn: 0, committed: false };
    this.skip = skip;
    this.parked = [];
    if (this.deps.backend.needsPrefetch) await this.prefetchFor([]);
    this.fireProcessingTimers();
    await this.commitPart(false);
    this.skip = undefined;
    return { outbox: this.acc.outbox, version: this.version, recordsIn: 0, committed: this.acc.committed, duplicatesDropped: 0, parked: this.parked };
  }

  /** The earliest pending processing-time timer (for scheduling ticks). */
  nextProcessingTime(): number {
    let t = MAX_WATERMARK;
    for (const n of this.order) t = Math.min(t, n.timers.processing.peekTime());
    return t;
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
    for (const n of this.order) {
      for (let t = n.timers.event.pollUpTo(wm); t; t = n.timers.event.pollUpTo(wm)) this.fireTimer(n, t);
      if (n.op.onWatermark) this.callback(n, undefined, wm, () => n.op.onWatermark!(wm));
    }
    this.progress.outputWatermark = wm;
    this.outputs.watermarkMoved = true;
    this.outputs.flushChannels();
  }

  private fireProcessingTimers(): void {
    const now = this.deps.clock.now();
    for (const n of this.order) {
      for (let t = n.timers.processing.pollUpTo(now); t; t = n.timers.processing.pollUpTo(now)) this.fireTimer(n, t);
    }
  }

  private fireTimer(n: NodeRuntime, t: TimerEntry): void {
    if (!n.op.onTimer) return;
    n.ctx.setCurrentKeyString(t.key, t.kg);
    this.callback(n, t, 0, () => n.op.onTimer!(t.domain, t.time, t.ns));
  }

  /**
   * Run a timer or watermark callback. A throw (there or in an operator fed what it
   * emitted) names the callback, so a retry can park it; a parked one is not run: the
   * timer counts as consumed, as its dead letter says.
   */
  private callback(n: NodeRuntime, t: TimerEntry | undefined, watermark: number, f: () => void): void {
    if (this.skip) {
      const id = locationId(this.callbackLocation(n, t, watermark));
      const parked = this.skip.get(id);
      if (parked) {
        const what = t ? { timer: { operator: n.node.name, domain: t.domain, time: t.time, key: keyFromString(t.key), namespace: t.ns, consumed: true as const } } : { watermark };
        this.deadLetters.push({ operator: parked.operator ?? n.node.name, ...what, error: parked.error, attempts: parked.attempts });
        this.parked.push(id);
        return;
      }
    }
    const firing = this.firing;
    firing.node = n;
    firing.timer = t;
    firing.watermark = watermark;
    try {
      f();
    } catch (e) {
      if (e instanceof UserCodeError) throw e;
      throw new RecordFailedError(n.node.name, undefined, e, this.location());
    } finally {
      firing.node = undefined;
      firing.timer = undefined;
    }
  }

  /** Where a callback is (timers fire in bulk: built only for a skip check or a throw). */
  private callbackLocation(n: NodeRuntime, timer: TimerEntry | undefined, watermark: number): CallbackLocation {
    const env = timer?.domain === 'processing' ? undefined : this.applying;
    const at = env ? { at: { channel: env.channel, seq: env.seq } } : {};
    return timer ? { operator: n.node.name, timer, ...at } : { operator: n.node.name, watermark, ...at };
  }

  /** The input record being applied, or the timer or watermark callback running (built only when needed). */
  private location(): FailureLocation | undefined {
    if (this.curChannel !== undefined) return this.recordLocation();
    const f = this.firing;
    return f.node ? this.callbackLocation(f.node, f.timer, f.watermark) : undefined;
  }

  private recordLocation(): RecordLocation {
    const l = { channel: this.curChannel!, seq: this.curSeq, index: this.curIndex };
    return this.curOffset === undefined ? l : { ...l, offset: this.curOffset };
  }

  /** @internal Deliver a record to a node of this stage. */
  dispatch(n: NodeRuntime, rec: StreamRecord, input: number): void {
    n.recordsIn++;
    try {
      n.op.processElement(rec, input);
    } catch (e) {
      if (e instanceof UserCodeError) throw e;
      throw new RecordFailedError(n.node.name, rec.value, e, this.location());
    }
  }

  /** @internal */
  get stateTxn(): StateTxn {
    return this.txn;
  }

  /** @internal */
  get clock(): Clock {
    return this.deps.clock;
  }

  private async prefetchFor(envelopes: readonly Envelope[]): Promise<void> {
    const want = entitiesToPrefetch(this.deps.plan, envelopes, this.order, this.inputWatermark, this.deps.clock.now());
    if (want.length) await this.deps.backend.prefetch(this.scope, want);
  }

  /**
   * Commit what was processed since the last commit of this call. `progressMoved`: even
   * an envelope without records moves a channel's position, which must be committed;
   * `next` (an aligned barrier) forces the commit and starts a new tracked interval.
   */
  private async commitPart(progressMoved: boolean, next?: TrackingUpdate['next']): Promise<void> {
    this.outputs.flushChannels();
    this.outputs.sealSinks();
    const outbox = this.pendingOutbox;
    this.pendingOutbox = [];
    for (const d of this.deadLetters) outbox.push({ kind: 'deadLetter', deadLetter: d });
    const inputLog = this.pendingInput;
    this.pendingInput = [];

    const writes = this.txn.writes();
    const { adds: timerAdds, deletes: timerDeletes } = timerChanges(this.order);
    this.deps.beforeCommit?.();
    const changed = next !== undefined || progressMoved || outbox.length > 0 || writes.length > 0 || timerAdds.length > 0 || timerDeletes.length > 0;
    if (changed) {
      const tracking = this.tracking ? { entities: timerAdds.length || timerDeletes.length ? changedTimerEntities(this.order) : [], ...(next ? { next } : {}) } : undefined;
      await this.deps.backend.commit({
        scope: this.scope,
        expectedVersion: this.version,
        writes,
        timerAdds,
        timerDeletes,
        progress: copyProgress(this.progress),
        outbox,
        ...(tracking ? { tracking } : {}),
        ...(inputLog.length ? { inputLog } : {}),
      });
      this.version++;
    }
    this.txn.reset();
    for (const n of this.order) {
      n.timers.event.clearChanges();
      n.timers.processing.clearChanges();
    }
    this.outputs.reset();
    this.deadLetters = [];
    this.acc.outbox.push(...outbox);
    this.acc.committed ||= changed;
  }
}
