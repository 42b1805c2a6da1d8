/**
 * Lambda entry of the checkpoint state machine's tasks (infra/checkpoint-state-machine.ts):
 * one function, the action in the event. Logic: lib/aws/checkpoint/checkpoint-steps.ts.
 * Built on the first call, so loading the bundle needs no configuration.
 */
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { SQSClient } from '@aws-sdk/client-sqs';
import { handlerClientConfig } from '../lib/aws/clients.ts';
import { type CheckpointHandler, createCheckpointHandler } from '../lib/aws/checkpoint/checkpoint-handler.ts';
import { METRICS_NAMESPACE } from '../lib/aws/handler-metrics.ts';
import { deployment, job } from './job.ts';

let built: CheckpointHandler | undefined;

export const handler = (event: unknown) =>
  (built ??= createCheckpointHandler({
    job,
    dynamodb: new DynamoDBClient(handlerClientConfig()),
    sqs: new SQSClient(handlerClientConfig()),
    s3: new S3Client(handlerClientConfig()),
    bucket: deployment.bucket,
    queuePrefix: deployment.queuePrefix,
    tableName: deployment.table,
    metrics: new Metrics({ namespace: METRICS_NAMESPACE, serviceName: job.name }),
    logger: new Logger({ serviceName: `sluice-${job.name}-checkpoint` }),
  }))(event);
