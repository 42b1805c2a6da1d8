/**
 * The S3 transactional file sink against fauxqs (S3) and DynamoDB Local (its commit
 * pointer): deliveries become visible only when their epoch commits, redelivered and
 * duplicated batches are written once, an aborted epoch's objects wait for the next
 * commit, a crash between prepare and commit is finished by the commit on resume, and a
 * rollback (recover) makes what was staged after the restored checkpoint disappear.
 * The last test drives the real checkpoint steps (createCheckpointHandler) through one
 * epoch, with a coordinator crash after the pointer write.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwsSinks } from '../../lib/aws/sinks/sinks.ts';
import { Job } from '../../lib/api/stream.ts';
import { AwsAccounting } from '../../lib/aws/cost/accounting.ts';
import { createCheckpointHandler } from '../../lib/aws/checkpoint/checkpoint-handler.ts';
import { INITIAL_CARRY, type Carry } from '../../lib/aws/checkpoint/checkpoint-task.ts';
import { createStateTable } from '../../lib/aws/dynamodb/dynamodb-table.ts';
import { createBucket, S3BlobStore } from '../../lib/aws/s3/s3-blob-store.ts';
import { S3FileSink } from '../../lib/aws/sinks/s3-file-sink.ts';
import { parseS3FileSinkOptions, SinkRecordsRejectedError } from '../../lib/aws/sinks/sink-options.ts';
import { createStageQueues, StaticQueues } from '../../lib/aws/sqs/sqs-queues.ts';
import { ConfigError, SluiceError } from '../../lib/errors.ts';
import { compile } from '../../lib/graph/compile.ts';
import { sourcePartitionKey } from '../../lib/checkpoint/protocol.ts';
import type { BarrierAck } from '../../lib/transport/envelope.ts';
import { drainQueue, localClients, unique } from './helpers.ts';

const clients = localClients();
const bucket = unique('sinkfiles').toLowerCase();
const table = unique('sluice-sink');

beforeAll(async () => {
  await Promise.all([createBucket(clients.s3, bucket), createStateTable(clients.dynamodb, table)]);
});
afterAll(() => Object.values(clients).forEach((c) => c.destroy()));

/** A sink as one container of the operator function would have it (its own high-water marks). */
function container(prefix: string, accounting = new AwsAccounting()) {
  const sink = new S3FileSink<{ v: string }>(parseS3FileSinkOptions({ prefix }));
  sink.bindAws({ job: 'files', sink: 'out', s3: clients.s3, dynamodb: clients.dynamodb, bucket, tableName: table, accounting });
  return sink;
}

const batch = (producer: string, seq: number, afterBarrier: number, ...vs: string[]) => ({ producer, seq, afterBarrier, records: vs.map((v) => ({ v })) });
const values = async (sink: S3FileSink<{ v: string }>) => (await sink.readCommitted()).records.map((r) => r.v);
const objects = (prefix: string) => new S3BlobStore({ s3: clients.s3, bucket, prefix: `files/sinks/${prefix}/` }).list('');

describe('S3FileSink', () => {
  it('makes deliveries visible only at commit; redelivered, duplicated and stale batches count once', async () => {
    const acc = new AwsAccounting();
    const a = container('p1', acc);
    await a.write(batch('1:0', 1, 0, 'a', 'b'));
    await a.write(batch('1:1', 1, 0, 'x'));
    await a.write(batch('1:0', 1, 0, 'a', 'b')); // duplicate in the same container: skipped
    expect(a.duplicatesDropped).toBe(1);
    await a.write(batch('1:0', 2, 0)); // empty: no object
    // A cold container gets the same outbox again: same names, same bytes, no new object.
    const b = container('p1');
    await b.write(batch('1:0', 1, 0, 'a', 'b'));
    expect((await objects('p1')).filter((k) => k.startsWith('data/'))).toHaveLength(2);
    expect(await values(a)).toEqual([]);

    await a.prepare(1);
    expect(await values(a)).toEqual([]); // prepared is not visible
    await a.commit(1);
    expect(await values(a)).toEqual(['a', 'b', 'x']);
    await a.commit(1); // idempotent
    expect((await a.readCommitted()).epoch).toBe(1);
    await a.prepare(2); // an epoch without output of this sink: nothing written, the pointer stays
    await a.commit(2);
    expect((await a.readCommitted()).epoch).toBe(1);
    expect((await objects('p1')).filter((k) => !k.startsWith('data/'))).toEqual(['manifests/000000000001.json']);

    // After barrier 1; then an old batch comes back late from a third container: already committed.
    await a.write(batch('1:1', 2, 1, 'y'));
    await a.write(batch('1:0', 3, 1, 'c'));
    await container('p1').write(batch('1:1', 1, 0, 'x'));
    await a.prepare(3);
    await a.commit(3);
    expect(await values(a)).toEqual(['a', 'b', 'x', 'c', 'y']);
    expect((await a.readCommitted({ afterEpoch: 1 })).records.map((r) => r.v)).toEqual(['c', 'y']);
    expect(acc.get('s3', 'PutObject').requests).toBeGreaterThan(0);
    expect(acc.get('dynamodb', 'PutItem').requests).toBe(2); // one pointer write per commit
  });

  it('keeps an aborted epoch invisible; the next committed epoch publishes its records once', async () => {
    const s = container('p2');
    await s.write(batch('1:0', 1, 0, 'a'));
    await s.prepare(1);
    await s.commit(1);
    await s.write(batch('1:0', 2, 1, 'b'));
    await s.prepare(2); // epoch 2 then aborts: its pointer never lands, commit(2) never runs
    expect(await values(s)).toEqual(['a']);
    await s.write(batch('1:0', 3, 2, 'c')); // a partition that passed barrier 2 before the abort
    await s.write(batch('1:0', 4, 3, 'late')); // after barrier 3: belongs to epoch 4
    // Stray uploads under data/ (not written by the sink) are never committed and do not stop the listing.
    const raw = new S3BlobStore({ s3: clients.s3, bucket, prefix: 'files/sinks/p2/' });
    await raw.put('data/000000000002/notes.txt', new TextEncoder().encode('{"v":"stray"}\n'));
    await raw.put('data/zzz', new TextEncoder().encode('{"v":"stray"}\n'));
    await s.prepare(3);
    await s.commit(3);
    expect(await values(s)).toEqual(['a', 'b', 'c']);
  });

  it('finishes a commit after a crash between prepare and commit (a new process commits on resume)', async () => {
    const s = container('p3');
    await s.write(batch('2:0', 1, 0, 'a'));
    await s.write(batch('2:1', 1, 0, 'b'));
    await s.prepare(1);
    // Crash. A new process (the resumed coordinator) commits: the prepared list is read back.
    const resumed = container('p3');
    await resumed.commit(1);
    await resumed.commit(1);
    expect(await values(resumed)).toEqual(['a', 'b']);
    expect((await objects('p3')).filter((k) => !k.startsWith('data/'))).toEqual(['manifests/000000000001.json']);
  });

  it('recover(e) rolls back to checkpoint e: later commits and staged objects vanish, the same names can be written again', async () => {
    const s = container('p4');
    await s.write(batch('1:0', 1, 0, 'a'));
    await s.commit(1);
    await s.write(batch('1:0', 2, 1, 'b'));
    await s.commit(2);
    await s.write(batch('1:0', 3, 2, 'c'));
    expect(await values(s)).toEqual(['a', 'b']);
    await s.recover(1);
    expect(await values(s)).toEqual(['a']);
    expect(await objects('p4')).toEqual(['data/000000000000/1_0/000000000001-1.jsonl', 'manifests/000000000001.json']);
    // The restored run produces seq 2 again, with other content: not a conflict.
    await s.write(batch('1:0', 2, 1, 'B'));
    await s.commit(2);
    expect(await values(s)).toEqual(['a', 'B']);
  });

  it('reports records it cannot serialise and writes the rest of the delivery', async () => {
    const s = container('p5');
    const err = await s.write({ producer: '1:0', seq: 1, afterBarrier: 0, records: [{ v: 'a' }, { v: 10n as never }, { v: 'c' }] }).catch((e) => e);
    expect(err).toBeInstanceOf(SinkRecordsRejectedError);
    expect(err.rejected).toEqual([{ index: 1, record: { v: 10n }, error: expect.stringMatching(/not JSON: .*BigInt/) }]);
    await s.commit(1);
    expect(await values(s)).toEqual(['a', 'c']);
  });

  it('validates its options and refuses to run unbound', async () => {
    expect(() => AwsSinks.s3Files({ prefix: '' })).toThrow(ConfigError);
    expect(() => AwsSinks.s3Files({ prefix: '/abs' })).toThrow(/AwsSinks\.s3Files\.prefix: expected no leading/);
    expect(() => AwsSinks.s3Files({ prefix: 'ok', bucket: 'Bad_Bucket' })).toThrow(/AwsSinks\.s3Files\.bucket: expected an S3 bucket name .* received "Bad_Bucket"/);
    expect(() => AwsSinks.s3Files(null as never)).toThrow(/expected an options object, received null/);
    const unbound = AwsSinks.s3Files<{ v: string }>({ prefix: 'x' });
    await expect(unbound.write(batch('1:0', 1, 0, 'a'))).rejects.toThrow(/not bound to a job/);
  });
});

describe('S3FileSink in the checkpoint steps', () => {
  function filesJob(name: string) {
    const job = new Job(name, { parallelism: 2, maxParallelism: 8 });
    job.ingest<{ v: string }>('in').sinkTo(AwsSinks.s3Files<{ v: string }>({ prefix: 'committed' }), 'files');
    return job;
  }
  const limits = { maxEpochs: 50, maxFailures: 5, leaseMs: 60_000, activityGrainMs: 0, epochTimeoutMs: 60_000 };

  it('prepares before the pointer write and commits after; a coordinator crash after the pointer is finished by resume', async () => {
    const job = filesJob(unique('ckf').replace(/-/g, '_').slice(0, 40));
    const plan = compile(job.graph);
    const queues = await createStageQueues(clients.sqs, plan, { prefix: `${unique('q')}-` });
    let clock = 1_000_000;
    let crash = true;
    const handler = createCheckpointHandler({
      job,
      ...clients,
      bucket,
      tableName: table,
      queues: new StaticQueues(queues),
      overrides: {
        now: () => (clock += 10),
        hook: (point) => {
          if (point === 'commit:pointer-written' && crash) {
            crash = false;
            throw new (class extends SluiceError {
              readonly code = 'TEST_CRASH';
              readonly retryable = false;
            })('coordinator crashed after the pointer write');
          }
        },
      },
    });
    const step = (action: string, carry: Partial<Carry>) => handler({ action, execution: 'e1', carry, limits });
    // What the operator function writes (another process: its own sink instance, same place).
    const operatorSide = new S3FileSink<{ v: string }>(parseS3FileSinkOptions({ prefix: 'committed' }));
    operatorSide.bindAws({ job: job.name, sink: 'files', s3: clients.s3, dynamodb: clients.dynamodb, bucket, tableName: table });
    const reader = job.graph.sinks()[0].spec as unknown as { sink: ReturnType<typeof AwsSinks.s3Files<{ v: string }>> };

    let c = await step('resume', INITIAL_CARRY);
    await handler.acks.touch(clock);
    c = await step('open', c);
    expect(c.next).toBe('inject');
    c = await step('inject', c);
    await drainQueue(clients.sqs, queues[0].url);
    await operatorSide.write(batch('0:0', 1, 0, 'before-1'));
    await operatorSide.write(batch('0:1', 1, 0, 'also-before-1'));
    await operatorSide.write(batch('0:0', 2, 1, 'after-1'));
    const acks: BarrierAck[] = handler.setup.participants.map((p) => ({
      epoch: c.epoch,
      stage: p.stage,
      partition: p.partition,
      baseEpoch: 0,
      snapshot: { key: `${job.name}/snapshots/${p.stage}-${p.partition}/000000000001-t.json`, bytes: 1, entities: 0, full: true },
      positions: Object.fromEntries(p.sources.map((s) => [sourcePartitionKey(s, p.partition), 1])),
      alignedAt: clock,
      ackedAt: clock,
    }));
    await handler.acks.put(acks);
    c = await step('decide', c);
    expect(c.next).toBe('commit');
    await expect(step('commit', c)).rejects.toThrow(/coordinator crashed/);
    // The pointer landed, the sink commit did not run: nothing visible yet.
    expect((await reader.sink.readCommitted()).records).toEqual([]);
    c = await step('resume', { ...c, error: { Error: 'TEST_CRASH' } });
    expect((await reader.sink.readCommitted()).records.map((r) => r.v)).toEqual(['before-1', 'also-before-1']);
    expect((await reader.sink.readCommitted()).epoch).toBe(1);
  });
});
