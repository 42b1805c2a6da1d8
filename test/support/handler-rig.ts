/**
 * A job's resources on DynamoDB Local and fauxqs (state table, bucket, stage queues) and
 * warm containers of its operator handlers, each with its own clients (stormClient: calls
 * counted per invocation, one may be held) and cached partitions, writing to one shared
 * sink: test/aws/redelivery-storm.test.ts.
 */
import type { Sink } from '../../lib/api/sinks.ts';
import type { SourceBinding } from '../../lib/api/sources.ts';
import type { Job } from '../../lib/api/stream.ts';
import { createOperatorHandler } from '../../lib/aws/operator/operator-handler.ts';
import { S3BlobStore } from '../../lib/aws/s3/s3-blob-store.ts';
import { drainDeadLetters } from '../../lib/testing/local-aws/dead-letters.ts';
import { cleanClients, type ServerConfig } from './aws-faults.ts';
import { counter, feedInput } from './fault-runs.ts';
import { jobResources } from './job-resources.ts';
import { type StormHandler, stormClient } from './storm-driver.ts';

export interface RigOptions {
  readonly servers: ServerConfig;
  readonly sinkName: string;
  readonly seed: number;
  readonly maxAttempts?: number;
}

export async function createRig(makeJob: () => Job, o: RigOptions) {
  const { clean, job, plan, prefix, table, bucket, queues, resolver, accounting, sink } = await jobResources(makeJob, o.servers, { prefix: 'rig', bucket: 'b' });
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
