/**
 * A poison record in an envelope held behind a checkpoint barrier, through the operator
 * handler against fauxqs, DynamoDB Local and S3: the keyed partition has two input
 * channels; channel A delivers barrier 1 and then an envelope with a poison record
 * (held: A is blocked until B's barrier arrives); B's barrier, in a later invocation,
 * aligns the checkpoint, and the held envelope is applied there. Its record's user code
 * throws from the partition's committed progress, not from a message of that batch: the
 * record is still retried maxAttempts times and parked, the good records around it come
 * out once, and the barrier is acknowledged (the checkpoint can complete). Before, the
 * throw counted as an infrastructure failure: the group backed off until it stalled.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CollectSink, Sinks } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { createOperatorHandler } from '../../lib/aws/operator/operator-handler.ts';
import { createBucket, S3BlobStore } from '../../lib/aws/s3/s3-blob-store.ts';
import { type DeadLetterMessage, decodeBody } from '../../lib/aws/sqs/sqs-codec.ts';
import { createStageQueues, StaticQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { SqsTransport } from '../../lib/aws/sqs/sqs-transport.ts';
import { compile } from '../../lib/graph/compile.ts';
import { keyGroupOf, partitionOfKeyGroup } from '../../lib/graph/keygroups.ts';
import type { BarrierAck, Envelope } from '../../lib/transport/envelope.ts';
import { drainQueue, localClients, sqsEvent, unique } from './helpers.ts';

interface Ev {
  id: string;
  user: string;
  poison?: boolean;
}

const clients = localClients();
const table = unique('sluice-held');
const bucket = unique('held').toLowerCase();
beforeAll(async () => {
  await createStateTable(clients.dynamodb, table);
  await createBucket(clients.s3, bucket);
});
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));

function heldJob(name: string): Job {
  const job = new Job(name, { parallelism: 2, maxParallelism: 8 });
  job
    .ingest<Ev>('events', { watermark: { maxOutOfOrdernessMs: 0 } })
    .keyBy((e) => e.user)
    .process<Ev>({
      processElement(e, ctx) {
        if (e.poison) throw new Error(`poisoned event ${e.id}`);
        ctx.emit(e);
      },
    })
    .name('per-user')
    .sinkTo(Sinks.collect<Ev>(), 'out');
  return job;
}

describe('a poison record held behind a barrier', () => {
  it('is retried maxAttempts times and parked when the barrier aligns; the barrier is acknowledged, the good records come out once', async () => {
    const job = heldJob(unique('held'));
    const plan = compile(job.graph);
    const queues = await createStageQueues(clients.sqs, plan, { maxReceiveCount: 10, visibilityTimeoutSeconds: 300 });
    const staticQueues = new StaticQueues(queues);
    const sink = new CollectSink<Ev>();
    const acks: BarrierAck[] = [];
    const handler = createOperatorHandler({
      job,
      sqs: clients.sqs,
      dynamodb: clients.dynamodb,
      tableName: table,
      queues: staticQueues,
      sinks: { out: sink },
      maxAttempts: 3,
      maxReceiveCount: 10,
      checkpointStore: new S3BlobStore({ s3: clients.s3, bucket }),
      onBarrierAcks: async (a) => void acks.push(...a),
    });
    // Stage 1 partition 0, fed by stage 0's partitions 0 (channel A) and 1 (channel B) over edge 1.
    const edge = plan.edges.findIndex((e) => e.toStage === 1);
    const users = ['ann', 'bob', 'cy', 'dee', 'eve', 'fay'].filter((u) => partitionOfKeyGroup(keyGroupOf(u, 8), 2, 8) === 0);
    expect(users.length).toBeGreaterThan(0);
    const u = users[0];
    const rec = (e: Ev) => ({ value: e, timestamp: 0, key: e.user });
    const barrier = { epoch: 1, baseEpoch: 0, full: [], savepoint: false };
    const env = (from: number, seq: number, more: Partial<Envelope>): Envelope => ({ channel: `${edge}:${from}`, edge, toPartition: 0, seq, records: [], watermark: Number.NEGATIVE_INFINITY, ...more });
    const transport = new SqsTransport({ sqs: clients.sqs, job: plan.job.name, queues: staticQueues });
    await transport.sendEnvelopes(plan, [env(0, 1, { barrier }), env(0, 2, { records: [rec({ id: 'g1', user: u }), rec({ id: 'X', user: u, poison: true }), rec({ id: 'g2', user: u })] })]);
    await transport.sendEnvelopes(plan, [env(1, 1, { barrier })]);
    // One message per send: A's barrier with the envelope behind it, then B's barrier.
    const [fromA, barrierB, ...more] = await drainQueue(clients.sqs, queues[1].url);
    expect(more).toEqual([]);
    expect(barrierB).toBeDefined();

    // A's barrier and the envelope behind it: committed, the envelope held (nothing applied, nothing acked).
    expect((await handler(sqsEvent([fromA], queues[1].arn))).batchItemFailures).toEqual([]);
    expect(sink.records).toEqual([]);
    expect(acks).toEqual([]);

    // B's barrier aligns the checkpoint; the held envelope's poison record throws: tried three times, then parked.
    const again = (count: number) => [{ ...barrierB, Attributes: { ...barrierB.Attributes, ApproximateReceiveCount: String(count) } }];
    for (const receive of [1, 2]) expect((await handler(sqsEvent(again(receive), queues[1].arn))).batchItemFailures.map((f) => f.itemIdentifier)).toEqual([barrierB.MessageId]);
    expect(sink.records).toEqual([]);
    expect((await handler(sqsEvent(again(3), queues[1].arn))).batchItemFailures).toEqual([]);
    expect(sink.records.map((e) => e.id)).toEqual(['g1', 'g2']);
    expect(acks.map((a) => [a.epoch, a.stage, a.partition])).toEqual([[1, 1, 0]]);
    const dead = (await drainQueue(clients.sqs, queues[1].dlqUrl)).map((m) => decodeBody(m.Body!) as unknown as DeadLetterMessage);
    expect(dead).toHaveLength(1);
    expect(dead[0]).toMatchObject({ operator: 'per-user', channel: `${edge}:0`, seq: 2, index: 1, attempts: 3, record: { value: { id: 'X' } } });
    expect(dead[0].error).toMatch(/poisoned event X/);
  });
});
