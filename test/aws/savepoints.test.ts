/**
 * Savepoints on the AWS path through the real checkpoint steps, operator and ingest
 * handlers on DynamoDB Local and fauxqs (S3): a request item written by compare-and-set
 * (a second label while one is pending is refused, the same one is idempotent) makes the
 * next open a full-snapshot epoch even on a quiet job; once committed, the savepoint is
 * copied under `${job}/savepoints/<label>/` with its meta (plan fingerprint, state
 * descriptors), listed, kept when the chain's garbage collection runs, restorable from
 * the copy alone, and checked against a changed job with stateCompatibility(). A
 * coordinator that dies between the commit and the copy finishes it at its next open.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { CollectSink } from '../../lib/api/sinks.ts';
import { valueState } from '../../lib/api/state.ts';
import { Job } from '../../lib/api/stream.ts';
import { WatermarkStrategies } from '../../lib/api/types.ts';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { createCheckpointHandler } from '../../lib/aws/checkpoint/checkpoint-handler.ts';
import { DynamoDbTable } from '../../lib/aws/dynamodb/dynamodb-table.ts';
import { AwsInputLog, loggingPartitions } from '../../lib/aws/operator/input-log.ts';
import { type Carry, INITIAL_CARRY } from '../../lib/aws/checkpoint/checkpoint-task.ts';
import { createIngestHandler } from '../../lib/aws/ingest/ingest-handler.ts';
import { apiEvent } from '../../lib/testing/local-aws/feeder.ts';
import { createOperatorHandler } from '../../lib/aws/operator/operator-handler.ts';
import { listAwsCheckpoints, loadRestorePoint, readSavepointRequest, requestSavepoint, SavepointExistsError, savepointFit } from '../../lib/aws/restore/savepoints.ts';
import { restoreInPlace } from '../../lib/aws/restore/restore.ts';
import { adoptPlan, remapSavepoint } from '../../lib/aws/restore/savepoint-remap.ts';
import { RestoreError, StateCompatibilityError } from '../../lib/checkpoint/driver-errors.ts';
import { SavepointPendingError } from '../../lib/checkpoint/errors.ts';
import { manifestObjectKey } from '../../lib/checkpoint/protocol.ts';
import { restoreManifest } from '../../lib/checkpoint/snapshot.ts';
import { InjectedCrash } from '../../lib/errors.ts';
import { compile } from '../../lib/graph/compile.ts';
import type { Click, Running } from './click-job.ts';
import { localClients, runUntilDrained, unique } from './helpers.ts';
import { awsJobPath, STEP_LIMITS } from '../support/aws-job-path.ts';

const clients = localClients();
const opened: { close(): void }[] = [];
afterAll(() => [...Object.values(clients), ...opened.map((o) => ({ destroy: () => o.close() }))].forEach((c) => c.destroy()));
const LIMITS = STEP_LIMITS;
const USERS = ['ann', 'bob', 'cy', 'dee', 'eve', 'fay', 'gus'];
const clicks: Click[] = Array.from({ length: 90 }, (_, i) => ({ user: USERS[(i * 5) % 7], ts: 1000 + i * 10 }));

/** Running counts per user; `change` alters it the way a new version of the job might. */
function countJob(name: string, change: { parallelism?: number; keyedParallelism?: number; stateKind?: 'value' | 'map'; operator?: string; sink?: CollectSink<Running> } = {}): Job {
  const job = new Job(name, { parallelism: change.parallelism ?? 2, maxParallelism: 8 });
  const watermark = WatermarkStrategies.boundedOutOfOrderness(0, { idleTimeoutMs: 600_000 });
  const keyed = job.ingest<Click>('clicks', { timestamp: (c) => c.ts, watermark }).keyBy((c) => c.user);
  if (change.stateKind === 'map') {
    keyed
      .process<Running, any>({
        state: { n: { kind: 'map' } as never },
        processElement(c, ctx) {
          ctx.emit({ user: c.user, n: 0 });
        },
      })
      .name(change.operator ?? 'running')
      .sinkTo(new CollectSink<Running>(), 'out');
    return job;
  }
  keyed
    .process<Running, { n: ReturnType<typeof valueState<number>> }>({
      state: { n: valueState<number>() },
      processElement(c, ctx) {
        const n = (ctx.state.n.get() ?? 0) + 1;
        ctx.state.n.set(n);
        ctx.emit({ user: c.user, n });
      },
    })
    .name(change.operator ?? 'running')
    .parallelism(change.keyedParallelism ?? change.parallelism ?? 2)
    .sinkTo(change.sink ?? new CollectSink<Running>(), 'out');
  return job;
}

async function world(hook?: (point: string) => void) {
  const name = unique('svp');
  const job = countJob(name);
  const out = new CollectSink<Running>();
  const aws = await awsJobPath(job, { out }, { prefix: 'svp', hook });
  opened.push(aws);
  const send = (from: number, to: number) => aws.publish('clicks', clicks, from, to);
  return { ...aws, name, job, send, out };
}

/** Counts per user in a restored manifest. */
async function countsOf(point: Awaited<ReturnType<typeof loadRestorePoint>>): Promise<number> {
  let n = 0;
  for (const r of (await restoreManifest(point.manifest, point.blobs)).values()) for (const { fields } of r.entities.values()) n += Number(fields.get('n') ?? 0);
  return n;
}

describe('savepoints through the AWS checkpoint steps', () => {
  it('a request makes the next epoch a full, labelled one, stored apart from the chain, listed and restorable after garbage collection', async () => {
    const w = await world();
    await w.send(0, 40);
    let c = await w.step('resume', INITIAL_CARRY);
    c = await w.epoch(c, true); // epoch 1: full (the first)
    await w.send(40, 60);
    await w.drain();
    c = await w.epoch(c, true); // epoch 2: deltas
    // A quiet job: nothing new arrived, so without a request the coordinator goes idle.
    expect((await w.step('open', c)).next).toBe('end');

    const now = Date.now();
    expect((await requestSavepoint(w.at, 'before-change', now)).created).toBe(true);
    expect((await requestSavepoint(w.at, 'before-change', now + 1)).created).toBe(false);
    await expect(requestSavepoint(w.at, 'another', now)).rejects.toBeInstanceOf(SavepointPendingError);
    expect((await listAwsCheckpoints(w.at)).pending?.label).toBe('before-change');

    c = await w.epoch({ ...c, next: 'wait' }, false); // epoch 3: the savepoint, with no activity
    const request = await readSavepointRequest(w.pointers);
    expect(request).toMatchObject({ label: 'before-change', status: 'written', epoch: 3 });
    const listing = await listAwsCheckpoints(w.at);
    expect(listing.pending).toBeNull();
    expect(listing.savepoints.map((s) => [s.label, s.epoch])).toEqual([['before-change', 3]]);
    expect(listing.checkpoints.find((k) => k.epoch === 3)?.savepoint).toBe('before-change');
    const sp = listing.savepoints[0];
    expect(sp.states).toEqual([{ operator: 'running', kind: 'keyedProcess', states: [['n', 'value']] }]);
    expect(sp.positions).toEqual({ 'clicks#0': expect.any(Number), 'clicks#1': expect.any(Number) });
    expect(Object.values(sp.positions).reduce((a, b) => a + b, 0)).toBe(60);
    const point = await loadRestorePoint(w.at, 'before-change');
    const links = Object.values(point.manifest.partitions).flatMap((p) => p.chain);
    // Every participant wrote a full snapshot at the savepoint's epoch (epoch 2 held deltas).
    expect(links.every((l) => l.full && l.epoch === 3)).toBe(true);
    expect(links.length).toBe(Object.keys(point.manifest.partitions).length);
    expect(await countsOf(point)).toBe(60);

    // Later epochs and their garbage collection leave the copy alone; the label is taken.
    await w.send(60, 90);
    await w.drain();
    c = await w.epoch(c, true);
    expect((await listAwsCheckpoints(w.at)).checkpoints.find((k) => k.latest)?.epoch).toBe(4);
    // Epoch 3 left the retained history (one epoch by default), but the chain's collection keeps a savepoint's manifest.
    expect(await w.blobs.get(manifestObjectKey(w.name, 3))).toBeDefined();
    // Epoch 4's truncation kept the input logged after the savepoint: a restore from it replays that.
    const inputLog = new AwsInputLog(new DynamoDbTable(clients.dynamodb, w.table, new AwsAccounting()), w.blobs);
    let replayable = 0;
    for (const scope of loggingPartitions(w.plan)) {
      const runs = await inputLog.replay(scope, sp.positions);
      if (runs.length) expect(runs[0].from).toBe(sp.positions[runs[0].source]);
      replayable += runs.reduce((n, r) => n + r.records.length, 0);
    }
    expect(replayable).toBe(30);
    // A retained checkpoint (not a savepoint) only restores into the same plan.
    const ck = await loadRestorePoint(w.at, '4');
    expect(await countsOf(ck)).toBe(90);
    expect(savepointFit(ck, w.plan)).toBe('same');
    expect(() => savepointFit(ck, compile(countJob(w.name, { parallelism: 3 }).graph))).toThrow(RestoreError);
    // The copy is self-contained: it restores with the chain's own objects gone (a new chain's cleanup).
    const originals = links.map((l) => l.key);
    await w.blobs.delete([...originals, manifestObjectKey(w.name, 3)]);
    expect(await w.blobs.get(originals[0])).toBeUndefined();
    expect(await countsOf(await loadRestorePoint(w.at, 'before-change'))).toBe(60);
    await expect(requestSavepoint(w.at, 'before-change', Date.now())).rejects.toBeInstanceOf(SavepointExistsError);
    await expect(loadRestorePoint(w.at, 'nope')).rejects.toBeInstanceOf(RestoreError);
    await expect(loadRestorePoint(w.at, '1')).rejects.toThrow(/epoch 1, which is not retained/);

    // Compatibility with the job as it is now: the same, a compatible change, incompatible changes.
    expect(savepointFit(point, w.plan)).toBe('same');
    expect(savepointFit(point, compile(countJob(w.name, { parallelism: 3 }).graph))).toBe('changed');
    const bad = (() => {
      try {
        savepointFit(point, compile(countJob(w.name, { stateKind: 'map', operator: 'running' }).graph));
      } catch (e) {
        return e;
      }
    })() as StateCompatibilityError;
    expect(bad).toBeInstanceOf(StateCompatibilityError);
    expect(bad.problems).toEqual(['operator "running": state "n" was value state, is now map state']);
    const renamed = (() => {
      try {
        savepointFit(point, compile(countJob(w.name, { operator: 'counter', parallelism: 3 }).graph));
      } catch (e) {
        return e;
      }
    })() as StateCompatibilityError;
    expect(renamed.problems).toEqual(['stateful operator "running" (keyedProcess) has no operator of that name in this job']);
  }, 120_000);

  it('a changed job (the keyed operator on 3 partitions) restores from the savepoint in place: state moved by key group, the logged input after it replayed', async () => {
    const w = await world();
    await w.send(0, 40);
    let c = await w.step('resume', INITIAL_CARRY);
    c = await w.epoch(c, true);
    await requestSavepoint(w.at, 'v1', Date.now());
    c = await w.epoch(c, false); // the savepoint: 40 clicks
    await w.send(40, 60); // consumed after the savepoint: in the input log
    await w.drain();

    // Version 2 of the job, deployed over the same resources: the keyed stage on 3 partitions.
    const out = new CollectSink<Running>();
    const v2 = countJob(w.name, { keyedParallelism: 3, sink: out });
    const plan2 = compile(v2.graph);
    expect(plan2.stages.map((s) => s.parallelism)).toEqual([2, 3]);
    const point = await loadRestorePoint(w.at, 'v1');
    expect(savepointFit(point, plan2)).toBe('changed');
    const { manifest, manifestKey } = await remapSavepoint({ blobs: w.blobs, db: new DynamoDbTable(clients.dynamodb, w.table, new AwsAccounting()), plan: plan2, point });
    expect(Object.keys(manifest.partitions).sort()).toEqual(['0/0', '0/1', '1/0', '1/1', '1/2']);
    const result = await restoreInPlace({ job: v2, plan: plan2, clients, tableName: w.table, bucket: w.bucket, queues: w.staticQueues, manifest, manifestKey });
    expect(Object.values(result.sources).reduce((n, s) => n + s.replayed, 0)).toBe(20);
    await adoptPlan(w.pointers, plan2);

    const coordinator = createCheckpointHandler({ job: v2, ...clients, bucket: w.bucket, tableName: w.table, queues: w.staticQueues });
    const ingest = createIngestHandler({ job: v2, sqs: clients.sqs, queues: w.staticQueues });
    const drain = () =>
      runUntilDrained({
        sqs: clients.sqs,
        queues: w.queues,
        container: () => ({ invoke: createOperatorHandler({ job: v2, ...clients, tableName: w.table, queues: w.staticQueues, queuePrefix: w.prefix, sinks: { out }, checkpointStore: w.blobs }) }),
        maxInvocations: 2000,
      });
    await drain();
    for (let i = 60; i < 90; i += 10) expect((await ingest(apiEvent('clicks', JSON.stringify(clicks.slice(i, i + 10))))).statusCode).toBe(202);
    await drain();
    // Every count continues from the savepoint's: the last count per user is its clicks in 0..90.
    const last = new Map(out.records.map((r) => [r.user, r.n]));
    const expected = new Map<string, number>();
    for (const k of clicks) expected.set(k.user, (expected.get(k.user) ?? 0) + 1);
    expect(last).toEqual(expected);
    // Each user's counts after the restore are consecutive from its count at the savepoint (40 clicks).
    for (const user of USERS) {
      const ns = out.records.filter((r) => r.user === user).map((r) => r.n);
      const before = clicks.slice(0, 40).filter((k) => k.user === user).length;
      expect(ns).toEqual(Array.from({ length: expected.get(user)! - before }, (_, i) => before + i + 1));
    }
    // The coordinator continues under the new plan: its next checkpoint holds all 90.
    const step = (action: string, carry: Partial<Carry>) => coordinator({ action, execution: 'test', carry, limits: LIMITS });
    let k = await step('resume', INITIAL_CARRY);
    await coordinator.acks.touch(Date.now());
    k = await step('open', k);
    expect(k.next).toBe('inject');
    k = await step('inject', k);
    await drain();
    k = await step('decide', k);
    expect(k.next).toBe('commit');
    await step('commit', k);
    const latest = (await listAwsCheckpoints(w.at)).checkpoints.find((x) => x.latest)!;
    expect(await countsOf(await loadRestorePoint(w.at, String(latest.epoch)))).toBe(90);
  }, 180_000);

  it('a coordinator that dies between the commit and the copy finishes the savepoint at its next open', async () => {
    let crash = true;
    const w = await world((point) => {
      if (point === 'savepoint:before-copy' && crash) {
        crash = false;
        throw new InjectedCrash('coordinator gone before the savepoint copy');
      }
    });
    await w.send(0, 30);
    let c = await w.step('resume', INITIAL_CARRY);
    await requestSavepoint(w.at, 'sp1', Date.now());
    c = await w.step('open', c);
    expect(c.next).toBe('inject');
    c = await w.step('inject', c);
    await w.drain();
    c = await w.step('decide', c);
    await expect(w.step('commit', c)).rejects.toThrow(/InjectedCrash|coordinator gone/);
    expect((await readSavepointRequest(w.pointers))?.status).toBe('pending');
    // The state machine's Catch -> Backoff -> Resume, then the next open.
    c = await w.step('resume', { ...c, error: { Error: 'Sluice.Retryable' } });
    expect(c.next).toBe('wait');
    c = await w.step('open', c);
    expect(c.next).toBe('end'); // nothing else to do: a quiet job
    expect(await readSavepointRequest(w.pointers)).toMatchObject({ label: 'sp1', status: 'written', epoch: 1 });
    expect(await countsOf(await loadRestorePoint(w.at, 'sp1'))).toBe(30);
  }, 120_000);
});
