/**
 * A job's resources on DynamoDB Local and fauxqs for runs through the operator handlers:
 * its state table, bucket and stage queues (the production receive limit, a visibility of
 * 180 s for a 30 s function timeout), under a prefix of its own.
 */
import { Sinks } from '../../lib/api/sinks.ts';
import type { Job } from '../../lib/api/stream.ts';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { createBucket } from '../../lib/aws/s3/s3-blob-store.ts';
import { createStageQueues, StaticQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { compile } from '../../lib/graph/compile.ts';
import { MAX_RECEIVE_COUNT } from '../../infra/stages.ts';
import { unique } from '../aws/helpers.ts';
import { cleanClients, type ServerConfig } from './aws-faults.ts';

export async function jobResources(makeJob: () => Job, servers: ServerConfig, names: { readonly prefix: string; readonly bucket: string }) {
  const clean = cleanClients(servers);
  const job = makeJob();
  const plan = compile(job.graph);
  const prefix = `${unique(names.prefix)}-`;
  const table = `sluice-${prefix}${plan.job.name}`;
  const bucket = `sluice-${prefix}${names.bucket}`.toLowerCase();
  await createStateTable(clean.dynamodb, table);
  await createBucket(clean.s3, bucket);
  const queues = await createStageQueues(clean.sqs, plan, { prefix, maxReceiveCount: MAX_RECEIVE_COUNT, visibilityTimeoutSeconds: 180 });
  return { clean, job, plan, prefix, table, bucket, queues, resolver: new StaticQueues(queues), accounting: new AwsAccounting(), sink: Sinks.collect<unknown>() };
}
