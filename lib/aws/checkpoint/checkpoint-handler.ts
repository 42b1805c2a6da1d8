/**
 * The checkpoint task on AWS: CheckpointSteps wired to the job's state table (pointer
 * items, ack and activity items), its bucket (manifests, stats, snapshots) and its source
 * stage queues (barriers). functions/checkpoint.ts is this with the SDK's default clients;
 * tests pass clients for the local servers.
 */
import type { Logger } from '@aws-lambda-powertools/logger';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { S3Client } from '@aws-sdk/client-s3';
import type { SQSClient } from '@aws-sdk/client-sqs';
import type { Job } from '../../api/stream.ts';
import { participantsOf, planFingerprint } from '../../checkpoint/fingerprint.ts';
import type { CoordinatorSetup } from '../../checkpoint/protocol.ts';
import { ConfigError } from '../../errors.ts';
import { isTransactional, type TransactionalSink } from '../../api/sinks.ts';
import { compile } from '../../graph/compile.ts';
import { AwsAccounting } from '../cost/accounting.ts';
import { DynamoDbAckStore } from './checkpoint-acks.ts';
import { injectBarriers } from './checkpoint-barriers.ts';
import { timerWakeUpConfig } from './checkpoint-timers.ts';
import { sendIdleProbes } from './idle-probes.ts';
import { CheckpointSteps, type CheckpointStepsOptions } from './checkpoint-steps.ts';
import type { Carry } from './checkpoint-task.ts';
import { DynamoDbPointerStore } from '../dynamodb/dynamodb-pointers.ts';
import { DynamoDbTable } from '../dynamodb/dynamodb-table.ts';
import { AwsInputLog, inputLogTruncation } from '../operator/input-log.ts';
import { stateTableName } from '../naming.ts';
import { S3BlobStore } from '../s3/s3-blob-store.ts';
import { describePlan } from '../restore/savepoints.ts';
import { bindAwsSinks } from '../sinks/sink-options.ts';
import { NamedQueues, type QueueResolver } from '../sqs/sqs-queues.ts';
import { SqsTransport } from '../sqs/sqs-transport.ts';

export interface CheckpointHandlerConfig {
  readonly job: Job;
  readonly dynamodb: DynamoDBClient;
  readonly sqs: SQSClient;
  readonly s3: S3Client;
  /** The snapshot bucket (SLUICE_BUCKET). */
  readonly bucket: string | undefined;
  /** Default `sluice-${job}`. */
  readonly tableName?: string;
  readonly queuePrefix?: string;
  /** Where the source partitions' commits name their input log segments (their state table); default tableName. */
  readonly inputLogTableName?: string;
  /** Default: the job's queues by name. */
  readonly queues?: QueueResolver;
  readonly accounting?: AwsAccounting;
  /** Powertools Metrics for `epochsAborted` (functions/checkpoint.ts: namespace Sluice, service = the job). */
  readonly metrics?: CheckpointStepsOptions['metrics'];
  /** Powertools Logger: one line per step (action, epoch, what comes next), and each failure. */
  readonly logger?: Logger;
  /** Overrides for tests (clock, fault hooks, sinks). @internal */
  readonly overrides?: Partial<Pick<CheckpointStepsOptions, 'now' | 'hook' | 'sinks' | 'truncateLogs'>>;
}

export interface CheckpointHandler {
  (event: unknown): Promise<Carry>;
  /** The coordinator's steps. @internal */
  readonly steps: CheckpointSteps;
  /** What the deployed plan says: job, fingerprint, participants. @internal */
  readonly setup: CoordinatorSetup;
  /** Barrier acks in the state table. @internal */
  readonly acks: DynamoDbAckStore;
  readonly accounting: AwsAccounting;
}

export function createCheckpointHandler(config: CheckpointHandlerConfig): CheckpointHandler {
  if (!config.bucket) throw new ConfigError('SLUICE_BUCKET', 'the snapshot bucket name (SluiceJob sets it)', 'unset');
  const plan = compile(config.job.graph);
  const job = plan.job.name;
  const accounting = config.accounting ?? new AwsAccounting();
  const tableName = config.tableName ?? stateTableName(job);
  const setup: CoordinatorSetup = { job, fingerprint: planFingerprint(plan), participants: participantsOf(plan) };
  const queues = config.queues ?? new NamedQueues(config.sqs, job, config.queuePrefix, accounting);
  const transport = new SqsTransport({ sqs: config.sqs, job, queues, accounting });
  const acks = new DynamoDbAckStore({ client: config.dynamodb, tableName, job, accounting });
  const wakeUp = timerWakeUpConfig(plan);
  const blobs = new S3BlobStore({ s3: config.s3, bucket: config.bucket, accounting });
  // The job's transactional sinks (S3 files): prepared before the pointer write, committed after.
  const sinkNodes = plan.job.sinks().flatMap((n) => (n.spec.kind === 'sink' ? [[n.name, n.spec.sink] as const] : []));
  bindAwsSinks(sinkNodes, { job, s3: config.s3, dynamodb: config.dynamodb, bucket: config.bucket, tableName, accounting });
  const transactional: TransactionalSink[] = sinkNodes.flatMap(([, s]) => (isTransactional(s) ? [s] : []));
  const sinks: CheckpointStepsOptions['sinks'] = transactional.length
    ? {
        prepare: async (e) => {
          for (const s of transactional) await s.prepare(e);
        },
        commit: async (e) => {
          for (const s of transactional) await s.commit(e);
        },
      }
    : undefined;
  const steps = new CheckpointSteps({
    setup,
    pointers: new DynamoDbPointerStore({ client: config.dynamodb, tableName, job, accounting }),
    // Coordinator keys already start with `${job}/` (manifests, checkpoints, snapshots).
    blobs,
    acks,
    sinks,
    injectBarriers: (d) => injectBarriers(transport, queues, job, d.sources, { epoch: d.epoch, baseEpoch: d.baseEpoch, full: d.fullSnapshot, savepoint: d.savepoint !== null }),
    // The operator functions log source input to the same bucket (input-log.ts).
    // Savepoints asked for by `sluice savepoint` (savepoints.ts), with what restoring them checks.
    savepoints: { plan: describePlan(plan) },
    metrics: config.metrics,
    timerWakeUp: wakeUp && { ...wakeUp, sendProbes: async (at) => void (await sendIdleProbes(transport, queues, plan, at, 'timers')) },
    truncateLogs: inputLogTruncation(plan, new AwsInputLog(new DynamoDbTable(config.dynamodb, config.inputLogTableName ?? tableName, accounting), blobs)),
    ...config.overrides,
  });
  const log = config.logger;
  const handle = async (event: unknown): Promise<Carry> => {
    const { action, carry } = (event ?? {}) as { action?: unknown; carry?: Partial<Carry> };
    try {
      const out = await steps.handle(event);
      log?.info('checkpoint step', { action, epoch: out.epoch, next: out.next, failures: out.failures });
      return out;
    } catch (e) {
      log?.error('checkpoint step failed', { action, epoch: carry?.epoch, error: (e as Error).message });
      throw e;
    }
  };
  return Object.assign(handle, { steps, setup, acks, accounting });
}
