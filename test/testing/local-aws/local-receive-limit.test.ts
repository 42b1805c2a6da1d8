/**
 * The local emulation's stage queues redrive as the deployed ones do: the same
 * maxReceiveCount (infra/stages.ts MAX_RECEIVE_COUNT), unless a run sets its own.
 */
import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { Sinks, type Sink } from '../../../lib/api/sinks.ts';
import { Job } from '../../../lib/api/stream.ts';
import { localAwsAt } from '../../../lib/testing/local-aws/endpoints.ts';
import { LocalAwsRuntime } from '../../../lib/testing/local-aws/runner.ts';
import { MAX_RECEIVE_COUNT } from '../../../infra/stages.ts';

const env = localAwsAt({ dynamodb: inject('dynamodbEndpoint'), sqs: inject('fauxqsEndpoint'), s3: inject('fauxqsEndpoint') }, inject('awsRegion'), inject('awsCredentials'));
afterAll(() => env.close());

function makeJob(): Job {
  const job = new Job('receive-limit', { parallelism: 1, maxParallelism: 8 });
  job.fromItems('n', [1, 2, 3], { timestamp: (i) => i }).map((i) => i).keyBy((i) => i % 2).process({ processElement(i, ctx) { ctx.emit(i); } }).sinkTo(Sinks.collect(), 'out');
  return job;
}

async function receiveLimits(maxReceiveCount?: number): Promise<number[]> {
  const runtime = new LocalAwsRuntime(makeJob(), { env, sinks: { out: Sinks.collect() as Sink<any> }, ...(maxReceiveCount !== undefined ? { maxReceiveCount } : {}) });
  await runtime.start();
  try {
    const limits: number[] = [];
    for (const q of runtime.queues) {
      const got = await env.clients.sqs.send(new GetQueueAttributesCommand({ QueueUrl: q.url, AttributeNames: ['RedrivePolicy'] }));
      limits.push(Number(JSON.parse(got.Attributes!.RedrivePolicy!).maxReceiveCount));
    }
    return limits;
  } finally {
    await runtime.stop();
  }
}

describe('local-AWS stage queues', () => {
  it('redrive after the deployed maxReceiveCount by default, or the one a run sets', async () => {
    expect(MAX_RECEIVE_COUNT).toBe(100);
    const limits = await receiveLimits();
    expect(limits.length).toBe(2);
    expect(limits).toEqual(limits.map(() => MAX_RECEIVE_COUNT));
    expect(await receiveLimits(7)).toEqual([7, 7]);
  }, 60_000);
});
