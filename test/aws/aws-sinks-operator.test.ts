/**
 * Both AWS sinks behind the real operator function: a keyed job's running counts go to
 * the DynamoDB upsert sink and its window counts to the S3 file sink, while invocations
 * lose their answers (seeded) and two warm containers per stage take turns, so batches
 * and outboxes are redelivered. Each container builds the job module itself, as Lambda
 * does, so each has its own sink instances (no shared high-water marks).
 */
import { CreateTableCommand } from '@aws-sdk/client-dynamodb';
import { DynamoDBDocumentClient, ScanCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CollectSink } from '../../lib/api/sinks.ts';
import { AwsSinks, type S3FilesSink } from '../../lib/aws/sinks/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { createIngestHandler } from '../../lib/aws/ingest/ingest-handler.ts';
import { apiEvent } from '../../lib/testing/local-aws/feeder.ts';
import { createOperatorHandler } from '../../lib/aws/operator/operator-handler.ts';
import { createBucket } from '../../lib/aws/s3/s3-blob-store.ts';
import { createStageQueues, StaticQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { type DeadLetterMessage, decodeBody } from '../../lib/aws/sqs/sqs-codec.ts';
import { SqsTransport } from '../../lib/aws/sqs/sqs-transport.ts';
import { compile } from '../../lib/graph/compile.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { Rng } from '../../lib/nexmark/random.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { CLICKS, type Click, clickJob as sharedClickJob, type Count, type Running, USERS } from './click-job.ts';
import { type Container, drainQueue, localClients, runUntilDrained, unique } from './helpers.ts';

const clients = localClients();
const stateTable = unique('sluice-sinks');
const countsTable = unique('counts');
const bucket = unique('sinks-e2e').toLowerCase();
const clicks = CLICKS;

function clickJob(name: string, sinks: 'aws' | { running: CollectSink<Running>; windows: CollectSink<Count> }): Job {
  return sinks === 'aws'
    ? sharedClickJob(name, { running: AwsSinks.dynamodbUpsert<Running>({ table: countsTable, key: (r) => r.user, partitionKey: 'user' }), windows: AwsSinks.s3Files<Count>({ prefix: 'windows' }) })
    : sharedClickJob(name, sinks);
}

let reference: { running: Running[]; windows: Count[] };

beforeAll(async () => {
  await Promise.all([
    createStateTable(clients.dynamodb, stateTable),
    createBucket(clients.s3, bucket),
    clients.dynamodb.send(new CreateTableCommand({ TableName: countsTable, BillingMode: 'PAY_PER_REQUEST', AttributeDefinitions: [{ AttributeName: 'user', AttributeType: 'S' }], KeySchema: [{ AttributeName: 'user', KeyType: 'HASH' }] })),
  ]);
  const sinks = { running: new CollectSink<Running>(), windows: new CollectSink<Count>() };
  await runJob(clickJob('reference', sinks), { sources: { clicks: { kind: 'items', items: clicks } } });
  reference = { running: sinks.running.records, windows: sinks.windows.records };
});
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));

/** An HTTP API request carrying these clicks. */
const post = (body: unknown) => apiEvent('clicks', JSON.stringify(body));

describe('AWS sinks behind the operator function', () => {
  it('upserts the final count per key and commits every window once, under lost answers and stale containers', async () => {
    const name = unique('sinks').replace(/-/g, '_').slice(0, 40);
    const job = clickJob(name, 'aws');
    const queues = await createStageQueues(clients.sqs, compile(job.graph), { visibilityTimeoutSeconds: 300 });
    const staticQueues = new StaticQueues(queues);
    const ingest = createIngestHandler({ job, sqs: clients.sqs, queues: staticQueues });
    for (let i = 0; i < clicks.length; i += 10) expect((await ingest(post(clicks.slice(i, i + 10)))).statusCode).toBe(202);
    await new SqsTransport({ sqs: clients.sqs, job: name, queues: staticQueues }).sendEndOfInput(0, 'clicks', 2);

    const accounting = new AwsAccounting();
    const container = (): Container => {
      const own = clickJob(name, 'aws'); // each container loads the job module: its own sink instances
      const handler = createOperatorHandler({ job: own, sqs: clients.sqs, dynamodb: clients.dynamodb, s3: clients.s3, bucket, tableName: stateTable, queues: staticQueues, accounting });
      return { invoke: handler };
    };
    const rng = new Rng(7, 0);
    const stats = await runUntilDrained({ sqs: clients.sqs, queues, container, warm: 2, loseAnswer: () => rng.double() < 0.3, maxInvocations: 2000 });
    expect(stats.crashes).toBeGreaterThan(0);

    // DynamoDB: one item per user with its final running count.
    const items = (await DynamoDBDocumentClient.from(clients.dynamodb).send(new ScanCommand({ TableName: countsTable, ConsistentRead: true }))).Items!;
    const finals = Object.fromEntries(USERS.map((u) => [u, Math.max(...reference.running.filter((r) => r.user === u).map((r) => r.n))]));
    expect(Object.fromEntries(items.map((it) => [it.user, it.n]))).toEqual(finals);
    expect(accounting.get('dynamodb', 'PutItem').requests).toBeGreaterThan(0);

    // S3: nothing visible until a checkpoint commits; this run had none, so every delivery is tagged 0 and epoch 1 publishes them.
    const files = job.graph.sinks().find((n) => n.name === 'window-out')!.spec as unknown as { sink: S3FilesSink<Count> };
    files.sink.bindAws({ job: name, sink: 'window-out', s3: clients.s3, dynamodb: clients.dynamodb, bucket, tableName: stateTable });
    expect((await files.sink.readCommitted()).records).toEqual([]);
    await files.sink.prepare(1);
    await files.sink.commit(1);
    const committed = (await files.sink.readCommitted()).records;
    assertExactlyOnce(reference.windows, committed);
  });

  it('parks a record the sink refuses on the stage DLQ with its error, writes the rest, and does not wedge the partition', async () => {
    const name = unique('park').replace(/-/g, '_').slice(0, 40);
    const build = () => {
      const job = new Job(name, { parallelism: 1 });
      job.ingest<Click>('clicks').sinkTo(AwsSinks.dynamodbUpsert<Click>({ table: countsTable, key: (c) => (c.user === 'bad' ? (null as never) : `park-${c.user}`), partitionKey: 'user' }), 'upsert');
      return job;
    };
    const job = build();
    const queues = await createStageQueues(clients.sqs, compile(job.graph), { visibilityTimeoutSeconds: 300 });
    const staticQueues = new StaticQueues(queues);
    const ingest = createIngestHandler({ job, sqs: clients.sqs, queues: staticQueues });
    const batch = [{ id: 1, user: 'ann', ts: 1 }, { id: 2, user: 'bad', ts: 2 }, { id: 3, user: 'bob', ts: 3 }];
    expect((await ingest(post(batch))).statusCode).toBe(202);
    const container = (): Container => ({ invoke: createOperatorHandler({ job: build(), sqs: clients.sqs, dynamodb: clients.dynamodb, tableName: stateTable, queues: staticQueues }) });
    const stats = await runUntilDrained({ sqs: clients.sqs, queues, container, maxInvocations: 20 });
    expect(stats.failures).toBe(0);
    const dead = (await drainQueue(clients.sqs, queues[0].dlqUrl)).map((m) => decodeBody(m.Body!) as unknown as DeadLetterMessage);
    expect(dead).toHaveLength(1);
    expect(dead[0]).toMatchObject({ operator: 'upsert', channel: 'sink:0:0', index: 1, record: { value: { id: 2, user: 'bad' } } });
    expect(dead[0].error).toMatch(/key\(record\): expected a non-empty string or a finite number, received null/);
    const items = (await DynamoDBDocumentClient.from(clients.dynamodb).send(new ScanCommand({ TableName: countsTable, ConsistentRead: true }))).Items!;
    expect(items.filter((it) => String(it.user).startsWith('park-')).map((it) => it.user).sort()).toEqual(['park-ann', 'park-bob']);
  });
});
