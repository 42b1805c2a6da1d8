/**
 * A savepoint taken on the AWS path (the checkpoint steps, operator and ingest handlers on
 * DynamoDB Local and fauxqs) restores on the embedded runtime from its S3 location, the URI
 * `sluice restore --from s3://<bucket>/<job>/savepoints/<label>/` takes: the output before
 * the savepoint plus the embedded run's output over the rest of the input equals an
 * uninterrupted embedded run's (none lost, duplicated, unexpected or out of order per user),
 * for keyed process state and for windows whose timers were pending in the savepoint.
 * And the reverse, for both jobs: a savepoint directory the embedded runtime wrote, copied
 * to the bucket, restores in place on the AWS path (remapSavepoint, restoreInPlace), which
 * takes the rest.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CollectSink } from '../../lib/api/sinks.ts';
import { valueState } from '../../lib/api/state.ts';
import { Job } from '../../lib/api/stream.ts';
import { WatermarkStrategies } from '../../lib/api/types.ts';
import { INITIAL_CARRY } from '../../lib/aws/checkpoint/checkpoint-task.ts';
import { loadRestorePoint, readSavepointRequest, requestSavepoint, savepointFit, savepointPrefix } from '../../lib/aws/restore/savepoints.ts';
import { restoreInPlace } from '../../lib/aws/restore/restore.ts';
import { adoptPlan, remapSavepoint } from '../../lib/aws/restore/savepoint-remap.ts';
import { DynamoDbTable } from '../../lib/aws/dynamodb/dynamodb-table.ts';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { lazyS3Store, parseS3SavepointUri } from '../../lib/cli/savepoint-uri.ts';
import { openCheckpointedRuntime } from '../../lib/local/checkpointing.ts';
import { EmbeddedRuntime } from '../../lib/local/embedded.ts';
import { assertExactlyOnce, compareOutputs } from '../../lib/testing/checker.ts';
import { tmp } from '../checkpoint/jobs.ts';
import { clickJob, type Click, type Count, type Running } from './click-job.ts';
import { localClients, unique } from './helpers.ts';
import { awsJobPath } from '../support/aws-job-path.ts';

const clients = localClients();
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));
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

const opened: { close(): void }[] = [];
afterAll(() => opened.forEach((o) => o.close()));

/** A job on the AWS path against the local servers (awsJobPath), closed after the file. */
async function awsPath(job: Job, sinks: Record<string, CollectSink<any>>) {
  const aws = await awsJobPath(job, sinks, { prefix: 'port' });
  opened.push(aws);
  return aws;
}

/** The first AT clicks published, then one epoch that writes savepoint "mid". */
async function savepointAfterFirstClicks(aws: Awaited<ReturnType<typeof awsPath>>, name: string): Promise<void> {
  await aws.publish('clicks', clicks, 0, AT);
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

/**
 * Embedded -> AWS: the job runs embedded over the first AT clicks and takes savepoint
 * "mid"; its directory is copied to the job's bucket (where `sluice savepoint` on AWS
 * writes one), remapped and restored in place on the AWS path, which takes the rest of
 * the clicks. The reference is an uninterrupted embedded run; each sink's records.
 */
async function embeddedToAws<K extends Record<string, CollectSink<any>>>(name: string, jobOf: (sinks: K) => Job, sinksOf: () => K) {
  const { dir, file } = scratch('sluice-sp-port-');
  const ref = sinksOf();
  await new EmbeddedRuntime(jobOf(ref), { sources: { clicks: { kind: 'file', path: file('all.jsonl', clicks) } }, sinks: ref }).run();

  const before = sinksOf();
  const ck = join(dir, 'ck');
  let taken: Promise<unknown> | undefined;
  const first = await openCheckpointedRuntime(
    jobOf(before),
    { sources: { clicks: { kind: 'file', path: file('first.jsonl', clicks.slice(0, AT)) } }, sinks: before, onSourceRecords: (n) => void (n >= AT && !taken && (taken = first.checkpoints.savepoint('mid'))) },
    { dir: ck, intervalMs: 0, durable: false },
  );
  await first.runtime.run();
  await taken;
  first.checkpoints.close();

  const after = sinksOf();
  const job = jobOf(after);
  const aws = await awsPath(job, after);
  const { plan, table, bucket, staticQueues, blobs, clients: c } = aws;
  const spDir = join(ck, 'savepoints', 'mid');
  for (const f of readdirSync(spDir, { recursive: true, withFileTypes: true })) {
    if (!f.isFile()) continue;
    const path = join(f.parentPath, f.name);
    await blobs.put(savepointPrefix(name, 'mid') + path.slice(spDir.length + 1), readFileSync(path));
  }
  const point = await loadRestorePoint({ blobs, job: name }, 'mid');
  expect(point.meta?.takenOn).toBe('embedded');
  expect(savepointFit(point, plan)).toBe('same');
  const db = new DynamoDbTable(c.dynamodb, table, new AwsAccounting());
  const { manifest, manifestKey } = await remapSavepoint({ blobs, db, plan, point });
  await restoreInPlace({ job, plan, clients: c, tableName: table, bucket, queues: staticQueues, manifest, manifestKey });
  await adoptPlan(aws.pointers, plan);

  await aws.drain();
  await aws.publish('clicks', clicks, AT);
  await aws.drain();
  return { ref, before, after };
}

describe('savepoint portability between the embedded runtime and the AWS path', () => {
  it('a savepoint taken on the AWS path restores on the embedded runtime from its s3:// location, output equal to an uninterrupted run', async () => {
    const name = unique('port');
    const { dir, file } = scratch('sluice-sp-port-');
    const ref = new CollectSink<Running>();
    await new EmbeddedRuntime(countJob(name, ref), { sources: { clicks: { kind: 'file', path: file('all.jsonl', clicks) } }, sinks: { out: ref } }).run();

    // The AWS path: the first AT clicks consumed, then savepoint "mid" taken and copied out of the chain.
    const before = new CollectSink<Running>();
    const job = countJob(name, before);
    const aws = await awsPath(job, { out: before });
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
    const { ref, before, after } = await embeddedToAws(name, (k) => countJob(name, k.out), () => ({ out: new CollectSink<Running>() }));
    expect(before.out.records).toHaveLength(AT);
    const result = assertExactlyOnce(ref.out.records, [...before.out.records, ...after.out.records], { orderKey: byUser });
    expect(result.counts).toMatchObject({ lost: 0, duplicated: 0, unexpected: 0 });
    expect(result.reordered).toEqual([]);
  }, 120_000);

  it('a windowed job (event-time timers in the savepoint) the embedded runtime wrote restores on the AWS path: the windows fired equal an uninterrupted run\'s', async () => {
    const name = unique('portw');
    const sinksOf = () => ({ 'running-out': new CollectSink<Running>(), 'window-out': new CollectSink<Count>() });
    const jobOf = (k: ReturnType<typeof sinksOf>) => clickJob(name, { maxParallelism: 8, running: k['running-out'], windows: k['window-out'] });
    const { ref, before, after } = await embeddedToAws(name, jobOf, sinksOf);
    assertExactlyOnce(ref['running-out'].records, [...before['running-out'].records, ...after['running-out'].records], { orderKey: byUser });
    // The input ends at 2,190 in two source partitions, each holding the watermark at its
    // newest click: on the AWS path the last windows wait for event time to move on (a
    // bounded embedded run ends its input, firing them). Every window that fired is the
    // reference's, once; every window well behind the end fired.
    const windows = [...before['window-out'].records, ...after['window-out'].records];
    const fired = compareOutputs(ref['window-out'].records, windows);
    expect(fired.counts).toMatchObject({ duplicated: 0, unexpected: 0 });
    const settled = (w: Count) => w.start < 1_900;
    assertExactlyOnce(ref['window-out'].records.filter(settled), windows.filter(settled), { orderKey: byUser });
    // Windows fired on both sides of the savepoint (the pending ones' timers restored on AWS).
    expect(before['window-out'].records.length).toBeGreaterThan(0);
    expect(after['window-out'].records.filter(settled).length).toBeGreaterThan(0);
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
    const aws = await awsPath(job, { 'running-out': before.running, 'window-out': before.windows });
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
