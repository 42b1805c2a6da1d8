/**
 * Lambda entry of every stage function (SQS FIFO event source with
 * ReportBatchItemFailures). The stage is read from the event source queue's name;
 * endpoints and region come from the SDK's own configuration. Logic: lib/aws/operator/operator-handler.ts.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { SQSClient } from '@aws-sdk/client-sqs';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { handlerClientConfig } from '../lib/aws/clients.ts';
import { METRICS_NAMESPACE } from '../lib/aws/handler-metrics.ts';
import { createOperatorHandler } from '../lib/aws/operator/operator-handler.ts';
import { S3BlobStore } from '../lib/aws/s3/s3-blob-store.ts';
import { deployment, job } from './job.ts';

const s3 = new S3Client(handlerClientConfig());

export const handler = createOperatorHandler({
  job,
  s3,
  bucket: deployment.bucket,
  sqs: new SQSClient(handlerClientConfig()),
  dynamodb: new DynamoDBClient(handlerClientConfig()),
  queuePrefix: deployment.queuePrefix,
  tableName: deployment.table,
  blobs: deployment.bucket ? new S3BlobStore({ s3, bucket: deployment.bucket, prefix: `${job.name}/` }) : undefined,
  // Snapshot keys start with `${job}/snapshots/`; acks go to the state table (the default).
  checkpointStore: deployment.checkpoints && deployment.bucket ? new S3BlobStore({ s3, bucket: deployment.bucket }) : undefined,
  logger: new Logger({ serviceName: `sluice-${job.name}` }),
  metrics: new Metrics({ namespace: METRICS_NAMESPACE, serviceName: job.name }),
});
