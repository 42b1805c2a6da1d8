/**
 * A checkpoint through the real operator handlers under seeded crashes: barrier `e` is
 * injected into the source queue after the first half of the input, the handlers (whose
 * containers die after a seeded AWS call: the commit, the ack PutItem, the snapshot
 * upload, a send) align it, write snapshots to S3 and ack through DynamoDB, and the
 * coordinator's steps commit it. The checkpoint must be the consistent cut: its source
 * positions count exactly the records before the barrier, and the keyed state restored
 * from its S3 snapshots holds exactly those records; the output equals the embedded run.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { CollectSink } from '../../lib/api/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { createCheckpointHandler } from '../../lib/aws/checkpoint/checkpoint-handler.ts';
import { type Carry, INITIAL_CARRY, type Limits } from '../../lib/aws/checkpoint/checkpoint-task.ts';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { DynamoDbTable } from '../../lib/aws/dynamodb/dynamodb-table.ts';
import { AwsInputLog, loggingPartitions } from '../../lib/aws/operator/input-log.ts';
import { DynamoDbPointerStore } from '../../lib/aws/dynamodb/dynamodb-pointers.ts';
import { createIngestHandler } from '../../lib/aws/ingest/ingest-handler.ts';
import { apiEvent } from '../../lib/testing/local-aws/feeder.ts';
import { createOperatorHandler } from '../../lib/aws/operator/operator-handler.ts';
import { createBucket, S3BlobStore } from '../../lib/aws/s3/s3-blob-store.ts';
import { createStageQueues, StaticQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { SqsTransport } from '../../lib/aws/sqs/sqs-transport.ts';
import { fromBytes } from '../../lib/checkpoint/codec.ts';
import { POINTER_NAME } from '../../lib/checkpoint/driver.ts';
import type { CommitPointer, Manifest } from '../../lib/checkpoint/protocol.ts';
import { restoreManifest } from '../../lib/checkpoint/snapshot.ts';
import { InjectedCrash } from '../../lib/errors.ts';
import { compile } from '../../lib/graph/compile.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { Rng } from '../../lib/nexmark/random.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { type Click, clickJob as sharedClickJob, type Running } from './click-job.ts';
import { type Container, localClients, runUntilDrained, unique } from './helpers.ts';

/** Running counts per user only (no window), sink 'out'. */
const clickJob = (name: string): Job => sharedClickJob(name, { maxParallelism: 8, runningSinkName: 'out', windows: null });

const USERS = ['ann', 'bob', 'cy', 'dee', 'eve', 'fay', 'gus'];
const clicks: Click[] = Array.from({ length: 80 }, (_, i) => ({ user: USERS[(i * 5) % 7], ts: 1000 + i * 10 }));
const HALF = 40;
const clients = localClients();
const LIMITS: Limits = { maxEpochs: 1000, maxFailures: 5, leaseMs: 600_000, activityGrainMs: 0, epochTimeoutMs: 600_000 };
let reference: unknown[];
/** The running counts are ordered per user (one partition per user). */
const byUser = { orderKey: (r: unknown) => (r as Running).user };

beforeAll(async () => {
  const out = new CollectSink<Running>();
  await runJob(clickJob('reference'), { sources: { clicks: { kind: 'items', items: clicks } }, sinks: { out } });
  reference = out.records;
});
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));

/** Clients of one container: after the `nth` call of `command` (over the run) the process is gone. */
function crashingClients(crash: { command: string; nth: number } | undefined, calls: Map<string, number>) {
  const box = { dead: false, fired: false };
  const common = { region: inject('awsRegion'), credentials: inject('awsCredentials') };
  const sqs = new SQSClient({ ...common, endpoint: inject('fauxqsEndpoint') });
  const dynamodb = new DynamoDBClient({ ...common, endpoint: inject('dynamodbEndpoint') });
  const s3 = new S3Client({ ...common, endpoint: inject('fauxqsEndpoint'), forcePathStyle: true });
  for (const client of [sqs, dynamodb, s3] as { middlewareStack: SQSClient['middlewareStack'] }[]) {
    client.middlewareStack.add(
      (next, context) => async (args) => {
        if (box.dead) throw new InjectedCrash('process gone');
        const name = context.commandName ?? '?';
        const n = (calls.get(name) ?? 0) + 1;
        calls.set(name, n);
        const out = await next(args);
        if (crash && crash.command === name && crash.nth === n) {
          box.dead = box.fired = true;
          throw new InjectedCrash(`after ${name} #${n}`);
        }
        return out;
      },
      { step: 'initialize', name: 'crashPlan' },
    );
  }
  return { sqs, dynamodb, s3, box };
}

async function checkpointRun(crash?: { command: string; nth: number }) {
  const job = clickJob(unique('ckop'));
  const plan = compile(job.graph);
  const table = unique('sluice-ckop');
  const bucket = unique('ckop').toLowerCase();
  const prefix = `${unique('c')}-`;
  const [, , queues] = await Promise.all([createStateTable(clients.dynamodb, table), createBucket(clients.s3, bucket), createStageQueues(clients.sqs, plan, { prefix, visibilityTimeoutSeconds: 300 })]);
  const staticQueues = new StaticQueues(queues);
  const out = new CollectSink<Running>();
  const ingest = createIngestHandler({ job, sqs: clients.sqs, queues: staticQueues });
  const coordinator = createCheckpointHandler({ job, ...clients, bucket, tableName: table, queues: staticQueues });
  const step = (action: string, carry: Partial<Carry>) => coordinator({ action, execution: 'test', carry, limits: LIMITS });

  // The first half, then barrier 1 behind it in every source partition, then the rest.
  for (let i = 0; i < HALF; i += 10) expect((await ingest(apiEvent('clicks', JSON.stringify(clicks.slice(i, i + 10))))).statusCode).toBe(202);
  let c = await step('resume', INITIAL_CARRY);
  await coordinator.acks.touch(Date.now());
  c = await step('open', c);
  expect(c.next).toBe('inject');
  c = await step('inject', c);
  for (let i = HALF; i < clicks.length; i += 10) expect((await ingest(apiEvent('clicks', JSON.stringify(clicks.slice(i, i + 10))))).statusCode).toBe(202);
  await new SqsTransport({ sqs: clients.sqs, job: job.name, queues: staticQueues }).sendEndOfInput(0, 'clicks', 2);

  const calls = new Map<string, number>();
  let fired = false;
  const container = (): Container => {
    const k = crashingClients(fired ? undefined : crash, calls);
    const handler = createOperatorHandler({ job, sqs: k.sqs, dynamodb: k.dynamodb, tableName: table, queues: staticQueues, queuePrefix: prefix, sinks: { out }, checkpointStore: new S3BlobStore({ s3: k.s3, bucket }) });
    return {
      invoke: handler,
      crashed: () => {
        fired ||= k.box.fired;
        return k.box.dead;
      },
      close: () => [k.sqs, k.dynamodb, k.s3].forEach((x) => x.destroy()),
    };
  };
  const stats = await runUntilDrained({ sqs: clients.sqs, queues, container, maxInvocations: 2000 });
  expect(stats.failures === 0 || crash !== undefined).toBe(true);
  c = await step('decide', c);
  expect(c.next).toBe('commit');
  c = await step('commit', c);
  expect(c.next).toBe('wait');

  const pointers = new DynamoDbPointerStore({ client: clients.dynamodb, tableName: table, job: job.name });
  const ptr = (await pointers.read<CommitPointer>(POINTER_NAME))!.value;
  const blobs = new S3BlobStore({ s3: clients.s3, bucket });
  const manifest = fromBytes<Manifest>((await blobs.get(ptr.manifestKey))!);
  const restored = await restoreManifest(manifest, blobs);
  let counted = 0;
  for (const r of restored.values()) for (const { fields } of r.entities.values()) counted += Number(fields.get('n') ?? 0);
  // The input log: what a restore from this checkpoint replays, and what is left in the bucket.
  const inputLog = new AwsInputLog(new DynamoDbTable(clients.dynamodb, table, new AwsAccounting()), blobs);
  const replayed = [];
  const segments = [];
  for (const scope of loggingPartitions(plan)) {
    replayed.push({ scope, runs: await inputLog.replay(scope, manifest.positions), all: await inputLog.replay(scope, {}) });
    segments.push(...(await inputLog.segments(scope)));
  }
  const objects = await blobs.list(`${job.name}/input-log/`);
  return { out: out.records, manifest, counted, stats, fired, replayed, segments, objects };
}

/**
 * The logged input replays exactly the records after the checkpoint's positions, each
 * once and in the order each source partition consumed them (crashes included: a segment
 * PUT whose commit did not land is an object nothing names); the checkpoint's truncation
 * released the segments before the barrier (retention: one epoch).
 */
function expectReplay(r: Awaited<ReturnType<typeof checkpointRun>>): void {
  const after: Click[] = [];
  for (const { scope, runs, all } of r.replayed) {
    const source = `clicks#${scope.partition}`;
    let next = r.manifest.positions[source];
    expect(next, `position of ${source}`).toBeGreaterThan(0);
    const values: Click[] = [];
    for (const run of runs) {
      expect(run.source).toBe(source);
      expect(run.from).toBe(next);
      next += run.records.length;
      values.push(...run.records.map((x) => x.value as Click));
    }
    expect(values.map((c) => c.ts)).toEqual([...values.map((c) => c.ts)].sort((a, b) => a - b));
    after.push(...values);
    // Truncated: nothing below the position is left to replay.
    expect(all).toEqual(runs);
  }
  expect(after.sort((a, b) => a.ts - b.ts)).toEqual(clicks.slice(HALF));
  for (const s of r.segments) if (s.key !== undefined) expect(r.objects).toContain(s.key);
  expect(r.segments.every((s) => s.after === 1)).toBe(true);
}

describe('a checkpoint through the operator handlers on DynamoDB and S3', () => {
  it('is the consistent cut at the barrier: positions and restored state hold exactly the records before it', async () => {
    const r = await checkpointRun();
    assertExactlyOnce(reference, r.out, byUser);
    expect(Object.values(r.manifest.positions).reduce((a, b) => a + b, 0)).toBe(HALF);
    expect(r.counted).toBe(HALF);
    const links = Object.values(r.manifest.partitions).flatMap((p) => p.chain);
    expect(links.length).toBe(4); // two stages x two partitions, each a full first snapshot
    expectReplay(r);
  }, 120_000);

  // Every kind of call a container makes for a checkpoint, at a seeded occurrence.
  const commands = ['TransactWriteItemsCommand', 'PutItemCommand', 'PutObjectCommand', 'SendMessageBatchCommand'];
  for (const [i, command] of commands.entries()) {
    const seed = 17 + i;
    it(`seed ${seed}: a container dies after a seeded ${command} (commit, ack, snapshot upload, send); the cut is the same`, async () => {
      const rng = new Rng(seed);
      const crash = { command, nth: 1 + rng.int(command === 'PutItemCommand' || command === 'PutObjectCommand' ? 4 : 6) };
      const r = await checkpointRun(crash);
      expect(r.fired, `${crash.command} #${crash.nth} happened`).toBe(true);
      assertExactlyOnce(reference, r.out, byUser);
      expect(Object.values(r.manifest.positions).reduce((a, b) => a + b, 0)).toBe(HALF);
      expect(r.counted).toBe(HALF);
      expectReplay(r);
    }, 120_000);
  }
});
