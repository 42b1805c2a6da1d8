/**
 * One compiled stage on AWS: its FIFO queue (MessageGroupId = partition) with a FIFO
 * dead-letter queue, and the operator function fed by the queue. Queue names follow
 * lib/aws/naming.ts, because the handlers find queues and their own stage by name.
 */
import { Duration } from 'aws-cdk-lib';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import { SqsEventSource } from 'aws-cdk-lib/aws-lambda-event-sources';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { DEFAULT_MAX_RECEIVE_COUNT } from '../lib/aws/operator/group-backoff.ts';
import { deadLetterQueueName, stageQueueName } from '../lib/aws/naming.ts';
import { DEFAULT_MAX_MESSAGE_BYTES } from '../lib/aws/sqs/sqs-codec.ts';
import type { StagePlan } from '../lib/graph/compile.ts';
import { ENTRIES, type SluiceFunction, sluiceFunction } from './function.ts';
import { signalsPk } from '../lib/aws/checkpoint/checkpoint-acks.ts';
import { bucketPrefixes, coordinatorLeadingKeys, grantObjects, grantSend, grantTable, STAGE_ACK_TABLE_ACTIONS, STAGE_TABLE_ACTIONS, stageLeadingKeys } from './permissions.ts';
import { DLQ_RETENTION, QUEUE_RETENTION, type ResolvedProps } from './props.ts';

/**
 * Receives before SQS moves a message to the DLQ: the operator handler's default
 * `maxReceiveCount` (lib/aws/operator/group-backoff.ts), so the two agree; not a prop. It is for
 * messages that can never be decoded: a record whose user code keeps throwing is parked
 * by the handler after its attempts, and a group failing on the infrastructure backs off
 * and stalls before this count (an alarm, infra/monitoring.ts), instead of being moved.
 */
export const MAX_RECEIVE_COUNT = DEFAULT_MAX_RECEIVE_COUNT;
/** Lambda requires a queue's visibility timeout of at least 6x the function timeout. */
export const VISIBILITY_FACTOR = 6;
/** Lambda's largest batch for a FIFO event source. */
export const BATCH_SIZE = 10;

export interface StageResources {
  readonly stage: StagePlan;
  readonly queue: sqs.Queue;
  readonly deadLetterQueue: sqs.Queue;
  readonly operator: SluiceFunction;
  /** The queue's event source mapping (a restore disables and enables it: SluiceJob.grantOperate). */
  readonly eventSource: SqsEventSource;
}

function fifoQueue(scope: Construct, id: string, p: ResolvedProps, props: sqs.QueueProps): sqs.Queue {
  return new sqs.Queue(scope, id, {
    ...props,
    fifo: true,
    // Deduplication ids are deterministic per envelope (lib/aws/sqs/sqs-transport.ts).
    contentBasedDeduplication: false,
    maxMessageSizeBytes: DEFAULT_MAX_MESSAGE_BYTES,
    ...(p.encryptionKey
      ? // A reused data key for 15 min cuts KMS requests (and their cost) per message.
        { encryption: sqs.QueueEncryption.KMS, encryptionMasterKey: p.encryptionKey, dataKeyReuse: Duration.minutes(15) }
      : { encryption: sqs.QueueEncryption.SQS_MANAGED }),
    enforceSSL: true,
    ...(p.highThroughputFifo ? { deduplicationScope: sqs.DeduplicationScope.MESSAGE_GROUP, fifoThroughputLimit: sqs.FifoThroughputLimit.PER_MESSAGE_GROUP_ID } : {}),
  });
}

/** Queues first (a stage sends to its downstream stages' queues), then functions. */
export function createStages(scope: Construct, p: ResolvedProps, storage: { table: dynamodb.ITable; bucket: s3.IBucket }, environment: Record<string, string>): StageResources[] {
  const job = p.job.name;
  const queues = p.plan.stages.map((stage) => {
    const deadLetterQueue = fifoQueue(scope, `Stage${stage.id}DeadLetterQueue`, p, {
      queueName: deadLetterQueueName(job, stage.id, p.queuePrefix),
      retentionPeriod: DLQ_RETENTION,
    });
    const queue = fifoQueue(scope, `Stage${stage.id}Queue`, p, {
      queueName: stageQueueName(job, stage.id, p.queuePrefix),
      retentionPeriod: QUEUE_RETENTION,
      visibilityTimeout: Duration.seconds(p.operatorTimeout.toSeconds() * VISIBILITY_FACTOR),
      deadLetterQueue: { queue: deadLetterQueue, maxReceiveCount: MAX_RECEIVE_COUNT },
    });
    return { queue, deadLetterQueue };
  });

  return p.plan.stages.map((stage) => {
    const { queue, deadLetterQueue } = queues[stage.id];
    const operator = sluiceFunction(scope, `Stage${stage.id}Function`, {
      entry: ENTRIES.operator,
      description: `Sluice ${job} stage ${stage.id} (${stage.name}), ${stage.parallelism} partitions`,
      timeout: p.operatorTimeout,
      memorySize: p.operatorMemorySize,
      environment,
      logRetention: p.retention.logs,
      removalPolicy: p.removalPolicy,
      bundle: p.bundle,
    });
    const grantee = operator.fn;
    // Consume its own queue (ReceiveMessage, DeleteMessage, ChangeMessageVisibility, GetQueueAttributes, GetQueueUrl; kms:Decrypt with a key).
    const eventSource = new SqsEventSource(queue, {
      batchSize: BATCH_SIZE,
      reportBatchItemFailures: true,
      maxConcurrency: p.maxConcurrency(stage),
    });
    grantee.addEventSource(eventSource);
    // Send to the downstream stages' queues and park dead letters in its own DLQ.
    const downstream = [...new Set(stage.outputs.map((e) => p.plan.edges[e].toStage))].map((s) => queues[s].queue);
    grantSend(grantee, [...downstream, deadLetterQueue], { key: p.encryptionKey });
    grantTable(grantee, storage.table, STAGE_TABLE_ACTIONS, stageLeadingKeys(job, stage.id), p.encryptionKey);
    // Spilled envelopes: written for downstream stages, read from upstream ones.
    grantObjects(grantee, storage.bucket, [bucketPrefixes(job).spill], { read: true, write: true }, p.encryptionKey);
    if (p.checkpoints) {
      // Checkpoints: snapshot objects (the blob store reads a key before writing it) and ack items.
      grantObjects(grantee, storage.bucket, [bucketPrefixes(job).snapshots], { read: true, write: true }, p.encryptionKey);
      // Source stages log the input they consume (lib/aws/operator/input-log.ts).
      if (stage.inputs.some((e) => p.plan.edges[e].from.kind === 'source')) grantObjects(grantee, storage.bucket, [bucketPrefixes(job).inputLog], { read: true, write: true }, p.encryptionKey);
      grantTable(grantee, storage.table, STAGE_ACK_TABLE_ACTIONS, [signalsPk(job)], p.encryptionKey);
      // The coordinator record, read once per container: the plan the state is at (lib/aws/operator/plan-guard.ts).
      grantTable(grantee, storage.table, ['dynamodb:GetItem'], coordinatorLeadingKeys(job), p.encryptionKey);
    }
    return { stage, queue, deadLetterQueue, operator, eventSource };
  });
}
