/**
 * A savepoint taken on the AWS path (the checkpoint steps, operator and ingest handlers on
 * DynamoDB Local and fauxqs) restores on the embedded runtime from its S3 location, the URI
 * `sluice restore --from s3://<bucket>/<job>/savepoints/<label>/` takes: the output before
 * the savepoint plus the embedded run's output over the rest of the input equals an
 * uninterrupted embedded run's (none lost, duplicated, unexpected or out of order per user),
 * for keyed process state and for windows whose timers were pending in the savepoint.
 * And the reverse: a savepoint directory the embedded runtime wrote, copied to the bucket,
 * restores in place on the AWS path (remapSavepoint, restoreInPlace), which takes the rest.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CollectSink } from '../../lib/api/sinks.ts';
import { valueState } from '../../lib/api/state.ts';
import { Job } from '../../lib/api/stream.ts';
import { WatermarkStrategies } from '../../lib/api/types.ts';
import { createCheckpointHandler } from '../../lib/aws/checkpoint/checkpoint-handler.ts';
import { type Carry, INITIAL_CARRY, type Limits } from '../../lib/aws/checkpoint/checkpoint-task.ts';
import { DynamoDbPointerStore } from '../../lib/aws/dynamodb/dynamodb-pointers.ts';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-state.ts';
import { createIngestHandler } from '../../lib/aws/ingest/ingest-handler.ts';
import { createOperatorHandler } from '../../lib/aws/operator/operator-handler.ts';
import { loadRestorePoint, readSavepointRequest, requestSavepoint, savepointFit, savepointPrefix } from '../../lib/aws/restore/savepoints.ts';
import { restoreInPlace } from '../../lib/aws/restore/restore.ts';
import { adoptPlan, remapSavepoint } from '../../lib/aws/restore/savepoint-remap.ts';
import { DynamoDbTable } from '../../lib/aws/dynamodb/dynamodb-table.ts';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { createBucket, S3BlobStore } from '../../lib/aws/s3/s3-blob-store.ts';
import { createStageQueues, StaticQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { lazyS3Store, parseS3SavepointUri } from '../../lib/cli/savepoint-uri.ts';
import { compile } from '../../lib/graph/compile.ts';
import { openCheckpointedRuntime } from '../../lib/local/checkpointing.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { assertExactlyOnce } from '../../lib/testing/checker.ts';
import { apiEvent } from '../../lib/testing/local-aws/feeder.ts';
import { tmp } from '../checkpoint/jobs.ts';
import { clickJob, type Click, type Count, type Running } from './click-job.ts';
import { localClients, runUntilDrained, unique } from './helpers.ts';

const clients = localClients();
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));
const LIMITS: Limits = { maxEpochs: 1000, maxFailures: 5, leaseMs: 600_000, activityGrainMs: 0, epochTimeoutMs: 600_000 };
const USERS = ['ann', 'bob', 'cy', 'dee', 'eve', 'fay', 'gus'];
const clicks: Click[] = Array.from({ length: 120 }, (_, i) => ({ user: USERS[(i * 5) % 7], ts: 1000 + i * 10 }));
const AT = 70;

/** A running count per user (keyed process state). */
function countJob(name: string, out: CollectSink<Running>): Job {
  const job = new Job(name, { parallelism: 2, maxParallelism: 8 });
  const watermark = WatermarkStrategies.boundedOutOfOrderness(0, { idleTimeoutMs: 600_000 });
  job
    .ingest<Click>('clicks', { timestamp: (c) => c.ts, watermark })
    .keyBy((c) => c.user)
    .process<Running, { n: ReturnType<typeof valueState<number>> }>({
      state: { n: valueState<number>() },
      processElement(c, ctx) {
        const n = (ctx.state.n.get() ?? 0) + 1;
        ctx.state.n.set(n);
        ctx.emit({ user: c.user, n });
      },
    })
    .name('running')
    .sinkTo(out, 'out');
  return job;
}

/** A scratch directory and a writer of click files into it. */
function scratch(prefix: string) {
  const dir = tmp(prefix);
  const file = (f: string, rows: readonly Click[]) => {
    const p = join(dir, f);
    writeFileSync(p, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
    return p;
  };
  return { dir, file };
}

const byUser = (r: unknown) => (r as Running).user;

/** A job on the AWS path against the local servers: its ingest and operator handlers, the checkpoint steps, the stores. */
async function awsPath(name: string, job: Job, sinks: Record<string, CollectSink<any>>) {
  const plan = compile(job.graph);
  const table = unique('sluice-port');
  const bucket = unique('port').toLowerCase();
  const prefix = `${unique('p')}-`;
  const [, , queues] = await Promise.all([createStateTable(clients.dynamodb, table), createBucket(clients.s3, bucket), createStageQueues(clients.sqs, plan, { prefix, visibilityTimeoutSeconds: 300 })]);
  const staticQueues = new StaticQueues(queues);
  const ingest = createIngestHandler({ job, sqs: clients.sqs, queues: staticQueues });
  const coordinator = createCheckpointHandler({ job, ...clients, bucket, tableName: table, queues: staticQueues });
  const step = (action: string, carry: Partial<Carry>) => coordinator({ action, execution: 'test', carry, limits: LIMITS });
  const blobs = new S3BlobStore({ s3: clients.s3, bucket });
  const pointers = new DynamoDbPointerStore({ client: clients.dynamodb, tableName: table, job: name });
  const drain = () =>
    runUntilDrained({
      sqs: clients.sqs,
      queues,
      container: () => ({ invoke: createOperatorHandler({ job, ...clients, tableName: table, queues: staticQueues, queuePrefix: prefix, sinks, checkpointStore: blobs }) }),
      maxInvocations: 2000,
    });
  return { plan, table, bucket, prefix, queues, staticQueues, ingest, step, blobs, pointers, drain };
}

/** The first AT clicks published, then one epoch that writes savepoint "mid". */
async function savepointAfterFirstClicks(aws: Awaited<ReturnType<typeof awsPath>>, name: string): Promise<void> {
  for (let i = 0; i < AT; i += 10) expect((await aws.ingest(apiEvent('clicks', JSON.stringify(clicks.slice(i, Math.min(AT, i + 10)))))).statusCode).toBe(202);
  let c = await aws.step('resume', INITIAL_CARRY);
  await requestSavepoint({ pointers: aws.pointers, blobs: aws.blobs, job: name }, 'mid', Date.now());
  c = await aws.step('open', c);
  expect(c.next).toBe('inject');
  c = await aws.step('inject', c);
  await aws.drain();
  c = await aws.step('decide', c);
  expect(c.next).toBe('commit');
  await aws.step('commit', c);
  expect(await readSavepointRequest(aws.pointers)).toMatchObject({ label: 'mid', status: 'written' });
}

describe('savepoint portability: AWS -> embedded', () => {
  it('a savepoint taken on the AWS path restores on the embedded runtime from its s3:// location, output equal to an uninterrupted run', async () => {
    const name = unique('port');
    const { dir, file } = scratch('sluice-sp-port-');
    const ref = new CollectSink<Running>();
    await new EmbeddedRuntime(countJob(name, ref), { sources: { clicks: { kind: 'file', path: file('all.jsonl', clicks) } }, sinks: { out: ref } }).run();

    // The AWS path: the first AT clicks consumed, then savepoint "mid" taken and copied out of the chain.
    const before = new CollectSink<Running>();
    const job = countJob(name, before);
    const aws = await awsPath(name, job, { out: before });
    const { bucket } = aws;
    await savepointAfterFirstClicks(aws, name);
    expect(before.records).toHaveLength(AT);

    // The embedded runtime, from the savepoint's S3 URI, over the rest of the input.
    const uri = `s3://${bucket}/${savepointPrefix(name, 'mid')}`;
    const at = parseS3SavepointUri(uri)!;
    expect(at).toEqual({ bucket, prefix: savepointPrefix(name, 'mid') });
    const after = new CollectSink<Running>();
    const restored = await openCheckpointedRuntime(
      countJob(name, after),
      { sources: { clicks: { kind: 'file', path: file('rest.jsonl', clicks.slice(AT)) } }, sinks: { out: after } },
      { dir: join(dir, 'ck'), intervalMs: 0, durable: false, start: { from: uri, store: { blobs: lazyS3Store(at.bucket, async () => clients.s3), prefix: at.prefix } } },
    );
    expect(restored.checkpoints.restoredEpoch).toBeGreaterThan(0);
    await restored.runtime.run();
    restored.checkpoints.close();
    const result = assertExactlyOnce(ref.records, [...before.records, ...after.records], { orderKey: byUser });
    expect(result.counts).toMatchObject({ lost: 0, duplicated: 0, unexpected: 0 });
    expect(result.reordered).toEqual([]);
  }, 120_000);

  it('a savepoint the embedded runtime wrote restores in place on the AWS path, output equal to an uninterrupted run', async () => {
    const name = unique('port');
    const { dir, file } = scratch('sluice-sp-port-');
    const ref = new CollectSink<Running>();
    await new EmbeddedRuntime(countJob(name, ref), { sources: { clicks: { kind: 'file', path: file('all.jsonl', clicks) } }, sinks: { out: ref } }).run();

    // Embedded: the first AT clicks, then savepoint "mid" (written into the checkpoint directory).
    const before = new CollectSink<Running>();
    const ck = join(dir, 'ck');
    let taken: Promise<unknown> | undefined;
    const first = await openCheckpointedRuntime(
      countJob(name, before),
      { sources: { clicks: { kind: 'file', path: file('first.jsonl', clicks.slice(0, AT)) } }, sinks: { out: before }, onSourceRecords: (n) => void (n >= AT && !taken && (taken = first.checkpoints.savepoint('mid'))) },
      { dir: ck, intervalMs: 0, durable: false },
    );
    await first.runtime.run();
    await taken;
    first.checkpoints.close();
    expect(before.records).toHaveLength(AT);

    // The savepoint directory copied to the job's bucket, where `sluice savepoint` on AWS writes one.
    const after = new CollectSink<Running>();
    const job = countJob(name, after);
    const aws = await awsPath(name, job, { out: after });
    const { plan, table, bucket, staticQueues, blobs, ingest, drain } = aws;
    const spDir = join(ck, 'savepoints', 'mid');
    for (const f of readdirSync(spDir, { recursive: true, withFileTypes: true })) {
      if (!f.isFile()) continue;
      const path = join(f.parentPath, f.name);
      await blobs.put(savepointPrefix(name, 'mid') + path.slice(spDir.length + 1), readFileSync(path));
    }
    const point = await loadRestorePoint({ blobs, job: name }, 'mid');
    expect(point.meta?.takenOn).toBe('embedded');
    expect(savepointFit(point, plan)).toBe('same');
    const db = new DynamoDbTable(clients.dynamodb, table, new AwsAccounting());
    const { manifest, manifestKey } = await remapSavepoint({ blobs, db, plan, point });
    await restoreInPlace({ job, plan, clients, tableName: table, bucket, queues: staticQueues, manifest, manifestKey });
    await adoptPlan(new DynamoDbPointerStore({ client: clients.dynamodb, tableName: table, job: name }), plan);

    // The AWS path takes the rest of the input.
    await drain();
    for (let i = AT; i < clicks.length; i += 10) expect((await ingest(apiEvent('clicks', JSON.stringify(clicks.slice(i, i + 10))))).statusCode).toBe(202);
    await drain();
    const result = assertExactlyOnce(ref.records, [...before.records, ...after.records], { orderKey: byUser });
    expect(result.counts).toMatchObject({ lost: 0, duplicated: 0, unexpected: 0 });
    expect(result.reordered).toEqual([]);
  }, 120_000);

  it('a windowed job (event-time timers in the savepoint) taken on the AWS path restores embedded: fired and pending windows add up to an uninterrupted run', async () => {
    const name = unique('portw');
    const { dir, file } = scratch('sluice-sp-portw-');
    const sinksOf = () => ({ running: new CollectSink<Running>(), windows: new CollectSink<Count>() });
    const jobOf = (name: string, k: ReturnType<typeof sinksOf>) => clickJob(name, { maxParallelism: 8, running: k.running, windows: k.windows });
    const ref = sinksOf();
    await new EmbeddedRuntime(jobOf(name, ref), { sources: { clicks: { kind: 'file', path: file('all.jsonl', clicks) } }, sinks: { 'running-out': ref.running, 'window-out': ref.windows } }).run();

    const before = sinksOf();
    const job = jobOf(name, before);
    const aws = await awsPath(name, job, { 'running-out': before.running, 'window-out': before.windows });
    const { bucket } = aws;
    await savepointAfterFirstClicks(aws, name);

    const uri = `s3://${bucket}/${savepointPrefix(name, 'mid')}`;
    const at = parseS3SavepointUri(uri)!;
    const after = sinksOf();
    const restored = await openCheckpointedRuntime(
      jobOf(name, after),
      { sources: { clicks: { kind: 'file', path: file('rest.jsonl', clicks.slice(AT)) } }, sinks: { 'running-out': after.running, 'window-out': after.windows } },
      { dir: join(dir, 'ck'), intervalMs: 0, durable: false, start: { from: uri, store: { blobs: lazyS3Store(at.bucket, async () => clients.s3), prefix: at.prefix } } },
    );
    await restored.runtime.run();
    restored.checkpoints.close();
    assertExactlyOnce(ref.running.records, [...before.running.records, ...after.running.records], { orderKey: byUser });
    const windows = assertExactlyOnce(ref.windows.records, [...before.windows.records, ...after.windows.records], { orderKey: byUser });
    expect(windows.counts).toMatchObject({ lost: 0, duplicated: 0, unexpected: 0 });
    // Windows both fired before the savepoint and were pending in it (their timers restored).
    expect(before.windows.records.length).toBeGreaterThan(0);
    expect(after.windows.records.length).toBeGreaterThan(0);
  }, 120_000);
});
