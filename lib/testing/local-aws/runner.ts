/**
 * Local-AWS mode: a whole job through the real Lambda handlers against local servers
 * (DynamoDB Local, fauxqs) or whatever the SDK's endpoint variables name.
 *
 * - Resources as a deployment has them (naming.ts), under a per-run prefix so runs on a
 *   shared server never meet: per stage a FIFO queue and its DLQ, the state table, a
 *   bucket for envelopes too large for a message.
 * - One operator handler per stage (its own warm cache, as one Lambda function per stage),
 *   each fed by an SqsEventSource on its stage queue; all share the job's sinks, run
 *   in-process (the handler factory accepts injected sinks; we open and close them).
 * - Input: ingestion sources through the ingest handler, other sources straight into
 *   their queue (feeder.ts), chunked as the embedded runtime chunks them.
 * - A bounded run is over when all input and end markers are sent, every stage queue
 *   is empty (nothing visible, in flight or delayed) and no invocation runs or waits for
 *   a retry, twice in a row with no invocation in between. Outputs are delivered before
 *   an input message is deleted, so this state is final.
 * - Checkpoints (options.checkpoints, checkpointing.ts): partitions snapshot to S3 and ack
 *   through DynamoDB, the coordinator's steps run in process, sources are fed straight
 *   (so a restore can skip what the checkpoint holds), and a bounded run ends with one
 *   more checkpoint once drained, so a transactional output holds everything.
 * - Every request is counted in one AwsAccounting (the handlers', the pollers'), and the
 *   run's cost is estimated with the price table (prices.ts). Setup and our own polling
 *   of queue depths go to a separate accounting: a deployment pays them once, not per event.
 */
import { randomBytes } from 'node:crypto';
import type { Sink } from '../../api/sinks.ts';
import type { SourceBinding, SourceDef } from '../../api/sources.ts';
import type { Job } from '../../api/stream.ts';
import { type Clock, systemClock } from '../../api/types.ts';
import { BackPressureError, ConfigError } from '../../errors.ts';
import { isTransactional } from '../../api/sinks.ts';
import { compile, type PhysicalPlan } from '../../graph/compile.ts';
import { createReader, type RejectedInput } from '../../transport/sources.ts';
import { AwsAccounting } from '../../aws/cost/accounting.ts';
import { createStateTable, DynamoDbStateBackend } from '../../aws/dynamodb/dynamodb-state.ts';
import type { BarrierAck } from '../../transport/envelope.ts';
import { LocalAwsCheckpointing, type LocalAwsCheckpointOptions } from './checkpointing.ts';
import { DEFAULT_MAX_RECEIVE_COUNT } from '../../aws/operator/group-backoff.ts';
import { DynamoDbIdempotencyStore } from '../../aws/ingest/idempotency-store.ts';
import { createIngestHandler, type IngestHandler } from '../../aws/ingest/ingest-handler.ts';
import { stateTableName } from '../../aws/naming.ts';
import { createOperatorHandler } from '../../aws/operator/operator-handler.ts';
import { type CostEstimate, estimateCost, type LambdaUsage } from '../../aws/cost/prices.ts';
import { createBucket, S3BlobStore } from '../../aws/s3/s3-blob-store.ts';
import { createStageQueues, type StageQueues, StaticQueues } from '../../aws/sqs/sqs-queues.ts';
import { SqsTransport } from '../../aws/sqs/sqs-transport.ts';
import type { LocalAwsEnvironment } from './endpoints.ts';
import { type DeadLetterReport, drainDeadLetters } from './dead-letters.ts';
import { type EventSourceMetrics, SqsEventSource } from './event-source.ts';
import { MetricTally } from './metric-tally.ts';
import { OPERATOR_METRICS } from '../../aws/handler-metrics.ts';
import { type FeederContext, type FeedTarget, feedSource } from './feeder.ts';
import { queueDepth } from './queues.ts';
import { type StallWatch, watchRun } from './stall-watch.ts';
import { LocalAwsLoadsFile, measureLocalAwsLoads } from './stage-loads.ts';

export type { DeadLetterReport } from './dead-letters.ts';

export interface LocalAwsOptions {
  readonly env: LocalAwsEnvironment;
  /** Replace sinks by name (e.g. `sluice run --output`). */
  readonly sinks?: Readonly<Record<string, Sink<any>>>;
  /** Rebind sources by name (e.g. `sluice run --input`). */
  readonly sources?: Readonly<Record<string, SourceBinding<any>>>;
  /** Prefix of queue, table and bucket names; default a fresh `r` + 3 base-36 characters. */
  readonly runId?: string;
  /** Events per chunk (one ingest request or one direct message batch), as the embedded sourceBatchSize. Default 512. */
  readonly chunkSize?: number;
  /** Per stage, 2..1000 (Lambda's maximum concurrency). Default 1000: the groups bound it. */
  readonly maximumConcurrency?: number;
  /** Messages per Lambda batch, 1..10. Default 10. */
  readonly batchSize?: number;
  /** Failed messages come back after this instead of the visibility timeout (default 100 ms, to keep local runs fast). */
  readonly retryDelayMs?: number;
  readonly timeoutMs?: number;
  readonly memoryLimitInMB?: number;
  readonly maxAttempts?: number;
  /** The stage queues' redrive limit, passed to the handlers too. Default DEFAULT_MAX_RECEIVE_COUNT (100), as deployed. */
  readonly maxReceiveCount?: number;
  readonly maxMessageBytes?: number;
  readonly clock?: Clock;
  /** The state backend's log compaction cadence (DynamoDbStateBackend compactAfterCommits); default the backend's. */
  readonly compactAfterCommits?: number;
  /** Handler errors (failed groups, thrown batches) as log lines; default ignored. With it, a run quiet for stallReportMs says what it waits on (stall-watch.ts). */
  readonly log?: (line: string) => void;
  /** With log: no progress for this long prints a report (default 20 s). */
  readonly stallReportMs?: number;
  /** Checkpoint epochs with the Step Functions steps in process; restore with start 'resume'. */
  readonly checkpoints?: LocalAwsCheckpointOptions;
  /** Called with the records sent so far after each chunk (e.g. --crash-after). */
  readonly onSourceRecords?: (n: number) => void;
}

export interface StageReport {
  readonly stage: number;
  readonly name: string;
  readonly metrics: EventSourceMetrics;
  /** Records the stage's batches took in, and sent downstream (the handler's recordsIn and recordsOut metrics, summed). */
  readonly recordsIn: number;
  readonly recordsOut: number;
}

export interface LocalAwsRunResult {
  readonly sourceRecords: number;
  readonly rejectedInputs: readonly RejectedInput[];
  readonly deadLetters: readonly DeadLetterReport[];
  readonly durationMs: number;
  readonly stages: readonly StageReport[];
  readonly lambda: LambdaUsage;
  readonly cost: CostEstimate;
  readonly accounting: AwsAccounting;
}

interface FeedPlan extends FeedTarget {
  readonly binding: SourceBinding<any>;
}

export class LocalAwsRuntime {
  readonly plan: PhysicalPlan;
  /** What a deployment pays per event: handlers, ingest, pollers. */
  readonly accounting = new AwsAccounting();
  /** Setup and the runner's own queue-depth checks. */
  readonly overhead = new AwsAccounting();
  readonly runId: string;
  readonly rejectedInputs: RejectedInput[] = [];
  readonly tableName: string;
  readonly bucket: string;
  /** The stage queues and their DLQs, once started. @internal */
  queues: StageQueues[] = [];
  /** One event source per stage, once started. @internal */
  sources: SqsEventSource[] = [];
  /** Per stage, the handler's metrics (what CloudWatch would sum). */
  private readonly metricTallies: MetricTally[] = [];
  ingest?: IngestHandler;
  private transport?: SqsTransport;
  private readonly sinks = new Map<string, Sink<any>>();
  private readonly clock: Clock;
  private ingestUsage = { invocations: 0, billedMs: 0 };
  private sourceRecords = 0;
  /** Records sent by the feeders so far. */
  private fed = 0;
  private feeding: Promise<number>[] = [];
  private stopping = false;
  private started = false;
  /** For the stall report: what the run is doing. */
  private phase = 'starting';
  private watch?: StallWatch;
  private loadsFile?: LocalAwsLoadsFile;
  /** With options.checkpoints, once started. @internal */
  checkpointing?: LocalAwsCheckpointing;
  private readonly identity?: ReturnType<typeof LocalAwsCheckpointing.identity>;

  constructor(
    readonly job: Job,
    private readonly options: LocalAwsOptions,
  ) {
    this.plan = compile(job.graph);
    this.clock = options.clock ?? systemClock;
    if (options.checkpoints) this.identity = LocalAwsCheckpointing.identity(options.checkpoints);
    this.runId = this.identity ? this.identity.runId : (options.runId ?? `r${randomBytes(2).readUInt16BE(0).toString(36).padStart(3, '0')}`);
    this.tableName = stateTableName(`${this.runId}-${this.plan.job.name}`);
    this.bucket = `sluice-${this.runId}-spill`.toLowerCase();
    for (const node of this.plan.job.sinks()) {
      if (node.spec.kind === 'sink') this.sinks.set(node.name, options.sinks?.[node.name] ?? node.spec.sink);
    }
  }

  private get prefix(): string {
    return `${this.runId}-`;
  }

  /** Create the resources, open the sinks and start one event source per stage. */
  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    const { clients } = this.options.env;
    const o = this.options;
    // The deployed stage queues' limit (infra/stages.ts), which is also the handler's default.
    const maxReceiveCount = o.maxReceiveCount ?? DEFAULT_MAX_RECEIVE_COUNT;
    const timeoutMs = o.timeoutMs ?? 30_000;
    await createStateTable(clients.dynamodb, this.tableName);
    await createBucket(clients.s3, this.bucket);
    // Lambda wants the visibility timeout at least 6x the function timeout.
    this.queues = await createStageQueues(clients.sqs, this.plan, { prefix: this.prefix, maxReceiveCount, visibilityTimeoutSeconds: Math.ceil((6 * timeoutMs) / 1000), maxMessageBytes: o.maxMessageBytes });
    this.overhead.record('sqs', 'CreateQueue', { requests: 2 * this.queues.length });
    const queues = new StaticQueues(this.queues);
    const blobs = new S3BlobStore({ s3: clients.s3, bucket: this.bucket, prefix: `${this.plan.job.name}/`, accounting: this.accounting });
    const sinks = Object.fromEntries(this.sinks);
    for (const s of this.sinks.values()) await s.open?.();
    this.transport = new SqsTransport({ sqs: clients.sqs, job: this.plan.job.name, queues, accounting: this.accounting, blobs, maxMessageBytes: o.maxMessageBytes });
    const idempotency = new DynamoDbIdempotencyStore({ client: clients.dynamodb, tableName: this.tableName, job: this.plan.job.name, accounting: this.accounting });
    // With checkpoints, accepted events wake the coordinator, as CoordinatorWakeUp does on AWS (the activity item; an ended loop resumes).
    const wakeUp = o.checkpoints ? { onInput: () => this.checkpointing!.touch() } : undefined;
    this.ingest = createIngestHandler({ job: this.job, sqs: clients.sqs, queues, clock: this.clock, accounting: this.accounting, maxMessageBytes: o.maxMessageBytes, idempotency, wakeUp });
    // One set of transactional sinks (the CLI's output file, the job's S3 file sinks), committed with the checkpoints.
    const transactional = [...new Set([...(o.checkpoints?.sinks ?? []), ...[...this.sinks.values()].flatMap((x) => (isTransactional(x) ? [x] : []))])];
    const cp = o.checkpoints ? await LocalAwsCheckpointing.create(this.job, this.plan, this.options.env, this.identity!, o.checkpoints, { queues, sinks: transactional, refedSourceStages: this.refedSourceStages(), overhead: this.overhead, stageQueues: this.queues }, this.accounting) : undefined;
    this.checkpointing = cp;
    for (const stage of this.plan.stages) {
      const metrics = new MetricTally();
      this.metricTallies[stage.id] = metrics;
      const handler = createOperatorHandler({
        job: this.job,
        metrics,
        stage: stage.id,
        sqs: clients.sqs,
        dynamodb: clients.dynamodb,
        tableName: this.tableName,
        queues,
        blobs,
        sinks,
        s3: clients.s3,
        // S3 file sinks: the run's snapshot bucket with checkpoints (their pointers in the one table), as a deployment has them.
        bucket: cp?.bucket ?? this.bucket,
        clock: this.clock,
        accounting: this.accounting,
        backend: o.compactAfterCommits === undefined ? undefined : new DynamoDbStateBackend({ client: clients.dynamodb, tableName: this.tableName, accounting: this.accounting, blobs, compactAfterCommits: o.compactAfterCommits, inputLogStore: cp?.store }),
        logInput: cp !== undefined,
        maxAttempts: o.maxAttempts,
        maxReceiveCount,
        maxMessageBytes: o.maxMessageBytes,
        ...(cp ? { checkpointStore: cp.store, onBarrierAcks: (acks: readonly BarrierAck[]) => cp.recordAcks(acks) } : {}),
      });
      this.sources.push(
        new SqsEventSource({
          sqs: clients.sqs,
          queueUrl: this.queues[stage.id].url,
          handler,
          functionName: `${this.plan.job.name}-${stage.name}`.slice(0, 64),
          batchSize: o.batchSize,
          maximumConcurrency: o.maximumConcurrency,
          timeoutMs,
          retryDelayMs: o.retryDelayMs ?? 100,
          memoryLimitInMB: o.memoryLimitInMB,
          accounting: this.accounting,
          onError: (e) => o.log?.(`stage ${stage.name}: ${e.message}`),
        }),
      );
    }
    // Restored state is in place, and the coordinator resumed, before any partition runs.
    if (cp) await cp.beforeStart();
    await Promise.all(this.sources.map((s) => s.start()));
    this.phase = 'running';
    if (o.checkpoints) {
      const t0 = performance.now();
      const maxConcurrency = o.maximumConcurrency ?? null;
      this.loadsFile = new LocalAwsLoadsFile(o.checkpoints.dir, () => ({ ...measureLocalAwsLoads(this.plan, this.report(), performance.now() - t0), runId: this.runId, at: this.clock.now(), maxConcurrency }));
    }
    if (o.log) this.watchStalls(o.log);
  }

  private watchStalls(log: (line: string) => void): void {
    const view = () => ({ phase: this.phase, fed: this.fed, checkpoints: this.checkpointing?.loop });
    this.watch = watchRun(view, this.plan.stages, this.sources, this.queues, this.options.env.clients.sqs, this.overhead, { quietMs: this.options.stallReportMs ?? 20_000, log });
  }

  /** Where each source's events go, and what they are read from. */
  private feedPlans(): FeedPlan[] {
    const out: FeedPlan[] = [];
    for (const edge of this.plan.edges) {
      if (edge.from.kind !== 'source') continue;
      const node = this.plan.job.nodes[edge.toNode];
      if (node.spec.kind !== 'source') continue;
      const def: SourceDef<any> = node.spec.source;
      const binding = this.options.sources?.[def.name] ?? def.binding;
      const partitions = this.plan.stages[edge.toStage].parallelism;
      // The ingest function knows only sources declared as ingestion streams. With checkpoints,
      // bound sources are fed straight, so a restore can skip what the checkpoint holds.
      const cp = this.checkpointing;
      const ingest = def.binding.kind === 'ingest' && !(cp && binding.kind !== 'ingest') ? this.ingest : undefined;
      out.push({ def, stage: edge.toStage, partitions, binding, ingest, skip: cp && binding.kind !== 'ingest' ? cp.skipOf(def.name) : undefined });
    }
    return out;
  }

  /**
   * With checkpoints, the source stages whose every source is fed straight from a
   * replayable input: a resume empties their queues and feeds them again from what each
   * partition consumed. Ingestion streams keep their queues (accepted input is durable).
   */
  private refedSourceStages(): number[] {
    const byStage = new Map<number, boolean[]>();
    for (const edge of this.plan.edges) {
      if (edge.from.kind !== 'source') continue;
      const node = this.plan.job.nodes[edge.toNode];
      if (node.spec.kind !== 'source') continue;
      const binding = this.options.sources?.[node.spec.source.name] ?? node.spec.source.binding;
      byStage.set(edge.toStage, [...(byStage.get(edge.toStage) ?? []), binding.kind !== 'ingest']);
    }
    const out: number[] = [];
    for (const [stage, refed] of byStage) {
      if (refed.every(Boolean)) out.push(stage);
      else if (refed.some(Boolean)) throw new ConfigError('checkpoints', `the sources of stage ${this.plan.stages[stage].name} all bound to inputs or all ingestion streams (a resume empties the queue of the first kind and keeps the other's)`, 'both kinds');
    }
    return out;
  }

  /** Start feeding every source that has something to read (all but unbound ingestion streams). */
  feed(): void {
    // A resume's replay (the operator functions take it from the input log) counts as input taken in, as --crash-after counts.
    const replayed = this.checkpointing?.replayedRecords ?? 0;
    if (replayed > 0) {
      this.fed += replayed;
      this.options.onSourceRecords?.(this.fed);
    }
    const ctx: FeederContext = {
      plan: this.plan,
      sqs: this.options.env.clients.sqs,
      transport: this.transport!,
      accounting: this.accounting,
      clock: this.clock,
      chunkSize: this.options.chunkSize ?? 512,
      // With checkpoints the feeder stays close behind the partitions, so input sent (what
      // --crash-after counts) means input processed, give or take a few messages.
      maxBacklogMessages: this.options.checkpoints ? 4 : 10_000,
      ...(this.options.checkpoints ? { backlogQueues: this.queues.map((q) => q.url) } : {}),
      // A resume feeds again under new deduplication ids (the queues were emptied; SQS remembers ids for 5 minutes).
      restoreEpoch: this.checkpointing?.restoreEpoch ?? 0,
      onIngestInvocation: (ms) => {
        this.ingestUsage.invocations++;
        this.ingestUsage.billedMs += ms;
      },
      rejected: this.rejectedInputs,
      shouldStop: () => this.stopping,
      afterChunk: async (n) => {
        this.fed += n;
        this.options.onSourceRecords?.(this.fed);
        // The coordinator opens epochs only for input it has not covered (grain 0 locally).
        if (n > 0) await this.checkpointing?.touch();
      },
    };
    for (const p of this.feedPlans()) {
      if (p.binding.kind === 'ingest') continue;
      this.feeding.push(feedSource(ctx, p, createReader(p.binding, p.def.name, this.clock)).then((n) => (this.sourceRecords += n)));
    }
  }

  /** Run a bounded job to the end: feed, wait until every queue is drained, stop. */
  async run(): Promise<LocalAwsRunResult> {
    const unbounded = this.feedPlans().filter((p) => p.binding.kind === 'ingest' || (p.binding.kind === 'generator' && p.binding.count === undefined));
    if (unbounded.length) throw new BackPressureError(0, `run() needs bounded sources ("${unbounded[0].def.name}" is ${unbounded[0].binding.kind}); use start() + feed() for unbounded ones`);
    const t0 = performance.now();
    await this.start();
    try {
      this.phase = 'feeding';
      this.feed();
      await Promise.all(this.feeding);
      this.phase = 'draining (input sent)';
      await this.drained();
      // One more checkpoint after the last record: transactional output commits all of it.
      this.phase = 'final checkpoint';
      await this.checkpointing?.finish();
    } finally {
      await this.stop();
    }
    const deadLetters = await this.deadLetters();
    return { ...this.report(), deadLetters, durationMs: performance.now() - t0 };
  }

  /** Resolves once every stage queue is empty and no invocation runs or waits, stably. */
  async drained(pollMs = 50): Promise<void> {
    let stableSince: number | undefined;
    for (;;) {
      const invocations = this.totalInvocations();
      const quiet = this.sources.every((s) => !s.busy) && (await this.queuesEmpty()) && this.sources.every((s) => !s.busy);
      if (quiet && stableSince === invocations) return;
      stableSince = quiet ? invocations : undefined;
      await new Promise((r) => setTimeout(r, pollMs));
    }
  }

  private totalInvocations(): number {
    return this.sources.reduce((n, s) => n + s.metrics.invocations, 0);
  }

  private async queuesEmpty(): Promise<boolean> {
    for (const q of this.queues) {
      const d = await queueDepth(this.options.env.clients.sqs, q.url);
      this.overhead.record('sqs', 'GetQueueAttributes', { requests: 1 });
      if (d.visible || d.inFlight || d.delayed) return false;
    }
    return true;
  }

  /** Stop feeding and polling, then close the sinks. Idempotent. */
  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    this.phase = 'stopping';
    this.watch?.stop();
    await Promise.allSettled(this.feeding);
    await this.checkpointing?.stop();
    await Promise.allSettled(this.sources.map((s) => s.stop()));
    this.loadsFile?.close();
    for (const s of this.sinks.values()) await s.close?.();
  }

  /**
   * Drain the stage DLQs: parked records (with their errors) and messages SQS redrove
   * whole. With checkpoints into the checkpoint directory's file, and every letter of the
   * run from there (those a resume kept included), each once.
   */
  async deadLetters(): Promise<DeadLetterReport[]> {
    const file = this.checkpointing?.deadLetters;
    if (!file) return drainDeadLetters(this.options.env.clients.sqs, this.queues, this.overhead);
    try {
      await file.drain(this.options.env.clients.sqs, this.queues, this.overhead);
      return file.reports();
    } finally {
      file.close();
    }
  }

  lambdaUsage(): LambdaUsage {
    const memoryGb = (this.options.memoryLimitInMB ?? 1024) / 1024;
    return {
      invocations: this.totalInvocations() + this.ingestUsage.invocations,
      gbSeconds: this.sources.reduce((n, s) => n + s.gbSeconds, 0) + (this.ingestUsage.billedMs / 1000) * memoryGb,
    };
  }

  /** Counters and cost so far. */
  report(): Omit<LocalAwsRunResult, 'deadLetters' | 'durationMs'> {
    const lambda = this.lambdaUsage();
    return {
      sourceRecords: this.sourceRecords,
      rejectedInputs: this.rejectedInputs,
      stages: this.plan.stages.map((s) => ({ stage: s.id, name: s.name, metrics: { ...this.sources[s.id]?.metrics } as EventSourceMetrics,
        recordsIn: this.metricTallies[s.id]?.sum(OPERATOR_METRICS.recordsIn) ?? 0,
        recordsOut: this.metricTallies[s.id]?.sum(OPERATOR_METRICS.recordsOut) ?? 0,
      })),
      lambda,
      cost: estimateCost(this.accounting, lambda),
      accounting: this.accounting,
    };
  }

  /** Accepted ingest requests add to the source records (dev mode's HTTP endpoint calls this). */
  countIngested(n: number, billedMs: number): void {
    this.sourceRecords += n;
    this.ingestUsage.invocations++;
    this.ingestUsage.billedMs += billedMs;
  }
}
