/**
 * A job on the AWS path against DynamoDB Local and fauxqs, driven step by step: its
 * resources (jobResources), the ingest handler, the checkpoint task's steps (`step(action,
 * carry)`, one Step Functions task each), operator handlers draining the stage queues into
 * the given sinks, and the checkpoint stores. The savepoint tests (test/aws/savepoints,
 * test/aws/savepoint-portability) drive epochs with it.
 */
import type { Logger } from '@aws-lambda-powertools/logger';
import { expect, inject } from 'vitest';
import type { Sink } from '../../lib/api/sinks.ts';
import type { Job } from '../../lib/api/stream.ts';
import { createCheckpointHandler } from '../../lib/aws/checkpoint/checkpoint-handler.ts';
import type { Carry, Limits } from '../../lib/aws/checkpoint/checkpoint-task.ts';
import { DynamoDbPointerStore } from '../../lib/aws/dynamodb/dynamodb-pointers.ts';
import { createIngestHandler } from '../../lib/aws/ingest/ingest-handler.ts';
import { createOperatorHandler } from '../../lib/aws/operator/operator-handler.ts';
import { S3BlobStore } from '../../lib/aws/s3/s3-blob-store.ts';
import { apiEvent } from '../../lib/testing/local-aws/feeder.ts';
import { runUntilDrained } from '../aws/helpers.ts';
import { jobResources } from './job-resources.ts';

export const STEP_LIMITS: Limits = { maxEpochs: 1000, maxFailures: 5, leaseMs: 600_000, activityGrainMs: 0, epochTimeoutMs: 600_000 };

export interface AwsJobPathOptions {
  /** Names the table, bucket and queues apart. */
  readonly prefix: string;
  /** Called at the checkpoint steps' named points (a crash between two calls). */
  readonly hook?: (point: string) => void | Promise<void>;
  /** The handlers' and the checkpoint steps' Powertools Logger. */
  readonly logger?: Logger;
}

export async function awsJobPath(job: Job, sinks: Readonly<Record<string, Sink<any>>>, o: AwsJobPathOptions) {
  const servers = { region: inject('awsRegion'), credentials: inject('awsCredentials'), dynamodb: inject('dynamodbEndpoint'), sqs: inject('fauxqsEndpoint') };
  const { clean: clients, plan, prefix, table, bucket, queues, resolver: staticQueues } = await jobResources(() => job, servers, { prefix: o.prefix, bucket: o.prefix });
  const name = plan.job.name;
  const ingest = createIngestHandler({ job, sqs: clients.sqs, queues: staticQueues });
  const coordinator = createCheckpointHandler({ job, ...clients, bucket, tableName: table, queues: staticQueues, logger: o.logger, ...(o.hook ? { overrides: { hook: o.hook } } : {}) });
  const step = (action: string, carry: Partial<Carry>) => coordinator({ action, execution: 'test', carry, limits: STEP_LIMITS });
  const blobs = new S3BlobStore({ s3: clients.s3, bucket });
  const pointers = new DynamoDbPointerStore({ client: clients.dynamodb, tableName: table, job: name });
  const drain = () =>
    runUntilDrained({
      sqs: clients.sqs,
      queues,
      container: () => ({ invoke: createOperatorHandler({ job, ...clients, tableName: table, queues: staticQueues, queuePrefix: prefix, sinks, checkpointStore: blobs, logger: o.logger }) }),
      maxInvocations: 2000,
    });
  /** Events `from` to `to` of `items` into `stream`, ten per request. */
  const publish = async (stream: string, items: readonly unknown[], from = 0, to = items.length) => {
    for (let i = from; i < to; i += 10) expect((await ingest(apiEvent(stream, JSON.stringify(items.slice(i, Math.min(to, i + 10)))))).statusCode).toBe(202);
  };
  /** One epoch through the steps: open (with or without new activity), inject, drain, decide, commit. */
  const epoch = async (c: Carry, touch: boolean): Promise<Carry> => {
    if (touch) await coordinator.acks.touch(Date.now());
    c = await step('open', c);
    expect(c.next).toBe('inject');
    c = await step('inject', c);
    await drain();
    c = await step('decide', c);
    expect(c.next).toBe('commit');
    return step('commit', c);
  };
  return {
    clients,
    plan,
    table,
    bucket,
    prefix,
    queues,
    staticQueues,
    ingest,
    step,
    blobs,
    pointers,
    drain,
    publish,
    epoch,
    /** What the savepoint functions take: the job's control items and bucket. */
    at: { pointers, blobs, job: name },
    close: () => Object.values(clients).forEach((c) => c.destroy()),
  };
}
