/**
 * FIFO queues as a deployment would create them for local runs: each stage queue with
 * its FIFO dead-letter queue (RedrivePolicy: after maxReceiveCount receives SQS moves
 * a message there), and the depth check the runner uses to see that a run is over.
 */
import { CreateQueueCommand, GetQueueAttributesCommand, SendMessageCommand, SetQueueAttributesCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { WAKE_BODY } from '../../aws/sqs/sqs-codec.ts';
import type { AwsAccounting } from '../../aws/cost/accounting.ts';

export interface FifoQueueOptions {
  /** Seconds a received message stays invisible (Lambda wants >= 6x the function timeout). Default 180. */
  readonly visibilityTimeoutSeconds?: number;
  /** Receives before SQS moves a message to the DLQ. Default 5. */
  readonly maxReceiveCount?: number;
}

export interface FifoQueue {
  readonly url: string;
  readonly arn: string;
  readonly dlqUrl: string;
  readonly dlqArn: string;
}

/** Create (idempotently) `<name>.fifo` and its DLQ `<name>-dlq.fifo`. */
export async function createFifoQueueWithDlq(sqs: SQSClient, name: string, options: FifoQueueOptions = {}, accounting?: AwsAccounting): Promise<FifoQueue> {
  const base = name.replace(/\.fifo$/, '');
  const dlqUrl = await create(sqs, `${base}-dlq.fifo`, { FifoQueue: 'true', MessageRetentionPeriod: String(14 * 24 * 3600) }, accounting);
  const dlqArn = await attribute(sqs, dlqUrl, 'QueueArn', accounting);
  const url = await create(
    sqs,
    `${base}.fifo`,
    {
      FifoQueue: 'true',
      VisibilityTimeout: String(options.visibilityTimeoutSeconds ?? 180),
      RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: options.maxReceiveCount ?? 5 }),
    },
    accounting,
  );
  return { url, arn: await attribute(sqs, url, 'QueueArn', accounting), dlqUrl, dlqArn };
}

async function create(sqs: SQSClient, QueueName: string, Attributes: Record<string, string>, accounting?: AwsAccounting): Promise<string> {
  const out = await sqs.send(new CreateQueueCommand({ QueueName, Attributes }));
  accounting?.record('sqs', 'CreateQueue', { requests: 1 });
  return out.QueueUrl!;
}

async function attribute(sqs: SQSClient, url: string, name: 'QueueArn', accounting?: AwsAccounting): Promise<string> {
  const out = await sqs.send(new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: [name] }));
  accounting?.record('sqs', 'GetQueueAttributes', { requests: 1 });
  return out.Attributes![name]!;
}

export interface QueueDepth {
  readonly visible: number;
  readonly inFlight: number;
  readonly delayed: number;
}

/** Approximate counts (exact on fauxqs). Not counted in the accounting: only the local runner asks. */
export async function queueDepth(sqs: SQSClient, url: string): Promise<QueueDepth> {
  const out = await sqs.send(
    new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible', 'ApproximateNumberOfMessagesDelayed'] }),
  );
  const n = (k: string) => Number(out.Attributes?.[k as 'ApproximateNumberOfMessages'] ?? 0);
  return { visible: n('ApproximateNumberOfMessages'), inFlight: n('ApproximateNumberOfMessagesNotVisible'), delayed: n('ApproximateNumberOfMessagesDelayed') };
}

/**
 * Release the long polls a local poller left on the server (a killed process, a stopped
 * SqsEventSource: aborting a poll on the client leaves it waiting on fauxqs for up to
 * 20 s). Such a poll takes the next message sent to the queue and keeps it invisible for
 * the whole visibility timeout, holding its group back. Lambda's pollers belong to AWS and
 * never leave one behind; a local restore must, before it sends anything.
 *
 * How: with the queue's visibility timeout at 0, one empty message (WAKE_BODY) in a group
 * no partition uses wakes every waiting poll at once; each takes what it finds, once (one
 * of them this message, visible again at once; the others nothing). Then the visibility
 * timeout is put back. The operator function accepts the message whenever a live poller
 * receives it (an empty message needs no partition).
 */
export async function flushAbandonedPolls(sqs: SQSClient, url: string, flushId: string): Promise<void> {
  const vt = (await sqs.send(new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['VisibilityTimeout'] }))).Attributes?.VisibilityTimeout ?? '30';
  await sqs.send(new SetQueueAttributesCommand({ QueueUrl: url, Attributes: { VisibilityTimeout: '0' } }));
  try {
    await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: WAKE_BODY, MessageGroupId: FLUSH_GROUP, MessageDeduplicationId: flushId.slice(-128) }));
  } finally {
    await sqs.send(new SetQueueAttributesCommand({ QueueUrl: url, Attributes: { VisibilityTimeout: vt } }));
  }
}

/** The group of flush messages: not a partition, so no partition ever waits behind one. */
export const FLUSH_GROUP = 'sluice-flush';
