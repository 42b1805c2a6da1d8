/**
 * One job through the real operator handlers, polled by the local event source mapping,
 * against DynamoDB Local and fauxqs, with the handlers' own clients under a seeded fault
 * plan (aws-faults.ts); the event source and the ingest function use clean clients
 * (Lambda's poller and the endpoint are not under test). Source partitions log their
 * input to S3 (as with checkpoints deployed) and large envelopes spill there, so the
 * handlers use S3 too. Runs until every queue is drained; returns the sink's records, the
 * dead letters and what was injected.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Logger } from '@aws-lambda-powertools/logger';
import type { Metrics } from '@aws-lambda-powertools/metrics';
import type { Context, SQSEvent } from 'aws-lambda';
import type { Message, SQSClient } from '@aws-sdk/client-sqs';
import { type Sink, Sinks } from '../../lib/api/sinks.ts';
import type { SourceBinding, SourceDef } from '../../lib/api/sources.ts';
import type { Job } from '../../lib/api/stream.ts';
import { systemClock } from '../../lib/api/types.ts';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { createIngestHandler } from '../../lib/aws/ingest/ingest-handler.ts';
import { createOperatorHandler } from '../../lib/aws/operator/operator-handler.ts';
import { S3BlobStore } from '../../lib/aws/s3/s3-blob-store.ts';
import type { QueueResolver } from '../../lib/aws/sqs/sqs-queues.ts';
import { SqsTransport } from '../../lib/aws/sqs/sqs-transport.ts';
import type { PhysicalPlan } from '../../lib/graph/compile.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { SqsEventSource } from '../../lib/testing/local-aws/event-source.ts';
import { type FeederContext, feedSource } from '../../lib/testing/local-aws/feeder.ts';
import { queueDepth } from '../../lib/testing/local-aws/queues.ts';
import { createReader } from '../../lib/transport/sources.ts';
import { drainQueue } from '../aws/helpers.ts';
import { type FaultLog, faultLog, faultyClients, type ServerConfig, type Service } from './aws-faults.ts';
import { jobResources } from './job-resources.ts';

/** What one invocation's calls know of it. */
export interface Invocation {
  /** Its groups are inside a sustained outage (FaultRunOptions.outage). */
  readonly outage: boolean;
}

/** Metrics and logger stand-ins that count and keep the errors. */
export function counter() {
  const counts: Record<string, number> = {};
  const metrics = {
    addMetric: (name: string, _unit: unknown, value: number) => void (counts[name] = (counts[name] ?? 0) + value),
    addDimension: () => undefined,
    // The per-job and per-partition copies of an incident (lib/aws/handler-metrics.ts) are not counted twice.
    singleMetric: () => ({ addDimensions: () => undefined, addMetric: () => undefined }),
    publishStoredMetrics: () => undefined,
  } as unknown as Metrics;
  const errors: string[] = [];
  const logger = {
    info: () => undefined,
    warn: () => undefined,
    error: (m: string, f?: { error?: string }) => void errors.push(`${m}: ${f?.error}`),
    addContext: () => undefined,
  } as unknown as Logger;
  return { counts, metrics, logger, errors };
}

export interface FaultRunOptions {
  readonly servers: ServerConfig;
  readonly seed: number;
  /** Share of the handlers' calls that fail. */
  readonly rate: number;
  readonly sources: Readonly<Record<string, SourceBinding<any>>>;
  readonly sinkName: string;
  /** Deliveries of each message group during which every DynamoDB call fails (a sustained throttle); default 0. */
  readonly outage?: number;
  /** The outage's error. */
  readonly outageError?: (service: Service) => Error | undefined;
  readonly forceThird?: boolean;
  readonly everyKind?: boolean;
}

export interface FaultRun {
  readonly output: unknown[];
  readonly deadLetters: Message[];
  readonly faults: FaultLog;
  readonly counts: Record<string, number>;
  readonly errors: string[];
  /** Per stage and message group: the highest ApproximateReceiveCount a handler saw. */
  readonly receives: Map<string, number>;
  readonly handlerVisibility: number;
}

/** One job through the handlers on faulty clients, until every queue is drained. */
export async function runWithFaults(makeJob: () => Job, o: FaultRunOptions): Promise<FaultRun> {
  const { clean, job, plan, prefix, table, bucket, queues, resolver, accounting, sink } = await jobResources(makeJob, o.servers, { prefix: 'fr', bucket: 'spill' });
  const scope = new AsyncLocalStorage<Invocation>();
  const faults = faultLog();
  const outageError = o.outageError ?? (() => undefined);
  const faulty = faultyClients(o.servers, {
    seed: o.seed,
    rate: o.rate,
    scope,
    log: faults,
    forceThird: o.forceThird,
    everyKind: o.everyKind,
    scoped: (service, _command, inv) => (inv.outage ? outageError(service) : undefined),
  });
  const { counts, metrics, logger, errors } = counter();
  const deliveries = new Map<string, number>();
  const receives = new Map<string, number>();
  const outage = o.outage ?? 0;

  const eventSources = plan.stages.map((stage) => {
    const handler = createOperatorHandler({
      job,
      stage: stage.id,
      sqs: faulty.sqs,
      dynamodb: faulty.dynamodb,
      s3: faulty.s3,
      tableName: table,
      queues: resolver,
      blobs: new S3BlobStore({ s3: faulty.s3, bucket, prefix: `${plan.job.name}/` }),
      // Source partitions log the input each commit consumed to S3 (input-log.ts), as with checkpoints deployed.
      checkpointStore: new S3BlobStore({ s3: faulty.s3, bucket }),
      sinks: { [o.sinkName]: sink as Sink<any> },
      maxMessageBytes: 1024,
      logger,
      metrics,
      backoff: { seed: o.seed },
    });
    const wrapped = (event: SQSEvent, context: Context) => {
      const groups = [...new Set(event.Records.map((r) => r.attributes.MessageGroupId ?? ''))];
      let inOutage = false;
      for (const g of groups) {
        const key = `${stage.id}/${g}`;
        const n = (deliveries.get(key) ?? 0) + 1;
        deliveries.set(key, n);
        if (n <= outage) inOutage = true;
      }
      for (const r of event.Records) {
        const key = `${stage.id}/${r.attributes.MessageGroupId}`;
        receives.set(key, Math.max(receives.get(key) ?? 0, Number(r.attributes.ApproximateReceiveCount)));
      }
      return scope.run({ outage: inOutage }, () => handler(event, context));
    };
    const source = new SqsEventSource({
      sqs: clean.sqs,
      queueUrl: queues[stage.id].url,
      handler: wrapped,
      waitTimeSeconds: 1,
      retryDelayMs: 20,
      // A backoff's second lasts 0.1 ms here: 15 min is 90 ms.
      visibilityScaleMs: 0.1,
      accounting,
    });
    source.observe(faulty.sqs);
    return source;
  });

  await Promise.all(eventSources.map((s) => s.start()));
  try {
    await feedInput({ job, plan, sqs: clean.sqs, queues: resolver, accounting, sources: o.sources });
    // Drained: every queue empty and nothing running or waiting, twice with no invocation between.
    let stable: number | undefined;
    for (;;) {
      const invocations = eventSources.reduce((n, s) => n + s.metrics.invocations, 0);
      let quiet = eventSources.every((s) => !s.busy);
      for (const q of queues) {
        if (!quiet) break;
        const d = await queueDepth(clean.sqs, q.url);
        quiet = !d.visible && !d.inFlight && !d.delayed;
      }
      quiet &&= eventSources.every((s) => !s.busy);
      if (quiet && stable === invocations) break;
      stable = quiet ? invocations : undefined;
      await new Promise((r) => setTimeout(r, 50));
    }
  } finally {
    await Promise.allSettled(eventSources.map((s) => s.stop()));
  }
  const deadLetters: Message[] = [];
  for (const q of queues) deadLetters.push(...(await drainQueue(clean.sqs, q.dlqUrl)));
  for (const c of [clean.dynamodb, clean.sqs, clean.s3, faulty.dynamodb, faulty.sqs, faulty.s3]) c.destroy();
  return { output: sink.records, deadLetters, faults, counts, errors, receives, handlerVisibility: eventSources.reduce((n, s) => n + s.metrics.handlerVisibility, 0) };
}

export interface FeedOptions {
  readonly job: Job;
  readonly plan: PhysicalPlan;
  readonly sqs: SQSClient;
  readonly queues: QueueResolver;
  readonly accounting: AwsAccounting;
  readonly sources: Readonly<Record<string, SourceBinding<any>>>;
  /** Records per envelope (default 256). */
  readonly chunkSize?: number;
}

/** Every source's input into its stage queue (an ingest source through the ingest handler), then its end of input. */
export async function feedInput(o: FeedOptions): Promise<void> {
  const { plan, sqs, accounting } = o;
  const transport = new SqsTransport({ sqs, job: plan.job.name, queues: o.queues, accounting });
  const ingest = createIngestHandler({ job: o.job, sqs, queues: o.queues, accounting });
  const ctx: FeederContext = {
    plan,
    sqs,
    transport,
    accounting,
    clock: systemClock,
    chunkSize: o.chunkSize ?? 256,
    maxBacklogMessages: 10_000,
    onIngestInvocation: () => undefined,
    rejected: [],
    shouldStop: () => false,
  };
  const feeding: Promise<number>[] = [];
  for (const edge of plan.edges) {
    if (edge.from.kind !== 'source') continue;
    const node = plan.job.nodes[edge.toNode];
    if (node.spec.kind !== 'source') continue;
    const def: SourceDef<any> = node.spec.source;
    const binding = o.sources[def.name] ?? def.binding;
    const target = { def, stage: edge.toStage, partitions: plan.stages[edge.toStage].parallelism, ingest: def.binding.kind === 'ingest' ? ingest : undefined };
    feeding.push(feedSource(ctx, target, createReader(binding, def.name, systemClock)));
  }
  await Promise.all(feeding);
}

/** The reference: the same job on the embedded runtime. */
export async function embeddedOutput(makeJob: () => Job, sources: Readonly<Record<string, SourceBinding<any>>>, sinkName: string): Promise<unknown[]> {
  const sink = Sinks.collect<unknown>();
  await new EmbeddedRuntime(makeJob(), { sources, sinks: { [sinkName]: sink as Sink<any> } }).run();
  return sink.records;
}
