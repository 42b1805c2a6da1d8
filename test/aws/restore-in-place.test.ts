/**
 * In-place restore on the AWS path (lib/aws/restore/restore.ts), in local-AWS mode against
 * DynamoDB Local and fauxqs: a checkpointed run takes checkpoint e, consumes more input
 * (several commits, so its sinks saw many deliveries), its consumers stop while more input
 * is accepted over HTTP (the ingest handler) into the source queues, and the process is
 * abandoned. A run started with `resume` restores e in place, in the same table and
 * queues: the source partitions replay the input log, then continue with their queues;
 * the output (windows committed by the S3 file sink, final counts in the DynamoDB upsert
 * sink) equals the uninterrupted embedded run's, with no loss and no duplicate. Stop points
 * are drawn from seeded generators.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CreateTableCommand } from '@aws-sdk/client-dynamodb';
import { DynamoDBDocumentClient, ScanCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { CollectSink } from '../../lib/api/sinks.ts';
import { AwsSinks } from '../../lib/aws/sinks/sinks.ts';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { DynamoDbStateBackend } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { DynamoDbTable } from '../../lib/aws/dynamodb/dynamodb-table.ts';
import { AwsInputLog, inputLogSk, loggingPartitions } from '../../lib/aws/operator/input-log.ts';
import { apiEvent } from '../../lib/testing/local-aws/feeder.ts';
import { localAwsAt } from '../../lib/testing/local-aws/endpoints.ts';
import { flushAbandonedPolls, queueDepth } from '../../lib/testing/local-aws/queues.ts';
import { LocalAwsRuntime } from '../../lib/testing/local-aws/runner.ts';
import * as L from '../../lib/aws/dynamodb/dynamodb-layout.ts';
import { RESTORING_ATTR } from '../../lib/aws/restore/restore-partition.ts';
import { RestoreInProgressError } from '../../lib/aws/restore/restore.ts';
import { S3BlobStore } from '../../lib/aws/s3/s3-blob-store.ts';
import { readCommittedFiles } from '../../lib/aws/sinks/s3-file-sink.ts';
import { StaticQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { SqsTransport } from '../../lib/aws/sqs/sqs-transport.ts';
import { RestoreError } from '../../lib/checkpoint/driver-errors.ts';
import { runJob } from '../../lib/local/embedded.ts';
import { Rng } from '../../lib/nexmark/random.ts';
import { CommitConflictError } from '../../lib/errors.ts';
import { type Click, clickJob, type Count, type Running, USERS } from './click-job.ts';
import { unique } from './helpers.ts';

const env = localAwsAt({ dynamodb: inject('dynamodbEndpoint'), sqs: inject('fauxqsEndpoint'), s3: inject('fauxqsEndpoint') }, inject('awsRegion'), inject('awsCredentials'));
const doc = DynamoDBDocumentClient.from(env.clients.dynamodb);
const dir = mkdtempSync(join(tmpdir(), 'sluice-restore-in-place-'));
afterAll(() => env.close());

/** 400 clicks 7 ms apart over the five users: many 100 ms windows. */
const CLICKS: readonly Click[] = Array.from({ length: 400 }, (_, i) => ({ id: i, user: USERS[(i * 7) % 5], ts: 1000 + i * 7 }));
let reference: { running: Map<string, number>; windows: string[] };

const sortedWindows = (ws: readonly Count[]) => ws.map((w) => JSON.stringify(w)).sort();

beforeAll(async () => {
  const sinks = { running: new CollectSink<Running>(), windows: new CollectSink<Count>() };
  await runJob(clickJob('reference', sinks), { sources: { clicks: { kind: 'items', items: CLICKS } } });
  const running = new Map<string, number>();
  for (const r of sinks.running.records) running.set(r.user, Math.max(running.get(r.user) ?? 0, r.n));
  reference = { running, windows: sortedWindows(sinks.windows.records) };
  expect(reference.windows.length).toBeGreaterThan(20);
});

/** The job as each "process" builds it: running counts upserted per user, window counts committed per epoch on S3. */
function job(name: string, countsTable: string) {
  return clickJob(name, { running: AwsSinks.dynamodbUpsert<Running>({ table: countsTable, key: (r) => r.user, partitionKey: 'user' }), windows: AwsSinks.s3Files<Count>({ prefix: 'windows' }) });
}

async function countsTableNamed(): Promise<string> {
  const table = unique('rip-counts');
  await env.clients.dynamodb.send(new CreateTableCommand({ TableName: table, BillingMode: 'PAY_PER_REQUEST', AttributeDefinitions: [{ AttributeName: 'user', AttributeType: 'S' }], KeySchema: [{ AttributeName: 'user', KeyType: 'HASH' }] }));
  return table;
}

/** Post clicks through the ingest handler (an HTTP API request), expecting 202. */
async function post(rt: LocalAwsRuntime, clicks: readonly Click[]): Promise<void> {
  const res = await rt.ingest!(apiEvent('clicks', JSON.stringify(clicks)));
  expect(res.statusCode, String(res.body)).toBe(202);
}

interface Scenario {
  /** Clicks before checkpoint e, after it (consumed, in this many requests), and accepted while the consumers are stopped. */
  readonly a: number;
  readonly b: number;
  readonly bRequests: number;
}

/** The run up to the "crash": returns what the resumed run needs. */
async function runUntilStopped(name: string, s: Scenario, countsTable: string) {
  const ck = join(dir, name);
  const rt = new LocalAwsRuntime(job(name, countsTable), { env, checkpoints: { dir: ck, intervalMs: 0, start: 'fresh' } });
  await rt.start();
  await post(rt, CLICKS.slice(0, s.a));
  await rt.drained();
  // Checkpoint e: the loop's final epoch (interval 0: no periodic ones), then no more.
  await rt.checkpointing!.finish();
  const e = Math.max(...rt.checkpointing!.loop.committed);
  const per = Math.ceil(s.b / s.bRequests);
  for (let i = s.a; i < s.a + s.b; i += per) {
    await post(rt, CLICKS.slice(i, Math.min(i + per, s.a + s.b)));
    await rt.drained();
  }
  // The consumers stop; input is still accepted into the source queues, and so are the end markers.
  await Promise.all(rt.sources.map((src) => src.stop()));
  // Their long polls stay on fauxqs (Lambda's pollers would not): released before input is sent.
  for (const q of rt.queues) await flushAbandonedPolls(env.clients.sqs, q.url, `${name}/flush/${q.url}`);
  await post(rt, CLICKS.slice(s.a + s.b));
  const sourceStage = rt.plan.edges.find((edge) => edge.from.kind === 'source')!.toStage;
  const transport = new SqsTransport({ sqs: env.clients.sqs, job: rt.plan.job.name, queues: new StaticQueues(rt.queues), accounting: new AwsAccounting() });
  await transport.sendEndOfInput(sourceStage, 'clicks', rt.plan.stages[sourceStage].parallelism);
  const waiting = await queueDepth(env.clients.sqs, rt.queues[sourceStage].url);
  await rt.stop();
  return { ck, e, waiting, tableName: rt.tableName, bucket: rt.checkpointing!.bucket, plan: rt.plan };
}

async function scanCounts(table: string): Promise<Map<string, number>> {
  const out = await doc.send(new ScanCommand({ TableName: table }));
  return new Map((out.Items ?? []).map((it) => [String(it.user), Number(it.n)]));
}

async function resumeToEnd(name: string, ck: string, countsTable: string) {
  const rt = new LocalAwsRuntime(job(name, countsTable), { env, checkpoints: { dir: ck, intervalMs: 0, start: 'resume' } });
  try {
    await rt.start();
    await rt.drained();
    await rt.checkpointing!.finish();
  } finally {
    await rt.stop();
  }
  return rt;
}

describe('in-place restore on the AWS path (local-AWS)', () => {
  for (const seed of [3, 11]) {
    it(`seed ${seed}: restored to checkpoint e in the same table and queues, the output equals the uninterrupted run (logged and HTTP-accepted input, no loss, no duplicate)`, async () => {
      const rng = new Rng(seed);
      const a = 60 + rng.int(100);
      const b = 60 + rng.int(120);
      const name = `rip${seed}`;
      const countsTable = await countsTableNamed();
      const before = await runUntilStopped(name, { a, b, bRequests: 6 + rng.int(4) }, countsTable);
      expect(before.waiting.visible).toBeGreaterThan(0);
      // The abandoned timeline's counts are in the upsert table, at its (higher) sequence numbers.
      expect([...(await scanCounts(countsTable)).values()].reduce((x, y) => x + y, 0)).toBe(a + b);

      const rt = await resumeToEnd(name, before.ck, countsTable);
      const r = rt.checkpointing!.restore!;
      expect(r.epoch).toBe(before.e);
      expect(r.restoreEpoch).toBeGreaterThan(before.e);
      expect(Object.values(r.sources).reduce((n, x) => n + x.replayed, 0)).toBe(b);
      expect(Object.values(r.sources).reduce((n, x) => n + x.position, 0)).toBe(a);
      expect(r.purged.length).toBe(rt.plan.stages.length - 1);
      expect(Math.min(...rt.checkpointing!.loop.committed)).toBeGreaterThan(r.restoreEpoch);

      const windows = await readCommittedFiles<Count>({ s3: env.clients.s3, dynamodb: env.clients.dynamodb, bucket: before.bucket, base: `${name}/sinks/windows/`, tableName: before.tableName, job: name });
      expect(sortedWindows(windows.records)).toEqual(reference.windows);
      expect(await scanCounts(countsTable)).toEqual(reference.running);

      // Truncation across the restore: the final checkpoint covers everything, so no segment
      // of either timeline is left in the one table.
      const log = new AwsInputLog(new DynamoDbTable(env.clients.dynamodb, before.tableName, new AwsAccounting()), rt.checkpointing!.store);
      for (const scope of loggingPartitions(before.plan)) expect(await log.segments(scope)).toEqual([]);
    }, 240_000);
  }

  it('fences off a stale writer, refuses a partition whose restore died midway until it is run again, and fails before changing anything when the input log has a gap', async () => {
    const name = 'ripfence';
    const countsTable = await countsTableNamed();
    const before = await runUntilStopped(name, { a: 80, b: 90, bRequests: 5 }, countsTable);
    const table = new DynamoDbTable(env.clients.dynamodb, before.tableName, new AwsAccounting());
    const scope = { job: name, stage: 0, partition: 0 };
    const stale = new DynamoDbStateBackend({ client: env.clients.dynamodb, tableName: before.tableName });
    const old = await stale.recover(scope);

    // A gap in the input log: the restore refuses, and nothing changed.
    const segments = await new AwsInputLog(table, new S3BlobStore({ s3: env.clients.s3, bucket: before.bucket })).segments(scope);
    expect(segments.length).toBeGreaterThan(1);
    const hole = await table.get(L.controlPk(scope), inputLogSk(segments[segments.length - 2].version));
    await table.batchWrite([{ DeleteRequest: { Key: { pk: hole!.pk, sk: hole!.sk } } }]);
    await expect(resumeToEnd(name, before.ck, countsTable)).rejects.toThrow(RestoreError);
    expect((await table.get(L.controlPk(scope), L.VERSION_SK))!.ver).toBe(old.version);
    await table.batchWrite([{ PutRequest: { Item: hole! } }]);

    // A restore that died after marking the partition: recover() refuses it (retryable) ...
    const head = (await table.get(L.controlPk(scope), L.VERSION_SK))!;
    await table.batchWrite([{ PutRequest: { Item: { ...head, ver: Number(head.ver) + 1, [RESTORING_ATTR]: 99 } } }]);
    const err = await new DynamoDbStateBackend({ client: env.clients.dynamodb, tableName: before.tableName }).recover(scope).catch((e) => e);
    expect(err).toBeInstanceOf(RestoreInProgressError);
    expect(err.retryable).toBe(true);

    // ... and running it again finishes it, above every version and epoch the table held.
    const rt = await resumeToEnd(name, before.ck, countsTable);
    const r = rt.checkpointing!.restore!;
    expect(r.versions['0/0']).toBeGreaterThan(old.version + 1);
    expect(r.restoreEpoch).toBeGreaterThan(99);
    const windows = await readCommittedFiles<Count>({ s3: env.clients.s3, dynamodb: env.clients.dynamodb, bucket: before.bucket, base: `${name}/sinks/windows/`, tableName: before.tableName, job: name });
    expect(sortedWindows(windows.records)).toEqual(reference.windows);
    expect(await scanCounts(countsTable)).toEqual(reference.running);

    // The writer of the abandoned timeline still holds its version: its commit is refused.
    await expect(stale.commit({ scope, expectedVersion: old.version, writes: [], timerAdds: [], timerDeletes: [], progress: old.progress, outbox: [] })).rejects.toThrow(CommitConflictError);
  }, 240_000);
});
