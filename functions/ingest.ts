/**
 * Lambda entry of the ingestion endpoint (HTTP API v2 or Function URL):
 * POST /streams/<name>/events -> the source stage's SQS FIFO queue.
 * Logic: lib/aws/ingest-handler.ts.
 */
import { SQSClient } from '@aws-sdk/client-sqs';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { createIngestHandler } from '../lib/aws/ingest-handler.ts';
import { NamedQueues } from '../lib/aws/sqs-queues.ts';
import { deployment, job } from './job.ts';

const sqs = new SQSClient({});

export const handler = createIngestHandler({
  job,
  sqs,
  queues: new NamedQueues(sqs, job.name, deployment.queuePrefix),
  logger: new Logger({ serviceName: `sluice-${job.name}-ingest` }),
  metrics: new Metrics({ namespace: 'Sluice', serviceName: job.name }),
});
