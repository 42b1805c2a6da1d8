/**
 * Lambda entry of the ingestion endpoint (HTTP API v2 or Function URL):
 * POST /streams/<name>/events -> the source stage's SQS FIFO queue.
 * With checkpoints deployed, accepted input wakes the coordinator's state machine.
 * Idempotency-Keys are claimed in the state table. With an age bound, or a stream that sheds by
 * lag, queue ages come from CloudWatch.
 * Logic: lib/aws/ingest/ingest-handler.ts, lib/aws/ingest/idempotency-store.ts, lib/aws/checkpoint/checkpoint-wakeup.ts.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { SFNClient } from '@aws-sdk/client-sfn';
import { SQSClient } from '@aws-sdk/client-sqs';
import { CloudWatchClient } from '@aws-sdk/client-cloudwatch';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { handlerClientConfig } from '../lib/aws/clients.ts';
import { METRICS_NAMESPACE } from '../lib/aws/handler-metrics.ts';
import { AwsAccounting } from '../lib/aws/cost/accounting.ts';
import { DynamoDbAckStore } from '../lib/aws/checkpoint/checkpoint-acks.ts';
import { DEFAULT_ACTIVITY_GRAIN_MS } from '../lib/aws/checkpoint/checkpoint-task.ts';
import { CoordinatorWakeUp } from '../lib/aws/checkpoint/checkpoint-wakeup.ts';
import { DynamoDbPointerStore } from '../lib/aws/dynamodb/dynamodb-pointers.ts';
import { DynamoDbIdempotencyStore } from '../lib/aws/ingest/idempotency-store.ts';
import { createIngestHandler } from '../lib/aws/ingest/ingest-handler.ts';
import { CloudWatchQueueAge } from '../lib/aws/ingest/queue-age.ts';
import { shedsByQueueAge } from '../lib/aws/ingest/ingest-shedding.ts';
import { compile } from '../lib/graph/compile.ts';
import { NamedQueues } from '../lib/aws/sqs/sqs-queues.ts';
import { deployment, job } from './job.ts';

const sqs = new SQSClient(handlerClientConfig());
const accounting = new AwsAccounting();
const client = new DynamoDBClient(handlerClientConfig());
// Only the age bound and shedding by lag call it (queue ages are CloudWatch metrics).
const cloudwatch = new CloudWatchClient(handlerClientConfig());
const readsQueueAges = deployment.ingestMaxQueueAgeMs !== undefined || shedsByQueueAge(compile(job.graph));
const tableName = deployment.table;

function wakeUp(stateMachineArn: string): CoordinatorWakeUp {
  return new CoordinatorWakeUp({
    job: job.name,
    sfn: new SFNClient(handlerClientConfig()),
    stateMachineArn,
    activity: new DynamoDbAckStore({ client, tableName, job: job.name, accounting }),
    pointers: new DynamoDbPointerStore({ client, tableName, job: job.name, accounting }),
    // The state machine's default grain (infra/checkpoint-state-machine.ts uses the same constant).
    grainMs: DEFAULT_ACTIVITY_GRAIN_MS,
    accounting,
  });
}

export const handler = createIngestHandler({
  job,
  sqs,
  accounting,
  queues: new NamedQueues(sqs, job.name, deployment.queuePrefix),
  idempotency: new DynamoDbIdempotencyStore({ client, tableName, job: job.name, accounting }),
  wakeUp: deployment.stateMachineArn ? wakeUp(deployment.stateMachineArn) : undefined,
  maxBacklogMessages: deployment.ingestMaxQueuedMessages,
  ...(deployment.ingestMaxQueueAgeMs === undefined ? {} : { maxQueueAgeMs: deployment.ingestMaxQueueAgeMs }),
  ...(readsQueueAges ? { queueAge: new CloudWatchQueueAge(cloudwatch, { accounting }) } : {}),
  logger: new Logger({ serviceName: `sluice-${job.name}-ingest` }),
  metrics: new Metrics({ namespace: METRICS_NAMESPACE, serviceName: job.name }),
});
