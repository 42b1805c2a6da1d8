/**
 * A job's resources on DynamoDB Local and fauxqs (state table, bucket, stage queues) and
 * warm containers of its operator handlers, each with its own clients (stormClient: calls
 * counted per invocation, one may be held) and cached partitions, writing to one shared
 * sink: test/aws/redelivery-storm.test.ts and test/aws/zombie-commits.test.ts.
 */
import { type Sink, Sinks } from '../../lib/api/sinks.ts';
import type { SourceBinding } from '../../lib/api/sources.ts';
import type { Job } from '../../lib/api/stream.ts';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { createOperatorHandler } from '../../lib/aws/operator/operator-handler.ts';
import { createBucket, S3BlobStore } from '../../lib/aws/s3/s3-blob-store.ts';
import { createStageQueues, StaticQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { compile } from '../../lib/graph/compile.ts';
import { drainDeadLetters } from '../../lib/testing/local-aws/dead-letters.ts';
import { MAX_RECEIVE_COUNT } from '../../infra/stages.ts';
import { unique } from '../aws/helpers.ts';
import { cleanClients, type ServerConfig } from './aws-faults.ts';
import { counter, feedInput } from './fault-runs.ts';
import { type StormHandler, stormClient } from './storm-driver.ts';

export interface RigOptions {
  readonly servers: ServerConfig;
  readonly sinkName: string;
  readonly seed: number;
  readonly maxAttempts?: number;
}

export async function createRig(makeJob: () => Job, o: RigOptions) {
  const clean = cleanClients(o.servers);
  const job = makeJob();
  const plan = compile(job.graph);
  const prefix = `${unique('rig')}-`;
  const table = `sluice-${prefix}${plan.job.name}`;
  const bucket = `sluice-${prefix}b`.toLowerCase();
  await createStateTable(clean.dynamodb, table);
  await createBucket(clean.s3, bucket);
  const queues = await createStageQueues(clean.sqs, plan, { prefix, maxReceiveCount: MAX_RECEIVE_COUNT, visibilityTimeoutSeconds: 180 });
  const resolver = new StaticQueues(queues);
  const accounting = new AwsAccounting();
  const sink = Sinks.collect<unknown>();
  const { counts, metrics, logger, errors } = counter();
  const made: { destroy(): void }[] = [];
  /** A new warm container of a stage. */
  const container = (stage: number): StormHandler => {
    const c = cleanClients(o.servers);
    const sqs = stormClient(c.sqs);
    const dynamodb = stormClient(c.dynamodb);
    const s3 = stormClient(c.s3);
    made.push(sqs, dynamodb, s3);
    const handler = createOperatorHandler({
      job,
      stage,
      sqs,
      dynamodb,
      s3,
      tableName: table,
      queues: resolver,
      blobs: new S3BlobStore({ s3, bucket, prefix: `${plan.job.name}/` }),
      checkpointStore: new S3BlobStore({ s3, bucket }),
      sinks: { [o.sinkName]: sink as Sink<any> },
      maxAttempts: o.maxAttempts ?? 3,
      logger,
      metrics,
      backoff: { seed: o.seed },
    });
    return (event) => handler(event);
  };
  return {
    clean,
    plan,
    table,
    queues,
    sink,
    counts,
    errors,
    container,
    /** Every source's input into the stage queues, `chunkSize` records per envelope. */
    feed: (sources: Readonly<Record<string, SourceBinding<any>>>, chunkSize = 8) => feedInput({ job, plan, sqs: clean.sqs, queues: resolver, accounting, sources, chunkSize }),
    deadLetters: () => drainDeadLetters(clean.sqs, queues, accounting),
    close: () => [...made, clean.dynamodb, clean.sqs, clean.s3].forEach((c) => c.destroy()),
  };
}
