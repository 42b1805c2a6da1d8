/**
 * `sluice run --target assembly`: a job run through the exact Lambda bundles of its
 * synthesized cloud assembly, on local servers, with every AWS call checked against the
 * calling function's IAM policies.
 *
 * - The template (template.ts, model.ts) gives the functions, their environment and
 *   roles, the queues, event source mappings, tables, buckets and state machines; the
 *   stateful ones are created on DynamoDB Local and fauxqs under the template's names
 *   (provision.ts).
 * - Every function runs in its own worker containers (function-host.ts) whose SDKs reach
 *   AWS only through the IAM-checking proxy (proxy.ts), signed with the function's own
 *   access key id; the state machines run behind the same proxy (step-functions.ts).
 * - Each SQS event source mapping is an SqsEventSource (lib/testing/local-aws/event-source.ts)
 *   polling with the function's credentials, as Lambda polls with its execution role:
 *   batch size and maximum concurrency from the template, partial batch responses when
 *   the mapping reports them, a short local retry delay.
 * - Input goes through the ingest function as API Gateway invokes it (feeder.ts: chunks
 *   posted to /streams/<stream>/events, 429 honoured), then the end-of-input markers, as
 *   the local-AWS runner sends them, so the last windows fire.
 * - Once every stage queue is drained, the chosen sink's records go to `output`: a stdout
 *   sink's lines (its stage function's stdout, logs and metrics left out), an upsert
 *   sink's items, an S3 file sink's committed files (after one more checkpoint).
 * - The first denied call stops the run: run() rejects with AssemblyAccessDeniedError.
 */
import { SQSClient } from '@aws-sdk/client-sqs';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import type { Sink } from '../../../api/sinks.ts';
import type { Job } from '../../../api/stream.ts';
import { systemClock } from '../../../api/types.ts';
import { ConfigError } from '../../../errors.ts';
import { compile, type PhysicalPlan } from '../../../graph/compile.ts';
import { createReader, type RejectedInput } from '../../../transport/sources.ts';
import type { DeadLetter } from '../../../transport/envelope.ts';
import { AwsAccounting } from '../../../aws/cost/accounting.ts';
import { StaticQueues } from '../../../aws/sqs/sqs-queues.ts';
import { SqsTransport } from '../../../aws/sqs/sqs-transport.ts';
import { asDeadLetter, drainDeadLetters } from '../dead-letters.ts';
import { configuredEndpoint, type EndpointService } from '../../../aws/configured-endpoints.ts';
import { type LocalAwsEnvironment, openLocalAws } from '../endpoints.ts';
import { SqsEventSource } from '../event-source.ts';
import { feedSource } from '../feeder.ts';
import { queueDepth } from '../queues.ts';
import { IamAuthorizer } from './authorizer.ts';
import { AssemblyAccessDeniedError, AssemblyRunTimeoutError, AssemblyTemplateError, type DeniedCall } from './errors.ts';
import { finalCheckpoint } from './final-checkpoint.ts';
import { classifyLine, FunctionHost } from './function-host.ts';
import { accessKeyOf, lambdaEnvironment } from './lambda-environment.ts';
import type { AssemblyFunction, AssemblyModel } from './model.ts';
import { type AssemblyStage, awsSinkRecords, stagesOf } from './outputs.ts';
import { provision, remove } from './provision.ts';
import { AssemblyProxy } from './proxy.ts';
import { LocalStepFunctions } from './step-functions.ts';
import { readAssembly } from './template.ts';

export interface AssemblyRunOptions {
  readonly assemblyDir: string;
  /** Default: the assembly's only stack. */
  readonly stackName?: string;
  /** The loaded job module (the one the bundles were built from): source and sink names, stages. */
  readonly job: Job;
  /** The ingestion stream the input is posted to. */
  readonly source: string;
  /** JSON lines. */
  readonly inputPath: string;
  /** The sink whose records go to `output`. */
  readonly sink: string;
  readonly output: Sink<any>;
  readonly log: (line: string) => void;
  /** Local servers to use (default: started here, or the SDK's AWS_ENDPOINT_URL* ones, and stopped at the end). */
  readonly env?: LocalAwsEnvironment;
  /** Events per ingest request (default 512). */
  readonly chunkSize?: number;
  /** Failed messages come back after this (default 100 ms) instead of the visibility timeout. */
  readonly retryDelayMs?: number;
  /** Warm containers per function at most (default 2; the event source's maximum concurrency if lower). */
  readonly maxContainers?: number;
  /** A Wait state's local duration (default its seconds, at most 1 s). */
  readonly waitMs?: (state: string, seconds: number | undefined) => number;
  /** No invocation for this long while not drained fails the run (default 120 s). */
  readonly stallTimeoutMs?: number;
  /** Every log line of every function to `log` (default: warnings and errors only). */
  readonly verbose?: boolean;
  /** Leave the queues, tables and buckets on the servers at the end (default: deleted). */
  readonly keepResources?: boolean;
}

const LOG_RING = 200;

export class AssemblyRun {
  readonly rejectedInputs: RejectedInput[] = [];
  deadLetters: DeadLetter[] = [];
  readonly plan: PhysicalPlan;
  model?: AssemblyModel;
  /** Each function's last log lines (stdout logs, text, stderr), by logical id. */
  readonly logs = new Map<string, string[]>();
  private proxy?: AssemblyProxy;
  private readonly denials: DeniedCall[] = [];
  private env?: LocalAwsEnvironment;
  private openedEnv = false;
  private readonly hosts = new Map<string, FunctionHost>();
  private readonly eventSources: SqsEventSource[] = [];
  private readonly clients: { destroy(): void }[] = [];
  private stages: AssemblyStage[] = [];
  private sfn?: LocalStepFunctions;
  private readonly records: string[] = [];
  private sinkFunctions = new Set<string>();
  private stopping = false;
  private provisioned = false;
  private computeStopped?: Promise<void>;
  private rejectDenied?: (e: Error) => void;
  private readonly denied: Promise<never>;

  constructor(readonly options: AssemblyRunOptions) {
    this.plan = compile(options.job.graph);
    this.denied = new Promise<never>((_, reject) => (this.rejectDenied = reject));
    this.denied.catch(() => undefined);
  }

  get deniedCalls(): readonly DeniedCall[] {
    return this.denials;
  }

  async run(): Promise<{ sourceRecords: number }> {
    try {
      await this.start();
      const sourceRecords = await this.guard(this.feed());
      await this.guard(this.drained());
      const sinkNode = this.sinkNode();
      if (sinkNode.spec.kind === 'sink' && sinkNode.spec.sink.kind === 's3-files') await this.guard(finalCheckpoint(this.model!, this.plan, this.sfn, this.env!.clients.dynamodb, this.options.log));
      await this.stopCompute();
      if (this.deniedCalls.length) throw this.deniedError();
      this.deadLetters = (await drainDeadLetters(this.env!.clients.sqs, this.stages.map((s) => s.queues), new AwsAccounting())).map(asDeadLetter);
      await this.writeOutput();
      return { sourceRecords };
    } catch (e) {
      if (this.deniedCalls.length) throw this.deniedError();
      throw e;
    } finally {
      await this.stopCompute().catch((e) => this.options.log(`assembly: stopping: ${(e as Error).message}`));
      await this.cleanup();
    }
  }

  private deniedError(): AssemblyAccessDeniedError {
    return new AssemblyAccessDeniedError(this.deniedCalls[0], [...this.deniedCalls]);
  }

  private onDenied(call: DeniedCall): void {
    this.denials.push(call);
    this.options.log(`assembly: DENIED ${call.function} ${call.action} on ${call.resource} (${call.operation}): ${call.reason}`);
    this.rejectDenied?.(this.deniedError());
  }

  /** The step, or the first denial, whichever comes first. */
  private guard<T>(p: Promise<T>): Promise<T> {
    p.catch(() => undefined);
    return Promise.race([p, this.denied]);
  }

  private sinkNode() {
    const node = this.plan.job.sinks().find((n) => n.name === this.options.sink);
    if (!node) throw new ConfigError('sink', `one of ${this.plan.job.sinks().map((n) => n.name).join(', ')}`, JSON.stringify(this.options.sink));
    return node;
  }

  private async start(): Promise<void> {
    const o = this.options;
    this.sinkNode();
    if (!this.env) {
      this.env = o.env ?? (await openLocalAws());
      this.openedEnv = o.env === undefined;
    }
    const env = this.env;
    const upstream = (s: EndpointService, e: { endpoint?: string }) => {
      const url = e.endpoint ?? configuredEndpoint(s)?.url;
      if (!url) throw new ConfigError(`endpoint of ${s}`, 'a local server', 'none');
      return url;
    };
    const upstreams = { dynamodb: upstream('dynamodb', env.dynamodb), sqs: upstream('sqs', env.sqs), s3: upstream('s3', env.s3), dynamodbClient: env.clients.dynamodb };
    const proxy = new AssemblyProxy({ upstreams, onDenied: (c) => this.onDenied(c), log: o.log });
    this.proxy = proxy;
    const origin = await proxy.listen();
    const model = readAssembly(o.assemblyDir, { stackName: o.stackName, region: env.region, queueOrigin: origin });
    this.model = model;
    for (const w of model.warnings) o.log(`assembly: ${w}`);
    const authorizer = new IamAuthorizer(model);
    this.sfn = model.stateMachines.size
      ? new LocalStepFunctions({
          model,
          invoke: (id, payload) => this.host(id).invoke(payload),
          authorize: async (machine, request) => {
            const d = await authorizer.decide(machine.roleLogicalId ? model.roles.get(machine.roleLogicalId) : undefined, request);
            if (!d.allowed) {
              const call: DeniedCall = { function: machine.logicalId, action: request.action, resource: request.resource, reason: d.reason, operation: request.operation };
              this.onDenied(call);
            }
            return d;
          },
          waitMs: o.waitMs,
          log: o.log,
        })
      : undefined;
    proxy.configure(model, authorizer, this.sfn);
    for (const fn of model.functions.values()) {
      proxy.registerCaller(accessKeyOf(fn), { label: fn.logicalId, role: fn.roleLogicalId ? model.roles.get(fn.roleLogicalId) : undefined, session: fn.name });
    }
    const { queueUrls } = await provision(model, env.clients, o.log);
    this.provisioned = true;
    for (const q of model.queues.values()) proxy.registerQueueUrl(q.name, queueUrls.get(q.logicalId)!);
    this.stages = stagesOf(model, this.plan, queueUrls);
    const sinkStage = this.plan.stageOfNode[this.sinkNode().id];
    this.sinkFunctions = new Set(this.stages.filter((s) => s.stage === sinkStage).map((s) => s.functionLogicalId));

    for (const esm of model.eventSources) {
      const fn = model.functions.get(esm.functionLogicalId)!;
      if (!esm.enabled) continue;
      if (!fn.assetDir) {
        o.log(`assembly: function ${fn.logicalId} (event source ${esm.logicalId}) has no bundle; its queue is not polled`);
        continue;
      }
      const queue = model.queues.get(esm.queueLogicalId)!;
      const sqs = new SQSClient({ region: env.region, endpoint: origin, credentials: { accessKeyId: accessKeyOf(fn), secretAccessKey: 'local' }, useQueueUrlAsEndpoint: false, maxAttempts: 3 });
      this.clients.push(sqs);
      const host = this.host(fn.logicalId);
      this.eventSources.push(
        new SqsEventSource({
          sqs,
          queueUrl: queue.url,
          functionName: fn.name,
          batchSize: esm.batchSize,
          maximumConcurrency: Math.min(1000, Math.max(2, esm.maximumConcurrency ?? 1000)),
          timeoutMs: fn.timeoutSeconds * 1000,
          retryDelayMs: o.retryDelayMs ?? 100,
          memoryLimitInMB: fn.memoryMb,
          handler: async (event, context) => {
            const out = await host.invoke(event, { deadline: Date.now() + context.getRemainingTimeInMillis(), requestId: context.awsRequestId });
            // Without ReportBatchItemFailures, Lambda ignores the response: a returned batch succeeded.
            return esm.reportBatchItemFailures ? (out as never) : undefined;
          },
          onError: (e) => this.debug(`${fn.logicalId}: ${e.message}`),
        }),
      );
    }
    await Promise.all(this.eventSources.map((s) => s.start()));
  }

  /** The containers of a function, started on first use. */
  private host(logicalId: string): FunctionHost {
    let h = this.hosts.get(logicalId);
    if (h) return h;
    const model = this.model!;
    const fn = model.functions.get(logicalId);
    if (!fn) throw new AssemblyTemplateError(model.templateFile, `no function ${logicalId}`);
    const esm = model.eventSources.find((e) => e.functionLogicalId === logicalId);
    const max = Math.max(1, Math.min(this.options.maxContainers ?? 2, esm?.maximumConcurrency ?? 1000));
    h = new FunctionHost({
      fn,
      env: lambdaEnvironment(fn, this.model!.region, this.proxy!.origin),
      maxContainers: max,
      onStdout: (line) => this.onStdout(fn, line),
      onStderr: (line) => this.remember(fn, line, this.options.verbose),
      onCrash: (e) => this.options.log(`assembly: ${e.message}`),
    });
    this.hosts.set(logicalId, h);
    return h;
  }

  private onStdout(fn: AssemblyFunction, line: string): void {
    const kind = classifyLine(line);
    if (kind === 'record' && this.sinkFunctions.has(fn.logicalId)) {
      this.records.push(line);
      return;
    }
    if (kind === 'metric') return;
    let loud = this.options.verbose;
    if (kind === 'log') {
      try {
        loud ||= /^(WARN|ERROR|CRITICAL)$/.test(String((JSON.parse(line) as { level?: string }).level));
      } catch {
        // not reached: classified as JSON
      }
    }
    this.remember(fn, line, loud);
  }

  private remember(fn: AssemblyFunction, line: string, loud?: boolean): void {
    let ring = this.logs.get(fn.logicalId);
    if (!ring) this.logs.set(fn.logicalId, (ring = []));
    ring.push(line);
    if (ring.length > LOG_RING) ring.shift();
    if (loud) this.options.log(`  [${fn.logicalId}] ${line}`);
  }

  private debug(line: string): void {
    if (this.options.verbose || process.env.SLUICE_DEBUG) this.options.log(`  [debug] ${line}`);
  }

  /** Post the input through the ingest function, then the end-of-input markers; the events accepted. */
  private async feed(): Promise<number> {
    const o = this.options;
    const model = this.model!;
    const edge = this.plan.edges.find((e) => e.from.kind === 'source' && this.plan.job.nodes[e.toNode].spec.kind === 'source' && (this.plan.job.nodes[e.toNode].name === o.source || (this.plan.job.nodes[e.toNode].spec as { source: { name: string } }).source.name === o.source));
    if (!edge) throw new ConfigError('source', 'a source of the job', JSON.stringify(o.source));
    const node = this.plan.job.nodes[edge.toNode];
    const def = (node.spec as { kind: 'source'; source: import('../../../api/sources.ts').SourceDef<any> }).source;
    if (def.binding.kind !== 'ingest') throw new ConfigError('source', 'an ingestion stream (the ingest function accepts only those)', `"${def.name}" (${def.binding.kind})`);
    const ingestion = model.ingestion[0];
    if (!ingestion) throw new AssemblyTemplateError(model.templateFile, 'no ingestion endpoint (an HTTP API integration or a Function URL in front of a function)');
    const ingest = this.host(ingestion.functionLogicalId);
    const transport = new SqsTransport({ sqs: this.env!.clients.sqs, job: this.plan.job.name, queues: new StaticQueues(this.stages.map((s) => s.queues)), accounting: new AwsAccounting() });
    const clock = systemClock;
    return feedSource(
      {
        plan: this.plan,
        sqs: this.env!.clients.sqs,
        transport,
        accounting: new AwsAccounting(),
        clock,
        chunkSize: o.chunkSize ?? 512,
        maxBacklogMessages: 10_000,
        onIngestInvocation: () => undefined,
        rejected: this.rejectedInputs,
        shouldStop: () => this.stopping,
      },
      {
        def,
        stage: edge.toStage,
        partitions: this.plan.stages[edge.toStage].parallelism,
        // As API Gateway: a function error is a 500 to the client.
        ingest: async (event: APIGatewayProxyEventV2) => {
          try {
            return (await ingest.invoke(event)) as APIGatewayProxyStructuredResultV2;
          } catch (e) {
            this.debug(`${ingestion.functionLogicalId}: ${(e as Error).name}: ${(e as Error).message}`);
            return { statusCode: 500, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ message: 'Internal Server Error' }) };
          }
        },
      },
      createReader({ kind: 'file', path: o.inputPath }, def.name, clock),
    );
  }

  /** Resolves once every stage queue is empty and no invocation runs or waits, stably. */
  private async drained(pollMs = 50): Promise<void> {
    const stallMs = this.options.stallTimeoutMs ?? 120_000;
    let stableAt: number | undefined;
    let last = -1;
    let lastChange = Date.now();
    for (;;) {
      const invocations = this.eventSources.reduce((n, s) => n + s.metrics.invocations, 0);
      if (invocations !== last) [last, lastChange] = [invocations, Date.now()];
      const idle = () => this.eventSources.every((s) => !s.busy);
      const quiet = idle() && (await this.queuesEmpty()) && idle();
      if (quiet && stableAt === invocations) return;
      stableAt = quiet ? invocations : undefined;
      if (Date.now() - lastChange > stallMs) throw new AssemblyRunTimeoutError('draining the stage queues', Date.now() - lastChange, this.eventSources.map((s) => `${s.functionName}: ${s.describe()}`).join('; '));
      await new Promise((r) => setTimeout(r, pollMs));
    }
  }

  private async queuesEmpty(): Promise<boolean> {
    for (const s of this.stages) {
      const d = await queueDepth(this.env!.clients.sqs, s.queues.url);
      if (d.visible || d.inFlight || d.delayed) return false;
    }
    return true;
  }

  private async writeOutput(): Promise<void> {
    const node = this.sinkNode();
    const sink = node.spec.kind === 'sink' ? node.spec.sink : undefined;
    let records: unknown[];
    if (!sink || sink.kind === 'stdout') records = this.records.map((l) => JSON.parse(l));
    else {
      const resources = (sink as unknown as { awsResources?: { table?: string; bucket?: string; prefix?: string } }).awsResources;
      const bucket = [...this.model!.functions.values()].map((f) => f.environment.SLUICE_BUCKET).find(Boolean);
      records = await awsSinkRecords(sink.kind, resources, { model: this.model!, plan: this.plan, dynamodb: this.env!.clients.dynamodb, s3: this.env!.clients.s3, defaultBucket: bucket });
    }
    const out = this.options.output;
    await out.open?.();
    try {
      if (records.length) await out.write({ producer: 'assembly', seq: 1, records });
    } finally {
      await out.close?.();
    }
  }

  /** Stop feeding, the event sources, the state machines and the containers (idempotent). */
  private stopCompute(): Promise<void> {
    this.computeStopped ??= (async () => {
      this.stopping = true;
      await Promise.allSettled(this.eventSources.map((s) => s.stop()));
      await this.sfn?.stop();
      await Promise.allSettled([...this.hosts.values()].map((h) => h.stop()));
    })();
    return this.computeStopped;
  }

  private async cleanup(): Promise<void> {
    try {
      if (this.provisioned && this.model && this.env && !this.options.keepResources) await remove(this.model, this.env.clients).catch((e) => this.options.log(`assembly: removing the local resources: ${(e as Error).message}`));
    } finally {
      await this.proxy?.close();
      for (const c of this.clients) c.destroy();
      if (this.openedEnv) await this.env?.close();
    }
  }
}
