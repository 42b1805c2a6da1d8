/**
 * Names of a job's AWS resources. Handlers derive everything from the job and the
 * event (no invented environment variables): the stage a function serves is read from
 * its event source queue's name, and downstream queues are found by name.
 *
 *   stage queue     `${job}-s${stage}.fifo`       MessageGroupId = partition
 *   its DLQ         `${job}-s${stage}-dlq.fifo`   redrive target (maxReceiveCount), and
 *                                                  where parked records (dead letters) go
 *   state table     `sluice-${prefix}${job}`       state, progress, outbox (dynamodb-state.ts),
 *                                                  checkpoint pointers (dynamodb-pointers.ts)
 *
 * Job names are at most 63 characters of [A-Za-z0-9_-] (checked by Job), so every
 * name here is within SQS's 80 characters and needs no escaping.
 */
import { ConfigError } from '../errors.ts';

/** SQS: at most 80 characters including `.fifo`. */
const MAX_QUEUE_NAME = 80;

export function stageQueueName(job: string, stage: number, prefix = ''): string {
  return checked(`${prefix}${job}-s${stage}.fifo`);
}

export function deadLetterQueueName(job: string, stage: number, prefix = ''): string {
  return checked(`${prefix}${job}-s${stage}-dlq.fifo`);
}

export function stateTableName(job: string, prefix = ''): string {
  return `sluice-${prefix}${job}`;
}

/** The CloudFormation stack `sluice deploy` creates for a job: letters, digits and hyphens, starting with a letter. */
export function stackNameFor(job: string): string {
  return `Sluice-${job.replace(/[^A-Za-z0-9-]/g, '-')}`;
}

function checked(name: string): string {
  if (name.length > MAX_QUEUE_NAME || !/^[A-Za-z0-9_-]+\.fifo$/.test(name)) {
    throw new ConfigError('queue name', `at most ${MAX_QUEUE_NAME} characters of letters, digits, "-" and "_" ending in .fifo (shorten the job name or prefix)`, JSON.stringify(name));
  }
  return name;
}

/** The queue name in an SQS ARN (`arn:aws:sqs:region:account:name`) or queue URL. */
export function queueNameOf(arnOrUrl: string): string {
  const sep = arnOrUrl.startsWith('arn:') ? ':' : '/';
  return arnOrUrl.slice(arnOrUrl.lastIndexOf(sep) + 1);
}

/** The stage a stage queue feeds, from its ARN or URL; undefined when the name is not one of this job's stage queues. */
export function stageOfQueue(job: string, arnOrUrl: string, prefix = ''): number | undefined {
  const name = queueNameOf(arnOrUrl);
  const head = `${prefix}${job}-s`;
  if (!name.startsWith(head) || !name.endsWith('.fifo')) return undefined;
  const digits = name.slice(head.length, -'.fifo'.length);
  return /^(0|[1-9]\d*)$/.test(digits) ? Number(digits) : undefined;
}
