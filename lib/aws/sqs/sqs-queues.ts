/**
 * Finding and creating a job's stage queues (names in naming.ts). Each stage has one
 * FIFO queue (MessageGroupId = partition) whose RedrivePolicy moves a message that was
 * received maxReceiveCount times to the stage's FIFO dead-letter queue. The operator
 * handler parks a failing record itself before that count (operator-handler.ts), so
 * redrive is the last resort for messages that cannot be processed at all.
 *
 * Visibility timeout: Lambda requires at least 6x the function timeout; tests and
 * local-AWS mode use shorter ones.
 */
import { CreateQueueCommand, GetQueueAttributesCommand, GetQueueUrlCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { PhysicalPlan } from '../../graph/compile.ts';
import { type AwsAccounting } from '../cost/accounting.ts';
import { DEFAULT_MAX_RECEIVE_COUNT } from '../operator/group-backoff.ts';
import { deadLetterQueueName, stageQueueName } from '../naming.ts';
import { DEFAULT_MAX_MESSAGE_BYTES } from './sqs-codec.ts';
import { mapSqsError } from '../transport-errors.ts';

/** Where a stage's messages go. */
export interface QueueResolver {
  queueUrl(stage: number): Promise<string>;
  deadLetterQueueUrl(stage: number): Promise<string>;
}

/** Queue URLs by name through GetQueueUrl (so AWS_ENDPOINT_URL_SQS and the account apply), cached for the process. */
export class NamedQueues implements QueueResolver {
  private readonly cache = new Map<string, Promise<string>>();
  constructor(
    private readonly sqs: SQSClient,
    private readonly job: string,
    private readonly prefix = '',
    private readonly accounting?: AwsAccounting,
  ) {}

  queueUrl(stage: number): Promise<string> {
    return this.lookup(stageQueueName(this.job, stage, this.prefix));
  }

  deadLetterQueueUrl(stage: number): Promise<string> {
    return this.lookup(deadLetterQueueName(this.job, stage, this.prefix));
  }

  private lookup(name: string): Promise<string> {
    let hit = this.cache.get(name);
    if (!hit) {
      hit = this.sqs.send(new GetQueueUrlCommand({ QueueName: name })).then(
        (out) => {
          this.accounting?.record('sqs', 'GetQueueUrl', { requests: 1, estimatedReadUnits: 1 });
          return out.QueueUrl!;
        },
        (e) => {
          this.cache.delete(name); // a missing queue may be created later
          this.accounting?.record('sqs', 'GetQueueUrl', { requests: 1, errors: 1 });
          throw mapSqsError(e, 'GetQueueUrl', name);
        },
      );
      this.cache.set(name, hit);
    }
    return hit;
  }
}

/** Fixed URLs (tests, local-AWS mode after createStageQueues). */
export class StaticQueues implements QueueResolver {
  constructor(private readonly urls: readonly StageQueues[]) {}
  async queueUrl(stage: number): Promise<string> {
    return this.get(stage).url;
  }
  async deadLetterQueueUrl(stage: number): Promise<string> {
    return this.get(stage).dlqUrl;
  }
  private get(stage: number): StageQueues {
    const q = this.urls[stage];
    if (!q) throw mapSqsError(new Error(`no queue for stage ${stage}`), 'resolve', `stage ${stage}`);
    return q;
  }
}

export interface StageQueues {
  readonly url: string;
  readonly arn: string;
  readonly dlqUrl: string;
  readonly dlqArn: string;
}

export interface CreateQueuesOptions {
  readonly prefix?: string;
  /** Receives before SQS moves a message to the DLQ (default: the deployment's, DEFAULT_MAX_RECEIVE_COUNT). Keep it above the handler's maxAttempts. */
  readonly maxReceiveCount?: number;
  readonly visibilityTimeoutSeconds?: number;
  readonly maxMessageBytes?: number;
  /**
   * Deduplication and throughput per message group, as SluiceJob deploys by default
   * (props.highThroughputFifo; default on here too). fauxqs accepts and reports the two
   * attributes but deduplicates queue-wide and has no throughput quota, so local runs cannot
   * tell the two apart.
   */
  readonly highThroughput?: boolean;
}

/** Create (idempotently) every stage queue of a plan with its DLQ. */
export async function createStageQueues(sqs: SQSClient, plan: PhysicalPlan, options: CreateQueuesOptions = {}): Promise<StageQueues[]> {
  const out: StageQueues[] = [];
  for (const stage of plan.stages) {
    const base: Record<string, string> = { FifoQueue: 'true', ContentBasedDeduplication: 'false', MaximumMessageSize: String(options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES) };
    const ht: Record<string, string> = (options.highThroughput ?? true) ? { DeduplicationScope: 'messageGroup', FifoThroughputLimit: 'perMessageGroupId' } : {};
    const dlqName = deadLetterQueueName(plan.job.name, stage.id, options.prefix);
    const dlqUrl = await create(sqs, dlqName, { ...base, ...ht, MessageRetentionPeriod: String(14 * 24 * 3600) });
    const dlqArn = await queueArn(sqs, dlqUrl);
    const name = stageQueueName(plan.job.name, stage.id, options.prefix);
    const url = await create(sqs, name, {
      ...base,
      ...ht,
      VisibilityTimeout: String(options.visibilityTimeoutSeconds ?? 60),
      RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: options.maxReceiveCount ?? DEFAULT_MAX_RECEIVE_COUNT }),
    });
    out.push({ url, arn: await queueArn(sqs, url), dlqUrl, dlqArn });
  }
  return out;
}

async function create(sqs: SQSClient, name: string, attributes: Record<string, string>): Promise<string> {
  try {
    return (await sqs.send(new CreateQueueCommand({ QueueName: name, Attributes: attributes }))).QueueUrl!;
  } catch (e) {
    throw mapSqsError(e, 'CreateQueue', name);
  }
}

export async function queueArn(sqs: SQSClient, url: string): Promise<string> {
  try {
    return (await sqs.send(new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['QueueArn'] }))).Attributes!.QueueArn!;
  } catch (e) {
    throw mapSqsError(e, 'GetQueueAttributes', url);
  }
}

/** Messages waiting in a queue (ApproximateNumberOfMessages), for ingestion back-pressure. */
export async function queueBacklog(sqs: SQSClient, url: string, accounting?: AwsAccounting): Promise<number> {
  try {
    const out = await sqs.send(new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['ApproximateNumberOfMessages'] }));
    accounting?.record('sqs', 'GetQueueAttributes', { requests: 1, estimatedReadUnits: 1 });
    return Number(out.Attributes?.ApproximateNumberOfMessages ?? 0);
  } catch (e) {
    accounting?.record('sqs', 'GetQueueAttributes', { requests: 1, errors: 1 });
    throw mapSqsError(e, 'GetQueueAttributes', url);
  }
}
