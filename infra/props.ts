/**
 * SluiceJob's props, their defaults, and the checks that fail at synth (with what was
 * received and what was expected) before any resource exists.
 */
import { Duration, RemovalPolicy } from 'aws-cdk-lib';
import type * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as kms from 'aws-cdk-lib/aws-kms';
import * as logs from 'aws-cdk-lib/aws-logs';
import type { ParallelismOverride } from '../lib/api/logical.ts';
import type { Job } from '../lib/api/stream.ts';
import { defaultMaxConcurrency, MAX_CONCURRENCY, MIN_CONCURRENCY } from '../lib/aws/parallelism-env.ts';
import type { PhysicalPlan } from '../lib/graph/compile.ts';
import type { CheckpointStateMachineFactory } from './checkpoints.ts';
import { SluiceJobPropsError } from './errors.ts';
import type { JobBundle } from './function.ts';
import type { LogLevel } from './handler-environment.ts';
import { findProject } from './project.ts';

/** How callers of the ingestion endpoint authenticate. */
export type EndpointAuth =
  /** AWS SigV4 (IAM): grant callers with `SluiceJob.grantPublish`. */
  | { readonly kind: 'iam' }
  /** A JWT authorizer (HTTP API only): tokens from `issuer` with one of `audience`. */
  | { readonly kind: 'jwt'; readonly issuer: string; readonly audience: readonly string[] }
  /**
   * An `x-api-key` header checked by a small Lambda authorizer (HTTP API only) against
   * SHA-256 digests (hex), so the key itself never enters the template. Rotate by
   * deploying the new digest beside the old one, then removing the old one.
   */
  | { readonly kind: 'apiKey'; readonly keySha256: readonly string[] };

export interface IngestionEndpointOptions {
  /**
   * An HTTP API (routes, stage throttling, access logs, JWT and API-key options) or a
   * Lambda Function URL (cheapest; IAM auth only).
   * @default 'httpApi'
   */
  readonly kind?: 'httpApi' | 'functionUrl';
  /** @default { kind: 'iam' } */
  readonly auth?: EndpointAuth;
  /**
   * Steady-state requests per second and burst of the HTTP API stage.
   * @default - the account's API Gateway limits
   */
  readonly throttle?: { readonly rateLimit: number; readonly burstLimit: number };
  /**
   * Timeout of the ingest function (HTTP API integrations stop waiting at 30 s).
   * @default Duration.seconds(15)
   */
  readonly timeout?: Duration;
  /** @default 512 */
  readonly memorySize?: number;
  /** @default - see each field */
  readonly backPressure?: IngestionBackPressureOptions;
}

/**
 * When the ingest function answers 429 + Retry-After instead of enqueueing: bounds on the
 * queue of a stream's source stage and of every stage it feeds.
 */
export interface IngestionBackPressureOptions {
  /** Messages waiting in one of those queues (ApproximateNumberOfMessages, read at most once a second). @default 10000 */
  readonly maxQueuedMessages?: number;
  /**
   * Age of the oldest message waiting in one of those queues. SQS reports it to CloudWatch
   * only (a point a minute, a minute or two late), so the ingest function reads it with
   * GetMetricData at most once a minute per container ($0.01 per 1,000 metrics): a bound
   * for a stage that stays behind, not for a burst (the depth bound answers that).
   * @default - no age bound
   */
  readonly maxQueueAge?: Duration;
}

export interface SluiceJobRetention {
  /**
   * Age at which envelopes spilled to the bucket (claim check, `${job}/spill/`) expire.
   * Must outlive a message in the stage queue (4 days) plus its DLQ (14 days).
   * @default Duration.days(19)
   */
  readonly spilledEnvelopes?: Duration;
  /**
   * How long a snapshot, manifest or checkpoint object stays recoverable after the
   * coordinator deleted it (bucket versioning; the noncurrent version then expires).
   * @default Duration.days(7)
   */
  readonly deletedSnapshots?: Duration;
  /** Age at which S3 server access logs expire. @default Duration.days(90) */
  readonly accessLogs?: Duration;
  /** Retention of every function's, the API's and the state machine's log group. @default logs.RetentionDays.ONE_MONTH */
  readonly logs?: logs.RetentionDays;
}

export interface SluiceJobAlarmOptions {
  /** Age of the oldest message in a stage queue that raises the alarm. @default Duration.minutes(5) */
  readonly oldestMessageAge?: Duration;
  /** Actions of every alarm (for example an SNS topic). @default - none: alarms show on the dashboard only */
  readonly actions?: readonly cloudwatch.IAlarmAction[];
}

export interface SluiceJobProps {
  /**
   * The job to deploy (the default export of `jobModule`, or what it returns for
   * `jobParams`); its compiled stages decide the queues and functions.
   */
  readonly job: Job;
  /**
   * Path of the module that exports the job (default export: a Job, or a function
   * `(params) => Job`), relative to the working directory or absolute. Every function
   * bundles it, and refuses to start if the job it bundles compiles to another plan than
   * `job`.
   */
  readonly jobModule: string;
  /**
   * Parameters for a job module whose default export is a function (the values of
   * `sluice run --param`), passed to the functions as SLUICE_JOB_PARAMS.
   * @default - none
   */
  readonly jobParams?: Readonly<Record<string, string | number | boolean>>;
  /**
   * The job at other parallelisms than its module declares (`Job.withParallelism`: a
   * default, and per operator), passed to the functions as SLUICE_PARALLELISM. `sluice
   * rescale` changes that variable on the deployed functions; give the same here (or
   * `sluice deploy --parallelism`) so that the next deployment keeps it.
   * @default - the parallelism the job declares
   */
  readonly parallelism?: ParallelismOverride;
  /**
   * The project the functions are bundled from: esbuild resolves the job's imports
   * (`sluice` included) from its node_modules.
   * @default - the directory of the lock file nearest above `jobModule`
   */
  readonly projectRoot?: string;
  /**
   * The project's lock file (package-lock.json, yarn.lock, pnpm-lock.yaml, bun.lockb).
   * @default - the lock file nearest above `jobModule`
   */
  readonly depsLockFilePath?: string;
  /**
   * Prefix of the queue and state table names (lib/aws/naming.ts), passed to the
   * handlers as SLUICE_QUEUE_PREFIX. Two deployments of one job in one account and
   * region need different prefixes.
   * @default - '' in a stack named `Sluice-<job>` (what `sluice deploy` creates), else
   *            the stack name and '-'
   */
  readonly queuePrefix?: string;
  /**
   * Lambda's maximum concurrency per stage event source (2..1000). A stage never runs
   * more invocations than it has partitions (message groups), so more does not help.
   * @default - min(max(2, the stage's parallelism), 10)
   */
  readonly maxConcurrency?: number;
  /**
   * Per stage, by its name (as `sluice synth` and `sluice status` print it): that stage's
   * maximum concurrency (2..1000), over `maxConcurrency`.
   * @default - `maxConcurrency` for every stage
   */
  readonly stageMaxConcurrency?: Readonly<Record<string, number>>;
  /** Operator function timeout; the stage queue's visibility timeout is 6x this. @default Duration.seconds(30) */
  readonly operatorTimeout?: Duration;
  /** @default 1024 */
  readonly operatorMemorySize?: number;
  /** @default - an HTTP API with IAM (SigV4) auth */
  readonly ingestion?: IngestionEndpointOptions;
  /**
   * A customer managed key for the queues, the table and the snapshot bucket.
   * @default - SQS-managed SSE, DynamoDB's AWS managed key, S3-managed SSE
   */
  readonly encryptionKey?: kms.IKey;
  /**
   * The customer managed key of the buckets and tables the AWS sinks write to that are
   * not the job's own (`AwsSinks.s3Files({ bucket })`, `AwsSinks.dynamodbUpsert({ table })`):
   * writers get Encrypt/GenerateDataKey/Decrypt on it, readers Decrypt.
   * @default - none: those buckets and tables use AWS managed keys
   */
  readonly sinkEncryptionKey?: kms.IKey;
  /**
   * FIFO high throughput on every stage queue and DLQ: deduplication and the throughput
   * quota per message group (DeduplicationScope messageGroup, FifoThroughputLimit
   * perMessageGroupId). Without it a FIFO queue serves 300 calls per second per action,
   * 3,000 messages batched, for all its partitions together; with it each message group
   * (a Sluice partition) gets that quota, up to the region's high-throughput limit
   * (70,000 messages per second in the largest regions). Deduplication per group loses
   * nothing: a stage's deduplication ids are per envelope and its envelopes stay in their
   * partition's group; the ingest function's Idempotency-Key must send a retried request
   * to the groups it was first sent to (lib/aws/ingest/ingest-handler.ts). Turn it off only for
   * a queue that must deduplicate across groups.
   * @default true
   */
  readonly highThroughputFifo?: boolean;
  /** Of the table, the buckets and the log groups (queues are always destroyed). @default RemovalPolicy.RETAIN */
  readonly removalPolicy?: RemovalPolicy;
  /** @default 'INFO' */
  readonly logLevel?: LogLevel;
  /**
   * Builds the checkpoint state machine (see infra/checkpoints.ts; `loadCheckpointStateMachine`
   * finds infra/checkpoint-state-machine.ts).
   * @default - no state machine: epochs are not coordinated on AWS
   */
  readonly checkpoints?: CheckpointStateMachineFactory;
  /** @default - see each field */
  readonly retention?: SluiceJobRetention;
  /** @default - see each field */
  readonly alarms?: SluiceJobAlarmOptions;
}

/** Props with every default applied. */
export interface ResolvedProps {
  readonly job: Job;
  readonly plan: PhysicalPlan;
  readonly bundle: JobBundle;
  readonly jobParams?: Readonly<Record<string, string | number | boolean>>;
  readonly queuePrefix: string;
  /** A stage's event source maximum concurrency. */
  readonly maxConcurrency: (stage: { readonly name: string; readonly parallelism: number }) => number;
  readonly operatorTimeout: Duration;
  readonly operatorMemorySize: number;
  readonly ingestion: {
    readonly kind: 'httpApi' | 'functionUrl';
    readonly auth: EndpointAuth;
    readonly throttle?: { readonly rateLimit: number; readonly burstLimit: number };
    readonly timeout: Duration;
    readonly memorySize: number;
    readonly maxQueuedMessages?: number;
    readonly maxQueueAge?: Duration;
  };
  readonly encryptionKey?: kms.IKey;
  readonly sinkEncryptionKey?: kms.IKey;
  readonly highThroughputFifo: boolean;
  readonly removalPolicy: RemovalPolicy;
  readonly logLevel: LogLevel;
  readonly checkpoints?: CheckpointStateMachineFactory;
  readonly retention: { readonly spilledEnvelopes: Duration; readonly deletedSnapshots: Duration; readonly accessLogs: Duration; readonly logs: logs.RetentionDays };
  readonly alarms: { readonly oldestMessageAge: Duration; readonly actions: readonly cloudwatch.IAlarmAction[] };
}

/** A stage message lives at most this long in its queue, then in its DLQ (SQS's default and maximum). */
export const QUEUE_RETENTION = Duration.days(4);
export const DLQ_RETENTION = Duration.days(14);
/** Lambda's limits for an SQS event source's maximum concurrency. */
const LOG_LEVELS: readonly LogLevel[] = ['DEBUG', 'INFO', 'WARN', 'ERROR'];

/** `received` is a description (`960 s`); user-given strings go through quote() so their bounds show. */
function fail(field: string, expected: string, received: string | number): never {
  throw new SluiceJobPropsError(field, expected, String(received));
}

const quote = (v: unknown) => JSON.stringify(v);

function integer(field: string, value: number | undefined, min: number, max: number, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < min || value > max) fail(field, `an integer from ${min} to ${max}`, value);
  return value;
}

function seconds(field: string, value: Duration | undefined, min: number, max: number, fallback: Duration): Duration {
  if (value === undefined) return fallback;
  if (value.isUnresolved()) fail(field, 'a literal duration (not a token)', 'a token');
  const s = value.toSeconds();
  if (s < min || s > max) fail(field, `a duration from ${min} s to ${max} s`, `${s} s`);
  return value;
}

function days(field: string, value: Duration | undefined, min: number, fallback: Duration): Duration {
  if (value === undefined) return fallback;
  if (value.isUnresolved()) fail(field, 'a literal duration (not a token)', 'a token');
  const d = value.toDays({ integral: false });
  if (!Number.isInteger(d) || d < min) fail(field, `a whole number of days, at least ${min}`, `${d} days`);
  return value;
}

function checkAuth(kind: 'httpApi' | 'functionUrl', auth: EndpointAuth): EndpointAuth {
  const field = 'ingestion.auth';
  if (auth.kind === 'iam') return auth;
  if (kind === 'functionUrl') fail(field, "{ kind: 'iam' } for a Function URL (JWT and API keys need ingestion.kind 'httpApi')", quote(auth.kind));
  if (auth.kind === 'jwt') {
    if (!/^https:\/\/[^\s/]+/.test(auth.issuer)) fail(`${field}.issuer`, 'an https:// issuer URL', quote(auth.issuer));
    if (auth.audience.length === 0 || auth.audience.some((a) => a.length === 0)) fail(`${field}.audience`, 'at least one non-empty audience', JSON.stringify(auth.audience));
    return auth;
  }
  if (auth.kind === 'apiKey') {
    if (auth.keySha256.length === 0) fail(`${field}.keySha256`, 'at least one SHA-256 digest', '[]');
    for (const d of auth.keySha256) if (!/^[0-9a-f]{64}$/.test(d)) fail(`${field}.keySha256`, 'SHA-256 digests as 64 lowercase hex characters (printf %s "$KEY" | sha256sum)', quote(d));
    return auth;
  }
  return fail(`${field}.kind`, "'iam', 'jwt' or 'apiKey'", quote((auth as { kind: unknown }).kind));
}

/** `defaultPrefix`: the queue prefix when the props give none (it depends on the stack). */
export function resolveProps(props: SluiceJobProps, plan: PhysicalPlan, defaultPrefix = ''): ResolvedProps {
  if (plan.stages.length === 0) fail('job', 'a job with at least one stage', 'none');
  const bundle = findProject(props);
  if (props.jobParams !== undefined) {
    for (const [k, v] of Object.entries(props.jobParams)) {
      if (!['string', 'number', 'boolean'].includes(typeof v)) fail(`jobParams.${k}`, 'a string, number or boolean', typeof v);
    }
  }
  const fixedConcurrency = props.maxConcurrency === undefined ? undefined : integer('maxConcurrency', props.maxConcurrency, MIN_CONCURRENCY, MAX_CONCURRENCY, 0);
  const perStage: Record<string, number> = {};
  for (const [name, n] of Object.entries(props.stageMaxConcurrency ?? {})) {
    if (!plan.stages.some((s) => s.name === name)) fail(`stageMaxConcurrency.${name}`, `a stage of job "${plan.job.name}" (${plan.stages.map((s) => s.name).join(', ')})`, 'no such stage');
    perStage[name] = integer(`stageMaxConcurrency.${name}`, n, MIN_CONCURRENCY, MAX_CONCURRENCY, 0);
  }
  const queuePrefix = props.queuePrefix ?? defaultPrefix;
  if (!/^[A-Za-z0-9_-]*$/.test(queuePrefix)) fail('queuePrefix', 'letters, digits, "-" and "_" (SQS queue names)', quote(queuePrefix));
  // Lambda rejects a function timeout whose 6x exceeds SQS's maximum visibility timeout (12 h): 900 s is below it.
  const operatorTimeout = seconds('operatorTimeout', props.operatorTimeout, 1, 900, Duration.seconds(30));
  const kind = props.ingestion?.kind ?? 'httpApi';
  if (kind !== 'httpApi' && kind !== 'functionUrl') fail('ingestion.kind', "'httpApi' or 'functionUrl'", quote(kind));
  const throttle = props.ingestion?.throttle;
  if (throttle) {
    if (kind === 'functionUrl') fail('ingestion.throttle', "no throttle for a Function URL (use ingestion.kind 'httpApi')", JSON.stringify(throttle));
    if (!(throttle.rateLimit > 0)) fail('ingestion.throttle.rateLimit', 'a positive number of requests per second', throttle.rateLimit);
    integer('ingestion.throttle.burstLimit', throttle.burstLimit, 1, 1_000_000, 0);
  }
  const logLevel = props.logLevel ?? 'INFO';
  if (!LOG_LEVELS.includes(logLevel)) fail('logLevel', LOG_LEVELS.join(', '), quote(logLevel));
  const spilledEnvelopes = days('retention.spilledEnvelopes', props.retention?.spilledEnvelopes, QUEUE_RETENTION.toDays() + DLQ_RETENTION.toDays(), Duration.days(19));
  return {
    job: props.job,
    plan,
    bundle,
    jobParams: props.jobParams,
    queuePrefix,
    maxConcurrency: (stage) => perStage[stage.name] ?? fixedConcurrency ?? defaultMaxConcurrency(stage.parallelism),
    operatorTimeout,
    operatorMemorySize: integer('operatorMemorySize', props.operatorMemorySize, 128, 10240, 1024),
    ingestion: {
      kind,
      auth: checkAuth(kind, props.ingestion?.auth ?? { kind: 'iam' }),
      throttle,
      timeout: seconds('ingestion.timeout', props.ingestion?.timeout, 1, 30, Duration.seconds(15)),
      memorySize: integer('ingestion.memorySize', props.ingestion?.memorySize, 128, 10240, 512),
      ...(props.ingestion?.backPressure?.maxQueuedMessages === undefined ? {} : { maxQueuedMessages: integer('ingestion.backPressure.maxQueuedMessages', props.ingestion.backPressure.maxQueuedMessages, 1, 1_000_000_000, 0) }),
      ...(props.ingestion?.backPressure?.maxQueueAge === undefined ? {} : { maxQueueAge: seconds('ingestion.backPressure.maxQueueAge', props.ingestion.backPressure.maxQueueAge, 60, 14 * 24 * 3600, Duration.minutes(5)) }),
    },
    encryptionKey: props.encryptionKey,
    sinkEncryptionKey: props.sinkEncryptionKey,
    highThroughputFifo: props.highThroughputFifo ?? true,
    removalPolicy: props.removalPolicy ?? RemovalPolicy.RETAIN,
    logLevel,
    checkpoints: props.checkpoints,
    retention: {
      spilledEnvelopes,
      deletedSnapshots: days('retention.deletedSnapshots', props.retention?.deletedSnapshots, 1, Duration.days(7)),
      accessLogs: days('retention.accessLogs', props.retention?.accessLogs, 1, Duration.days(90)),
      logs: props.retention?.logs ?? logs.RetentionDays.ONE_MONTH,
    },
    alarms: {
      oldestMessageAge: seconds('alarms.oldestMessageAge', props.alarms?.oldestMessageAge, 60, 14 * 24 * 3600, Duration.minutes(5)),
      actions: props.alarms?.actions ?? [],
    },
  };
}

/** Every source must be an ingestion stream: on AWS, records enter only through the endpoint. */
export function checkSources(plan: PhysicalPlan): void {
  for (const node of plan.job.sources()) {
    if (node.spec.kind === 'source' && node.spec.source.binding.kind !== 'ingest') {
      fail(`job source "${node.name}"`, 'an ingestion stream (job.ingest(...)): on AWS records enter through the ingestion endpoint', `a ${node.spec.source.binding.kind} source`);
    }
  }
}
