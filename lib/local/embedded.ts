/**
 * The embedded runtime: a whole job in one process. Each stage partition has a
 * bounded FIFO input queue; a deterministic scheduler runs ready partitions
 * downstream-first (so queues drain and memory stays bounded), then pulls sources
 * while the first stages have room. Each batch goes through the partition's batch
 * runner (lib/runtime/batch-runner.ts: commit, outbox delivery, the failure policy),
 * so crashes and duplicate deliveries never change the results; a failed batch stays
 * in its queue and runs again on a recovered runtime.
 *
 * Output order is a pure function of the job, its input and its configuration:
 * the scheduler visits stages in reverse order and partitions in index order.
 */
import type { Sink } from '../api/sinks.ts';
import { type Clock, MAX_WATERMARK, systemClock } from '../api/types.ts';
import type { Job } from '../api/stream.ts';
import { BackPressureError } from '../errors.ts';
import { RestoreError } from '../checkpoint/driver-errors.ts';
import { compile, type PhysicalPlan } from '../graph/compile.ts';
import { BatchRunner, type BatchStep, MemoryAttempts } from '../runtime/batch-runner.ts';
import { PartitionRuntime } from '../runtime/partition.ts';
import { keyGroupsOf } from '../runtime/snapshots.ts';
import { InMemoryStateBackend } from '../state/memory.ts';
import type { StateBackend } from '../state/backend.ts';
import { type LingerPolicy, shouldLinger } from './linger.ts';
import { type Barrier, type Envelope, recordCount } from '../transport/envelope.ts';
import type { StoredDeadLetter } from '../checkpoint/dead-letter-store.ts';
import { OutboxDelivery } from './outbox-delivery.ts';
import type { EmbeddedOptions, RestorePlan, RuntimeStats } from './embedded-options.ts';
import type { IngestPressure, IngestTarget, OfferResult, Recalled, ShedCount } from './ingest-target.ts';
import type { ShedDecision } from '../transport/load-shedding.ts';
import type { KeyedOffer } from './ingest-keys.ts';
import { type FeedHost, openSourceFeed, type SourceFeed } from './source-feed.ts';
import type { RejectedInput } from '../transport/sources.ts';
import { sourceChunking } from './rounds.ts';
import { addLateDropped, newCounters, type RuntimeCounters, runtimeStats, type StageQueue, stageQueues } from './embedded-stats.ts';
import { ackFrom, enqueueTo, newSlot, nextBatch, type Slot } from './slot.ts';
import { TimeSlicer } from './time-slice.ts';
import { Arrivals, type IngestView, ingestPressure, ingestStreams, offerIngest, recallIngestKey, shedIngest, validateIngest } from './embedded-ingest.ts';
import { faultSite } from '../util/fault-sites.ts';
import type { CrashPoint } from './faults.ts';

export type { EmbeddedCheckpointHooks, EmbeddedOptions, RestorePlan, RuntimeStats } from './embedded-options.ts';
export { chunkedRounds } from './rounds.ts';

export class EmbeddedRuntime implements IngestTarget {
  readonly plan: PhysicalPlan;
  /** Where partitions keep keyed state. @internal */
  readonly backend: StateBackend;
  readonly clock: Clock;
  readonly rejectedInputs: RejectedInput[] = [];
  private readonly slots: Slot[][] = [];
  private readonly sources: SourceFeed[] = [];
  /** The host of sources[i], built once (the scheduler hands it over at every step). */
  private readonly hosts: FeedHost[] = [];
  /** Chunks a source may send in one round (chunkedRounds). */
  private readonly chunksPerRound: number;
  private readonly sinks = new Map<string, Sink<any>>();
  private readonly delivery: OutboxDelivery;
  private readonly opts: Required<Pick<EmbeddedOptions, 'sourceBatchSize' | 'maxEnvelopesPerBatch' | 'batchRecords' | 'queueCapacity' | 'maxAttempts'>>;
  private started = false;
  private stopping = false;
  private wake?: () => void;
  /** Scheduling rounds so far (linger.ts counts in rounds). */
  private round = 0;
  private readonly linger: LingerPolicy;
  private counters: RuntimeCounters;
  /** Per stream, events its load shedding's sampler saw while shedding. */
  private readonly shedSeen = new Map<string, number>();
  /** Time slicing (`sliceMs`): batch and chunk sizes by the measured cost per record. */
  private readonly slicer: TimeSlicer | undefined;
  /** When the scheduler last let the event loop run (timers, HTTP requests, signals). */
  private lastYield = 0;
  private readonly arrivals = new Arrivals();
  private readonly ingest: IngestView;

  constructor(
    readonly job: Job,
    private readonly options: EmbeddedOptions = {},
  ) {
    this.plan = compile(job.graph);
    this.counters = newCounters(this.plan.stages.length);
    this.backend = options.backend ?? new InMemoryStateBackend();
    this.clock = options.clock ?? systemClock;
    const batchRecords = options.batchRecords ?? 16_384;
    const chunking = sourceChunking(this.plan, options, batchRecords);
    this.chunksPerRound = chunking.chunksPerRound;
    this.opts = {
      sourceBatchSize: chunking.batchSize,
      maxEnvelopesPerBatch: options.maxEnvelopesPerBatch ?? 256,
      batchRecords,
      queueCapacity: options.queueCapacity ?? 65536,
      maxAttempts: options.maxAttempts ?? 3,
    };
    this.linger = { rounds: options.lingerRounds ?? 2, records: Math.min(options.lingerRecords ?? 4096, this.opts.batchRecords), envelopes: this.opts.maxEnvelopesPerBatch };
    for (const node of this.plan.job.sinks()) {
      if (node.spec.kind !== 'sink') continue;
      this.sinks.set(node.name, options.sinks?.[node.name] ?? node.spec.sink);
    }
    this.delivery = new OutboxDelivery(this.sinks, (env) => this.enqueue(env), options);
    this.slicer = options.sliceMs === undefined ? undefined : new TimeSlicer(options.sliceMs);
    const rt = this;
    this.ingest = {
      sources: this.sources,
      hosts: this.hosts,
      slots: this.slots,
      queueCapacity: this.opts.queueCapacity,
      clock: this.clock,
      arrivals: this.arrivals,
      slicer: this.slicer,
      wake: () => rt.wake?.(),
    };
  }

  /** Dead letters delivered so far (each once; a resumed run's include those before its checkpoint). */
  get deadLetters(): readonly StoredDeadLetter[] {
    return this.delivery.deadLetters.list();
  }

  /** Open partitions (recovering committed state), sinks and sources. */
  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    for (const s of this.sinks.values()) await s.open?.();
    if (this.options.restore) this.install(this.options.restore);
    for (const stage of this.plan.stages) {
      const downstream = !this.plan.edges.some((e) => e.toStage === stage.id && e.from.kind === 'source');
      this.slots.push(Array.from({ length: stage.parallelism }, (_, p) => newSlot(stage.id, p, this.newRunner(stage.id, p), downstream)));
    }
    // Every queue exists before a recovered outbox is delivered into it.
    for (const row of this.slots) for (const slot of row) await slot.runner.open();
    for (const edge of this.plan.edges) {
      const feed = openSourceFeed(this.plan, edge, this.options, this.clock);
      if (feed) {
        this.sources.push(feed);
        this.hosts.push(this.newFeedHost(feed));
      }
    }
  }

  /** Put a checkpoint's state into the (fresh, in-memory) backend before partitions open. */
  private install(r: RestorePlan): void {
    if (!(this.backend instanceof InMemoryStateBackend)) throw new RestoreError('state backend', 'the in-memory backend of the embedded runtime', this.backend.constructor.name);
    for (const stage of this.plan.stages) {
      for (let p = 0; p < stage.parallelism; p++) {
        const part = r.partitions.get(`${stage.id}/${p}`);
        if (part) this.backend.install({ job: this.plan.job.name, stage: stage.id, partition: p }, part, keyGroupsOf(p, stage.parallelism, this.plan.job.maxParallelism));
      }
    }
  }

  /** Run until every bounded source is exhausted and all results are out; then close sinks. */
  async run(): Promise<RuntimeStats> {
    await this.start();
    if (this.sources.some((s) => !s.reader.bounded)) {
      throw new BackPressureError(0, 'run() needs bounded sources; use start() + loop() for unbounded ones');
    }
    const hooks = this.options.checkpoints;
    await this.loop(() => this.drained() && (!hooks || hooks.finished()));
    await this.close();
    return this.stats();
  }

  /** Run the scheduler until `until()` holds or stop() is called. */
  async loop(until: () => boolean = () => false): Promise<void> {
    await this.start();
    this.lastYield = performance.now();
    const slice = this.slicer?.sliceMs ?? 20;
    while (!this.stopping) {
      const progressed = await this.step();
      if (until()) return;
      if (!progressed) {
        await this.waitForWork();
        this.lastYield = performance.now();
      } else if (performance.now() - this.lastYield > slice) {
        // A busy loop of resolved promises would starve timers, HTTP requests and signals.
        await this.yieldNow();
      }
    }
  }

  private async yieldNow(): Promise<void> {
    await new Promise<void>((resolve) => setImmediate(resolve));
    this.lastYield = performance.now();
  }

  /** Wake the scheduler when it waits for work (a savepoint was asked for, input arrived). */
  wakeUp(): void {
    this.wake?.();
  }

  stop(): void {
    this.stopping = true;
    this.wake?.();
  }

  async close(): Promise<void> {
    for (const s of this.sinks.values()) await s.close?.();
    for (const s of this.sources) s.reader.close?.();
  }

  /**
   * One scheduling round; true when anything happened. Work that completes synchronously
   * (in-memory readers, a round without timers or checkpoint decisions) is not awaited:
   * a round costs one promise of its own, not one per call it makes.
   */
  async step(): Promise<boolean> {
    let progressed = false;
    const slots = this.slots;
    const round = ++this.round;
    const checkpointing = this.options.checkpoints?.settled?.() === false;
    for (let s = slots.length - 1; s >= 0; s--) {
      if (!this.downstreamHasRoom(s)) continue;
      const row = slots[s];
      for (let i = 0; i < row.length; i++) {
        const slot = row[i];
        if (slot.head < slot.queue.length) {
          // Waiting counts as progress: it only happens while input arrives, so the loop must not sleep.
          progressed = true;
          if (shouldLinger(slot, round, this.linger, checkpointing)) {
            slot.lingered++;
            continue;
          }
          // A backlog built while waiting is taken now, a batch for each round waited at most
          // (as many batches as those rounds would have run), so no barrier behind it waits longer.
          const waited = slot.lingered;
          slot.lingered = 0;
          await this.processSlot(slot);
          for (let k = 0; k < waited && slot.head < slot.queue.length && this.downstreamHasRoom(s); k++) await this.processSlot(slot);
          // Time slicing: the event loop runs between batches once a slice is used up, not only between rounds.
          if (this.slicer && performance.now() - this.lastYield > this.slicer.sliceMs) await this.yieldNow();
        }
      }
    }
    const hooks = this.options.checkpoints;
    for (let i = 0; i < this.sources.length; i++) {
      for (let chunk = 1; ; chunk++) {
        const pulled = this.sources[i].pull(this.hosts[i]);
        if (!(pulled === true || (pulled !== false && (await pulled)))) break;
        progressed = true;
        // Another chunk in this round (chunkedRounds): only while no epoch is in flight, with
        // the checkpoint tick between chunks, so that a barrier goes in exactly where one
        // round per chunk would have put it; a tick that does anything ends the chunks.
        if (chunk >= this.chunksPerRound) break;
        if (hooks) {
          if (!hooks.settled?.()) break;
          const ticked = hooks.tick(this.drained());
          if (ticked !== false) {
            await ticked;
            break;
          }
        }
      }
    }
    if (this.timersDue()) {
      await this.tickTimers();
      progressed = true;
    }
    if (hooks) {
      const ticked = hooks.tick(this.drained());
      if (ticked === true || (ticked !== false && (await ticked))) progressed = true;
    }
    return progressed;
  }

  private idle(): boolean {
    for (const row of this.slots) for (const s of row) if (s.head < s.queue.length) return false;
    return true;
  }

  /** Bounded input exhausted, nothing replaying, every queue empty. */
  private drained(): boolean {
    for (const s of this.sources) if (!s.done || s.replaying) return false;
    return this.idle();
  }

  private newFeedHost(src: SourceFeed): FeedHost {
    const slicer = this.slicer;
    const batchSize = this.opts.sourceBatchSize;
    return {
      clock: this.clock,
      get batchSize() {
        return slicer ? slicer.records(batchSize) : batchSize;
      },
      room: () => {
        for (const s of this.slots[src.stage]) if (s.queuedRecords >= this.opts.queueCapacity) return false;
        return true;
      },
      enqueue: (env, arrivedAt) => {
        if (arrivedAt !== undefined) this.arrivals.mark(env, arrivedAt);
        this.enqueue(env);
      },
      rejected: (r) => this.rejectedInputs.push(r),
      accepted: (n) => {
        this.counters.sourceRecords += n;
        if (n) {
          faultSite('source.read');
          this.options.onSourceRecords?.(this.counters.sourceRecords);
        }
      },
    };
  }

  /** Barrier `epoch` into every source partition, after everything read so far. @internal */
  injectBarrier(barrier: Omit<Barrier, 'positions'>): void {
    this.sources.forEach((src, i) => src.inject(barrier, this.hosts[i]));
    this.wake?.();
  }

  /** Whether restored input (a checkpoint's logged records) is still being replayed. */
  replaying(): boolean {
    return this.sources.some((s) => s.replaying);
  }

  /** Records sent per source partition (`${source}#${p}`). */
  sourceHeads(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const src of this.sources) src.heads(out);
    return out;
  }

  /** The sinks records go to (after `sinks` overrides). */
  sinkInstances(): Sink<any>[] {
    return [...this.sinks.values()];
  }

  private async waitForWork(): Promise<void> {
    const nextTimer = Math.min(this.options.checkpoints?.nextWakeAt() ?? Infinity, ...this.slots.flat().map((s) => s.runtime.nextProcessingTime()));
    const delay = Math.max(1, Math.min(50, Number.isFinite(nextTimer) ? nextTimer - this.clock.now() : 50));
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, delay);
      this.wake = () => {
        clearTimeout(t);
        resolve();
      };
    });
    this.wake = undefined;
  }

  private downstreamHasRoom(stage: number): boolean {
    const outputs = this.plan.stages[stage].outputs;
    for (let e = 0; e < outputs.length; e++) {
      for (const s of this.slots[this.plan.edges[outputs[e]].toStage]) if (s.queuedRecords >= this.opts.queueCapacity) return false;
    }
    return true;
  }

  /** Whether some partition has a processing-time timer due (the clock is read only when one is pending). */
  private timersDue(): boolean {
    let next = MAX_WATERMARK;
    for (const row of this.slots) for (const slot of row) next = Math.min(next, slot.runtime.nextProcessingTime());
    return next !== MAX_WATERMARK && next <= this.clock.now();
  }

  private async tickTimers(): Promise<void> {
    const now = this.clock.now();
    for (const row of this.slots) {
      for (const slot of row) {
        if (slot.runtime.nextProcessingTime() > now) continue;
        await this.runBatch(slot, undefined);
      }
    }
  }

  private enqueue(env: Envelope): void {
    const edge = this.plan.edges[env.edge];
    const slot = this.slots[edge.toStage][env.toPartition];
    // What a stage sends on (its selectivity, scaling advice), counted before it waits in a queue.
    if (edge.from.kind === 'stage') this.counters.recordsOut[edge.from.stage] += recordCount(env);
    enqueueTo(slot, env, this.round);
  }

  private processSlot(slot: Slot): Promise<void> {
    const slicer = this.slicer;
    const batch = nextBatch(slot, this.opts.maxEnvelopesPerBatch, slicer ? slicer.records(this.opts.batchRecords) : this.opts.batchRecords);
    const t0 = performance.now();
    // Measured whole (commit and delivery included): the stretch the event loop waits for,
    // and the stage's useful time (scaling advice).
    return this.runBatch(slot, batch).then(() => {
      const ms = performance.now() - t0;
      let records = 0;
      for (const env of batch) records += recordCount(env);
      this.counters.busyMs[slot.stage] += ms;
      this.counters.batchRecords[slot.stage] += records;
      slicer?.observe(slot.stage, records, ms);
    });
  }

  /** One batch (undefined: the timers due); on a failure the batch stays queued and the partition recovers. */
  private async runBatch(slot: Slot, batch: readonly Envelope[] | undefined): Promise<void> {
    const out = await slot.runner.run(batch, slot.skip);
    if (out.ok) {
      const result = out.result;
      if (result.committed) this.counters.commits++;
      this.counters.duplicatesDropped += result.duplicatesDropped;
      addLateDropped(this.counters, result.lateDropped);
      if (batch) ackFrom(slot, batch.length);
      return;
    }
    if (!out.retryable) throw out.error;
    this.counters.recoveries++;
    await slot.runner.open();
  }

  private newRunner(stage: number, partition: number): BatchRunner {
    const faults = this.options.faults;
    return new BatchRunner({
      open: () => this.openPartition(stage, partition),
      outbox: this.delivery.portsFor(stage, partition),
      attempts: new MemoryAttempts(),
      maxAttempts: this.opts.maxAttempts,
      step: (step) => {
        faultSite(SITES[step]);
        faults?.maybeCrash(CRASHES[step]);
      },
    });
  }

  private openPartition(stage: number, partition: number): Promise<PartitionRuntime> {
    return PartitionRuntime.open({
      plan: this.plan,
      stage,
      partition,
      backend: this.backend,
      clock: this.clock,
      beforeCommit: () => {
        faultSite('batch.commit.before');
        this.options.faults?.maybeCrash('before-commit');
      },
      checkpointStore: this.options.checkpoints?.store,
    });
  }

  // ---- ingestion (IngestTarget: embedded-ingest.ts) ----

  streams(): readonly string[] {
    return ingestStreams(this.ingest);
  }

  validate(stream: string, event: unknown): string | undefined {
    return validateIngest(this.ingest, stream, event);
  }

  offer(stream: string, events: readonly unknown[], keyed?: KeyedOffer, shed?: ShedCount): OfferResult {
    const r = offerIngest(this.ingest, stream, events, keyed);
    if (r.ok && shed) {
      const bySource = (this.counters.shed[stream] ??= {});
      bySource[shed.reason] = (bySource[shed.reason] ?? 0) + shed.count;
    }
    return r;
  }

  /** The stream's opt-in load shedding (SourceOptions.shed): the events to drop now, or undefined. */
  shed(stream: string, events: readonly unknown[], pressure: IngestPressure): ShedDecision | undefined {
    const seen = this.shedSeen.get(stream) ?? 0;
    const d = shedIngest(this.ingest, stream, events, pressure, seen);
    if (d) this.shedSeen.set(stream, seen + events.length);
    return d;
  }

  /** What is remembered of an Idempotency-Key (the ingestion endpoint's replays). @internal */
  recall(key: string): Recalled {
    return recallIngestKey(this.ingest, key);
  }

  pressure(stream: string): IngestPressure | undefined {
    return ingestPressure(this.ingest, stream);
  }

  // ---- observability ----

  stats(): RuntimeStats {
    for (const s of this.sources) s.settle();
    return runtimeStats(this.plan, this.slots, this.counters, this.delivery.deadLetters, this.rejectedInputs.length);
  }

  /** Queued input per stage and how full its fullest partition's queue is. */
  stageQueues(): Record<string, StageQueue> {
    return stageQueues(this.plan, this.slots, this.opts.queueCapacity);
  }
}

/** The fault site and the injected crash after each step of a batch. */
const SITES: Record<BatchStep, string> = { committed: 'batch.commit.after', delivered: 'outbox.delivered', cleared: 'outbox.cleared' };
const CRASHES: Record<BatchStep, CrashPoint> = { committed: 'after-commit', delivered: 'after-deliver', cleared: 'before-ack' };

/** Run a bounded job to completion on the embedded runtime. */
export async function runJob(job: Job, options: EmbeddedOptions = {}): Promise<{ runtime: EmbeddedRuntime; stats: RuntimeStats }> {
  const runtime = new EmbeddedRuntime(job, options);
  const stats = await runtime.run();
  return { runtime, stats };
}
